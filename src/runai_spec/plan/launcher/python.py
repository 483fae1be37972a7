"""The one-GPU launcher: `python -u` runs the entry point, the pod's one process (site guide)."""

from ...facts.torchrun import EXECUTABLE_ENTRY, SINGLE_GPU_LAUNCHER, entry_point_kind
from ...load.presets import Preset
from ..origins import Entry, Origin, Sources, derived, same
from .base import PYTORCHJOB, LauncherFile, LaunchSetup
from .rendezvous import RendezvousPlan

LOCAL_RANK = ("LOCAL_RANK", "0")


class PythonLauncher:
    """`python -u ENTRY`: no rendezvous, no agent; the script is PID 1 of its container."""

    name = "python"
    workload = PYTORCHJOB
    programs: tuple[str, ...] = ("python", "python3")
    reserved_flags = ""  # any flag before the entry point is refused already (rule `launcher`)
    reserved_modules: tuple[str, ...] = ()
    restarts_ranks = False
    forwards_sigterm = False

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        return None

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        return SINGLE_GPU_LAUNCHER

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        # a wrapper script runs itself: no `python -u` before it
        return () if entry_point_kind(setup.entrypoint) == EXECUTABLE_ENTRY else self.head(setup)

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        return None

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        return {}  # one process: no rendezvous

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        # Scripts written for torchrun read LOCAL_RANK; nothing else sets it for bare python.
        key, value = LOCAL_RANK
        return {key: same(derived("single GPU: bare python sets no LOCAL_RANK"), key, value)}

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        return derived(f"launcher for the {setup.layout} layout (site guide)")

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        return grace_s  # the script itself has the grace period (if it handles SIGTERM)

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        return ()
