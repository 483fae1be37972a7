"""The container's launcher: torchrun or python, its rendezvous flags and per-rank logs."""

from ..facts.kubeflow import NPROC_FLAG, POD_NAME_ENV, RDZV_BACKEND, kubelet_literal
from ..facts.torchrun import (
    LOG_DIR_FLAG,
    MAX_RESTARTS_FLAG,
    NO_PYTHON,
    RANK_LOGS,
    RDZV_ID_FLAG,
    SINGLE_GPU_LAUNCHER,
    TEE_FLAG,
    flag,
    for_entry_point,
    split_flag,
)
from ..load.presets import Preset
from ..load.profile import Profile
from ..records import Record
from .origins import Origin, Sources, derived


class RendezvousPlan(Record):
    """torchrun's rendezvous of a multi-node job, as the launcher flags render it."""

    backend: str  # c10d or static
    endpoint: str | None  # None: the operator's (PET_MASTER_* for static, PET_RDZV_ENDPOINT)
    rdzv_id: str | None
    max_restarts: int | None  # None: elasticPolicy.maxRestarts, or torchrun's default 0
    join_timeout_s: int | None
    read_timeout_s: int | None
    last_call_timeout_s: int | None


# Kubernetes expands $(VAR) in a container's command from that container's environment,
# including the variables the operator appends (MASTER_ADDR, MASTER_PORT: master.go); an env
# value could not use them, since it only sees variables listed before it.
RDZV_ENDPOINT = "$(MASTER_ADDR):$(MASTER_PORT)"


def rendezvous_plan(preset: Preset, job: str) -> RendezvousPlan | None:
    """The preset's rendezvous for job JOB; None for one-pod layouts."""
    if preset.layout != "multi-node":
        return None
    r = preset.rendezvous
    if r.backend == "static":
        return RendezvousPlan("static", None, None, None, None, None, None)
    # The rendezvous id only has to be the same on every pod of one submission and differ
    # from any other job that reaches the same store. The store lives in memory in the
    # agent on the endpoint's pod (<job>-master-0, or <job>-worker-0 when elastic), so each
    # submission starts from an empty one, and the endpoint is this job's own service: its
    # name is unique in the namespace while the job exists. A submission uid would add
    # nothing and cannot be rendered: the job's UID is known only after the API server
    # stores it, a pod cannot read it (the downward API has no ownerReferences), the
    # operator sets PET_RDZV_ID only from elasticPolicy.rdzvId, and a per-submission value
    # would make every render differ (diff, submit's "unchanged").
    return RendezvousPlan(
        RDZV_BACKEND,
        None if preset.elastic else RDZV_ENDPOINT,
        job,
        None if preset.elastic else r.max_restarts,
        r.join_timeout_seconds,
        r.read_timeout_seconds,
        r.last_call_timeout_seconds,
    )


def launcher_for(
    layout: str, gpus: int, elastic: bool = False, rendezvous: RendezvousPlan | None = None
) -> tuple[str, ...]:
    """The site guide's launcher for each layout, with the preset's rendezvous flags."""
    if layout == "single-gpu":
        return SINGLE_GPU_LAUNCHER
    if layout == "single-node":
        return ("torchrun", "--standalone", flag("--nnodes", 1), flag(NPROC_FLAG, gpus))
    # Multi-node: nodes, node rank, master and processes per node come from the operator's
    # PET_* variables, which torchrun reads as the defaults of its flags; an explicit flag
    # wins over its variable (torch/distributed/argparse_util.py).
    head: tuple[str, ...] = ("torchrun",)
    if elastic:
        # Operator 1.7 gives a Worker-only job no PET_NPROC_PER_NODE (it set it in the
        # Master branch only); 1.8+ sets it from spec.nprocPerNode. The explicit flag makes
        # the process count the same on every supported operator version.
        head += (flag(NPROC_FLAG, gpus),)
    return head + rendezvous_flags(rendezvous)


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
        flags += [flag("--rdzv-backend", r.backend), flag("--rdzv-endpoint", r.endpoint)]
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
        flags.append(flag("--rdzv-conf", ",".join(conf)))
    return tuple(flags)


# The preset field each launcher flag renders.
_FLAG_FIELDS = {
    NPROC_FLAG: "gpus_per_pod",
    MAX_RESTARTS_FLAG: "rendezvous.max_restarts",
    "--rdzv-backend": "rendezvous.backend",
    "--rdzv-conf": "rendezvous",
}


def _launcher_origin(arg: str, layout: str, src: Sources) -> Origin:
    """Where launcher flag ARG came from: the preset field it renders, or the layout."""
    name = split_flag(arg)[0]
    if name in _FLAG_FIELDS:
        return src.preset(_FLAG_FIELDS[name])
    if name == "--rdzv-endpoint":
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
    return derived(f"launcher for the {layout} layout (site guide)")


def plan_launcher(
    profile: Profile,
    preset: Preset,
    elastic: bool,
    rendezvous: RendezvousPlan | None,
    src: Sources,
    o: dict[str, Origin],
) -> tuple[tuple[str, ...], str | None]:
    """The launcher argv and torchrun's per-rank log folder (None for python); the origins
    of the launcher and of the entry point into `o`."""
    launcher = launcher_for(preset.layout, preset.gpus_per_pod, elastic=elastic, rendezvous=rendezvous)
    launcher = for_entry_point(launcher, profile.command)  # a wrapper script: --no-python
    logs = rank_log_dir(profile.checkpoint.dir) if launcher[:1] == ("torchrun",) else None
    if logs is not None:
        launcher += (flag(LOG_DIR_FLAG, logs), flag(TEE_FLAG, 3))
    for i, arg in enumerate(launcher):
        o[f"launcher[{i}]"] = (
            src.profile("command[0]") if arg == NO_PYTHON else _launcher_origin(arg, preset.layout, src)
        )
    for i in range(len(profile.command)):
        o[f"entrypoint[{i}]"] = src.profile(f"command[{i}]")
    return launcher, logs
