"""The launcher protocol, the workload kinds a launcher's job is, and the registry by name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, get_args

from ...errors import InputError
from ...facts.kubeflow import API_VERSION, KIND, REPLICA_TYPES
from ...load.presets import MpiSettings, Preset
from ...load.profile import LauncherName, Profile
from ...records import Record
from ..origins import Entry, Origin, Sources
from .rendezvous import RendezvousPlan


class WorkloadKind(Record):
    """The Kubernetes object a launcher's job is: its apiVersion and kind, the template (in
    templates/) that renders it, and its replica roles in the order ranks are numbered."""

    api_version: str
    kind: str
    template: str
    roles: tuple[str, ...]


# Kubeflow's PyTorchJob (facts/kubeflow.py): a Master and Workers, every pod running the launcher
PYTORCHJOB = WorkloadKind(API_VERSION, KIND, "pytorchjob.json.j2", REPLICA_TYPES)


class LaunchSetup(Record):
    """What a launcher is planned from: the layout, processes per pod, the rendezvous across
    pods, the profile's entry point, its checkpoint folder, the pods' grace period and the
    number of pods."""

    layout: str
    procs_per_pod: int
    elastic: bool = False
    rendezvous: RendezvousPlan | None = None
    entrypoint: tuple[str, ...] = ()
    checkpoint_dir: str = ""
    grace_s: int = 30
    pods: int = 1
    # the profile's accelerate_config, as canonical JSON ("": none): its training keys
    launcher_config: str = ""
    mpi: MpiSettings | None = None  # the preset's MPIJob settings (the mpi launcher's)
    env_names: tuple[str, ...] = ()  # the profile's and preset's variables (mpirun forwards them)
    job: str = ""  # the job's name (the profile's)
    master_port: int = 0  # the preset's master_port
    strategy: str = "ddp"  # the profile's strategy (accelerate: which of its launchers)
    zero_stage: int | None = None  # the profile's DeepSpeed ZeRO stage (accelerate's --zero_stage)


class LauncherFile(Record):
    """A file a launcher reads in the pod (accelerate's config). Its text travels in the job
    itself, as a pod annotation mounted as a file through the downward API: the workload stays
    one object, which submit, Run:ai, diff and the admission policy already handle."""

    volume: str  # the pod volume's name
    mount_dir: str  # where the container mounts it (read-only)
    name: str  # the file's name in that folder
    annotation: str  # the pod annotation that holds the text
    text: str

    @property
    def path(self) -> str:
        return f"{self.mount_dir}/{self.name}"

    @property
    def field_path(self) -> str:
        """The downward API's reference to the annotation."""
        return f"metadata.annotations['{self.annotation}']"


class Launcher(Protocol):
    """One launcher: what the container runs before the entry point, the env it owns, what a
    researcher's command may not carry, its rendezvous and SIGTERM semantics, and the
    workload kind its job is. One class per launcher, registered by name (register_launcher)."""

    name: str  # the registry's name, e.g. torchrun
    workload: WorkloadKind
    programs: tuple[str, ...]  # the argv[0] names that start it (what the launcher rule refuses)
    reserved_flags: str  # a regex of its topology flags, refused in a researcher's command ("": none)
    reserved_modules: tuple[str, ...]  # its modules (`-m ...`), refused as an entry point
    restarts_ranks: bool  # its agent restarts the pod's ranks when a peer fails (maxRestarts)
    forwards_sigterm: bool  # as PID 1 it passes SIGTERM to the ranks (else the script is PID 1)

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        """The preset's rendezvous across pods for job JOB; None where it has none."""
        ...

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        """The launcher and its flags for the layout and rendezvous (no entry point's needs)."""
        ...

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        """Everything the container runs before the entry point: head, what the entry point
        needs (an executable), per-rank log flags."""
        ...

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        """The folder of its per-rank logs in the pod (None: the pod log only)."""
        ...

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        """The variables it owns, with where each came from."""
        ...

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        """The variables of env() that carry SETUP's rendezvous (its id, its endpoint), values
        only: the smoke job, which has a rendezvous of its own, sets them from its own setup."""
        ...

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        """Where argument ARG of its argv came from."""
        ...

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        """Seconds the ranks have from SIGTERM to SIGKILL in a pod of grace period GRACE_S
        (None: it depends on a version the profile does not name)."""
        ...

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        """The files it reads in the pod, rendered by the tool (none: ())."""
        ...


_REGISTRY: dict[str, Launcher] = {}


def register_launcher(name: str, cls: type[Launcher]) -> None:
    """Make launcher class CLS the one called NAME (its instance is made once, here)."""
    launcher = cls()
    if launcher.name != name:
        raise ValueError(f"launcher class {cls.__name__} is called {launcher.name!r}, not {name!r}")
    _REGISTRY[name] = launcher


def launcher_named(name: str) -> Launcher:
    """The registered launcher NAME; bad input naming the closest one otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        from difflib import get_close_matches  # only for a wrong name

        close = get_close_matches(name, _REGISTRY, n=1)
        raise InputError(
            f"no launcher named {name!r}",
            field="launcher",
            hint=f"did you mean {close[0]!r}?" if close else "launchers: " + ", ".join(sorted(_REGISTRY)),
        ) from None


def launcher_names() -> tuple[str, ...]:
    """Every registered launcher's name, in the order they were registered."""
    return tuple(_REGISTRY)


def registered_launchers() -> tuple[Launcher, ...]:
    return tuple(_REGISTRY.values())


# The launchers a profile may choose (its `launcher` field); the first is the default. One GPU
# always runs `python` (the site guide's layout: one process, no launcher to choose).
PROFILE_LAUNCHERS: tuple[str, ...] = get_args(LauncherName)


def choose_launcher(
    layout: str, asked: str | None = None, *, profile: str | None = None, elastic: bool = False
) -> str:
    """The launcher a plan uses, by name (the one place this is chosen): ASKED where given;
    else `python` for one GPU; else the profile's choice, except on an elastic preset, which
    only torchrun expresses (accelerate has no MIN:MAX nodes and no rendezvous id: the
    launcher rule says so); else `torchrun`."""
    if asked is not None:
        return asked
    if layout == "single-gpu":
        return "python"
    if profile is not None and not elastic:
        return profile
    return PROFILE_LAUNCHERS[0]


def launcher_for(
    layout: str, gpus: int, elastic: bool = False, rendezvous: RendezvousPlan | None = None
) -> tuple[str, ...]:
    """The site guide's launcher for each layout, with the preset's rendezvous flags."""
    return launcher_named(choose_launcher(layout)).head(LaunchSetup(layout, gpus, elastic, rendezvous))


def launch_setup(
    profile: Profile,
    preset: Preset,
    rendezvous: RendezvousPlan | None,
    launcher_config: Mapping[str, Any] | None = None,
) -> LaunchSetup:
    """The setup a plan's launcher is planned from: the preset's shape, the profile's entry
    point, checkpoint folder and launcher config."""
    config = (
        "" if launcher_config is None else json.dumps(launcher_config, sort_keys=True, separators=(",", ":"))
    )
    return LaunchSetup(
        preset.layout,
        preset.gpus_per_pod,
        preset.elastic is not None,
        rendezvous,
        tuple(profile.command),
        profile.checkpoint.dir,
        preset.termination_grace_period_seconds,
        preset.nodes,
        config,
        mpi=preset.mpi,
        env_names=(*profile.env, *profile.secret_env, *preset.network.env),
        job=profile.name,
        master_port=preset.master_port,
        strategy=profile.strategy,
        zero_stage=profile.zero_stage,
    )


def plan_launcher(
    launcher: Launcher, setup: LaunchSetup, src: Sources, o: dict[str, Origin]
) -> tuple[tuple[str, ...], str | None]:
    """LAUNCHER's argv and its per-rank log folder (None: none); the origins of the launcher
    and of the entry point into `o`."""
    argv = launcher.argv(setup)
    for i, arg in enumerate(argv):
        o[f"launcher[{i}]"] = launcher.origin(arg, setup, src)
    for i in range(len(setup.entrypoint)):
        o[f"entrypoint[{i}]"] = src.profile(f"command[{i}]")
    return argv, launcher.rank_logs(setup)
