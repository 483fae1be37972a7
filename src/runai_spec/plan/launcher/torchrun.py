"""torchrun: its layout and rendezvous flags, per-rank logs, the env it reads, its shutdown window."""

from ...facts.kubeflow import NPROC_FLAG, POD_NAME_ENV, RDZV_BACKEND, kubelet_literal
from ...facts.torchrun import (
    DISABLE_SHARED_STORE,
    EXECUTABLE_ENTRY,
    LAUNCHER_MODULES,
    LOG_DIR_FLAG,
    MAX_RESTARTS_FLAG,
    NO_PYTHON,
    RANK_LOGS,
    RANK_PREFIX,
    RANK_PREFIX_ENV,
    RDZV_BACKEND_FLAGS,
    RDZV_CONF_FLAGS,
    RDZV_ENDPOINT_FLAGS,
    RDZV_ID_FLAG,
    SHUTDOWN_MARGIN_S,
    SHUTDOWN_TIMEOUT_ENV,
    STANDALONE_FLAG,
    TEE_FLAG,
    entry_point_kind,
    flag,
    shutdown_timeout_s,
    shutdown_window,
    split_flag,
)
from ...load.presets import Preset
from ..origins import Entry, Origin, Sources, derived, same
from .base import PYTORCHJOB, LauncherFile, LaunchSetup
from .rendezvous import RendezvousPlan, rendezvous_plan


def rank_log_dir(checkpoint_dir: str) -> str:
    """torchrun's --log-dir: a folder per pod on the checkpoint volume ($(POD_NAME) is
    expanded by the kubelet from the downward API variable). The folder's text is kept as
    written: the mount-path rule refuses a trailing `/`, render never rewrites a value."""
    return f"{kubelet_literal(checkpoint_dir)}/{RANK_LOGS}/$({POD_NAME_ENV[0]})"


def rendezvous_flags(r: RendezvousPlan | None) -> tuple[str, ...]:
    """torchrun's flags for rendezvous R: none for static (bare torchrun: the operator's
    PET_MASTER_ADDR/PORT); for an elastic job backend and endpoint are the operator's
    PET_RDZV_* (elasticPolicy), its restarts PET_MAX_RESTARTS."""
    if r is None or r.backend == "static":
        return ()
    flags: list[str] = []
    if r.endpoint is not None:
        flags += [flag(RDZV_BACKEND_FLAGS[0], r.backend), flag(RDZV_ENDPOINT_FLAGS[0], r.endpoint)]
    if r.rdzv_id is not None:
        flags.append(flag(RDZV_ID_FLAG, r.rdzv_id))
    if r.max_restarts is not None:
        flags.append(flag(MAX_RESTARTS_FLAG, r.max_restarts))
    conf = [
        f"{key}={value}"
        for key, value in (
            ("join_timeout", r.join_timeout_s),
            ("read_timeout", r.read_timeout_s),
            ("last_call_timeout", r.last_call_timeout_s),
        )
        if value is not None
    ]
    if conf:
        flags.append(flag(RDZV_CONF_FLAGS[0], ",".join(conf)))
    return tuple(flags)


# The preset field each launcher flag renders.
_FLAG_FIELDS = {
    NPROC_FLAG: "gpus_per_pod",
    MAX_RESTARTS_FLAG: "rendezvous.max_restarts",
    RDZV_BACKEND_FLAGS[0]: "rendezvous.backend",
    RDZV_CONF_FLAGS[0]: "rendezvous",
}


class TorchrunLauncher:
    """torchrun, PID 1 of every pod: `--standalone` on one node; on several, the operator's
    PET_* (static) or the preset's c10d rendezvous, whose agents restart the ranks."""

    name = "torchrun"
    workload = PYTORCHJOB
    programs: tuple[str, ...] = ("torchrun",)
    # its topology flags in any spelling (argparse takes `-` and `_`), `--x` or `--x=v`
    reserved_flags = (
        r"--(nproc[-_]per[-_]node|nnodes|node[-_]rank|master[-_]addr|master[-_]port|rdzv[-_].*|standalone)"
    )
    reserved_modules: tuple[str, ...] = tuple(
        m for m in LAUNCHER_MODULES if m.startswith("torch.distributed.")
    )
    restarts_ranks = True
    forwards_sigterm = True

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        return rendezvous_plan(preset, job)

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        if setup.layout != "multi-node":
            return ("torchrun", STANDALONE_FLAG, flag("--nnodes", 1), flag(NPROC_FLAG, setup.procs_per_pod))
        # Multi-node: nodes, node rank, master and processes per node come from the operator's
        # PET_* variables, which torchrun reads as the defaults of its flags; an explicit flag
        # wins over its variable (torch/distributed/argparse_util.py).
        head: tuple[str, ...] = ("torchrun",)
        if setup.elastic:
            # Operator 1.7 gives a Worker-only job no PET_NPROC_PER_NODE (it set it in the
            # Master branch only); 1.8+ sets it from spec.nprocPerNode. The explicit flag makes
            # the process count the same on every supported operator version.
            head += (flag(NPROC_FLAG, setup.procs_per_pod),)
        return head + rendezvous_flags(setup.rendezvous)

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        argv = self.head(setup)
        if entry_point_kind(setup.entrypoint) == EXECUTABLE_ENTRY:  # a wrapper script
            argv += (NO_PYTHON,)
        return (*argv, flag(LOG_DIR_FLAG, self.rank_logs(setup)), flag(TEE_FLAG, 3))

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        return rank_log_dir(setup.checkpoint_dir)

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        return {}  # its rendezvous is its flags (rendezvous_flags), its backend's switch aside

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        env: dict[str, Entry] = {}
        r = setup.rendezvous
        if r is not None and r.backend == RDZV_BACKEND:
            key, value = DISABLE_SHARED_STORE
            why = (
                "c10d: a pod restarted in place must be able to rejoin "
                "(torch's shared rendezvous store deadlocks it)"
            )
            env[key] = same(derived(why), key, value)
        return env | agent_env(setup, src)

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        if arg == NO_PYTHON:
            return src.profile("command[0]")
        name = split_flag(arg)[0]
        if name in _FLAG_FIELDS:
            return src.preset(_FLAG_FIELDS[name])
        if name == RDZV_ENDPOINT_FLAGS[0]:
            return derived(
                "c10d store on the Master's service: the operator's MASTER_ADDR and "
                "MASTER_PORT, expanded by the kubelet"
            )
        if name == RDZV_ID_FLAG:
            return derived("rendezvous id: the job name (unique while the job exists)")
        if name in (LOG_DIR_FLAG, TEE_FLAG):
            return derived(
                "a log per rank (site guide), kept on the checkpoint volume so that "
                "it outlives the pod; the pod log carries every rank's lines too"
            )
        return derived(f"launcher for the {setup.layout} layout (site guide)")

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        return shutdown_window(torch_version, grace_s)

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        return ()


def agent_env(setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
    """What torchrun's agent reads from the env in every launcher that runs it (torchrun, and
    accelerate launch, which runs torchrun in its own process): the shutdown window and the
    rank prefix of each log line."""
    # torchrun (PID 1) gives its ranks this long from SIGTERM to SIGKILL (torch >= 2.12;
    # facts.torchrun.SHUTDOWN_TIMEOUT_ENV): the pod's grace period less a margin, not torch's 30 s
    window = derived(
        f"torchrun's SIGTERM-to-SIGKILL window for its ranks (torch >= 2.12): the grace "
        f"period less {SHUTDOWN_MARGIN_S} s, before the kubelet's SIGKILL"
    )
    why = "each pod log line names its global rank (`logs --out` splits them)"
    return {
        SHUTDOWN_TIMEOUT_ENV: (
            SHUTDOWN_TIMEOUT_ENV,
            str(shutdown_timeout_s(setup.grace_s)),
            window,
            src.preset("termination_grace_period_seconds"),
        ),
        RANK_PREFIX_ENV: same(derived(why), RANK_PREFIX_ENV, RANK_PREFIX),
    }
