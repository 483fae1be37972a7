"""Preset: an engineer-approved compute shape, and the consistency of its layout."""

# No `from __future__ import annotations`: the string annotations of a pydantic model are
# compiled one by one when it is defined (~0.15 M instructions each: benchmarks/README.md).
from typing import Literal

from pydantic import Field

from ..facts.kubeflow import DEFAULT_PORT, DNS1123_PATTERN, RDZV_BACKEND
from ..facts.mpi import DEFAULT_SSH_AUTH_MOUNT_PATH, LauncherCreationPolicy, MpiImplementation
from .model import FileModel
from .profile import LauncherName, Strategy


class GpuSpec(FileModel):
    """The GPU model a preset's pods get."""

    model: str = Field(description="GPU model, e.g. NVIDIA H200.")
    memory_gb: float = Field(gt=0, description="Memory per GPU in GB (an H200 has 141).")


class Elastic(FileModel):
    """Elasticity bounds (pods), engineer-owned."""

    min: int = Field(ge=1, description="Fewest pods the job runs with.")
    max: int = Field(ge=1, description="Most pods the job scales to.")
    max_restarts: int = Field(3, ge=0, description="torchrun restarts before failing.")


class Network(FileModel):
    """The approved high-speed network attachment."""

    annotations: dict[str, str] = Field(default_factory=lambda: {}, description="Pod annotations.")
    resources: dict[str, int] = Field(
        default_factory=lambda: {}, description="Extended resources per pod (RDMA devices)."
    )
    capabilities: list[str] = Field(default_factory=lambda: [], description="Added capabilities.")
    env: dict[str, str] = Field(default_factory=lambda: {}, description="NCCL settings for this path.")


class RunPolicy(FileModel):
    """Restart, backoff and clean-up policy."""

    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode"] = "OnFailure"
    backoff_limit: int = Field(3, ge=0)
    ttl_seconds_after_finished: int | None = Field(86400, ge=0)
    active_deadline_seconds: int | None = Field(None, gt=0)
    clean_pod_policy: Literal["All", "Running", "None"] = "Running"


class MpiSettings(FileModel):
    """How an MPIJob of this preset runs (mpi-operator v2beta1, DESIGN 4.8): the engineers'
    settings; slots per worker are the preset's GPUs per pod and the restart budget is
    run_policy.backoff_limit (the launcher Job's back-off: MPI has no re-rendezvous)."""

    implementation: MpiImplementation = Field(
        "OpenMPI", description="spec.mpiImplementation (runai-spec renders OpenMPI's mpirun)."
    )
    ssh_auth_mount_path: str = Field(
        DEFAULT_SSH_AUTH_MOUNT_PATH,
        pattern=r"^/[^\s]*$",
        description="spec.sshAuthMountPath: where the operator's SSH Secret is mounted (the "
        "home of the user the image runs as, e.g. /home/mpiuser/.ssh for a non-root image).",
    )
    launcher_creation_policy: LauncherCreationPolicy = Field(
        "WaitForWorkersReady",
        description="spec.launcherCreationPolicy: WaitForWorkersReady starts mpirun once every "
        "worker's sshd is up (AtStartup races it and spends back-off on connection failures).",
    )
    mpirun_args: list[str] = Field(
        default_factory=lambda: [],
        description="mpirun flags the engineers approve (transport: `--mca pml ob1`, `-x "
        "NCCL_IB_HCA`...), after the tool's `-np`; a researcher's command carries none.",
    )
    worker_command: list[str] = Field(
        default_factory=lambda: ["/usr/sbin/sshd", "-De"],
        min_length=1,
        description="What each worker pod runs: the SSH daemon mpirun reaches it through.",
    )
    launcher_restart_policy: Literal["OnFailure", "Never"] = Field(
        "OnFailure", description="The Launcher's restartPolicy (the operator's default)."
    )
    worker_restart_policy: Literal["OnFailure", "Never"] = Field(
        "Never", description="The Workers' restartPolicy (the operator's default)."
    )


class Rendezvous(FileModel):
    """How the torchrun agents of a multi-node job meet, and meet again after a node fault
    (docs/fault-experiments/RESULTS.md measured each choice under a kubelet/operator model)."""

    backend: Literal["c10d", "static"] = Field(
        RDZV_BACKEND,
        description="c10d: the agents re-admit a pod the kubelet restarted in place, "
        "so one node fault costs one container restart; static (torchrun's default): never "
        "re-admits, one fault can use the whole backoffLimit (elastic presets: always c10d).",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        description="torchrun --max-restarts of a fixed-size multi-node job: how many "
        "times a surviving agent restarts its ranks for a lost peer (at least the faults the "
        "backoffLimit tolerates). Elastic presets set it in elastic.max_restarts.",
    )
    join_timeout_seconds: int = Field(
        900,
        gt=0,
        description="rdzv-conf join_timeout: how long the agents wait for a "
        "restarted pod to rejoin (the kubelet's back-off + image pull + start).",
    )
    read_timeout_seconds: int = Field(
        600,
        gt=0,
        description="rdzv-conf read_timeout: how long an agent waits on the "
        "rendezvous store (torch's 60 s default is shorter than a pod restart).",
    )
    last_call_timeout_seconds: int | None = Field(
        None,
        gt=0,
        description="rdzv-conf last_call_timeout (elastic: how long a round "
        "waits for more pods once it has the minimum); torch's default (30 s) when unset.",
    )


class Preset(FileModel):
    """An engineer-approved compute shape: the only source of pods, GPUs and priority."""

    description: str = Field(description="What the preset is for.")
    layout: Literal["single-gpu", "single-node", "multi-node"]
    nodes: int = Field(ge=1, description="Pods (master + workers); the master trains too.")
    gpus_per_pod: int = Field(ge=1)
    gpu: GpuSpec
    cpu: str = Field(pattern=r"^[0-9]+(\.[0-9]+)?m?$", description="CPU per pod.")
    memory: str = Field(pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$", description="Memory per pod.")
    shared_memory: str | None = Field(
        None, pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$", description="Size of /dev/shm (memory emptyDir)."
    )
    priority: str = Field(pattern=DNS1123_PATTERN, description="Run:ai priority class.")
    preemptible: bool
    elastic: Elastic | None = None
    node_pool: str | None = Field(None, pattern=DNS1123_PATTERN, description="Run:ai node pool.")
    network: Network = Field(default_factory=lambda: Network())
    strategies: list[Strategy] = Field(min_length=1)
    min_busbw_gbps: float | None = Field(None, gt=0, description="Minimum all-reduce bus bandwidth.")
    master_port: int = Field(DEFAULT_PORT, ge=1024, le=65535)
    run_policy: RunPolicy = Field(default_factory=lambda: RunPolicy())
    rendezvous: Rendezvous = Field(
        default_factory=lambda: Rendezvous(),
        description="torchrun's rendezvous of a multi-node layout (engineer-owned failure semantics).",
    )
    launchers: list[LauncherName] | None = Field(
        None,
        min_length=1,
        description="The launchers a profile may choose with this preset, among the site's "
        "(`launchers` in site.yaml); unset: the site's. Elastic presets run torchrun only.",
    )
    mpi: MpiSettings = Field(
        default_factory=lambda: MpiSettings(),
        description="The MPIJob's settings where the preset allows `launcher: mpi`.",
    )
    termination_grace_period_seconds: int = Field(
        30,
        ge=0,
        description="Every pod's terminationGracePeriodSeconds: how long a rank "
        "asked to stop (SIGTERM: preemption, deletion) has to checkpoint before SIGKILL.",
    )


def preset_problem(preset: Preset) -> str | None:
    """Why PRESET's layout, nodes, elastic bounds and rendezvous do not fit together; None
    where they do."""
    if preset.layout == "single-gpu" and (preset.nodes != 1 or preset.gpus_per_pod != 1):
        return "layout single-gpu needs nodes: 1 and gpus_per_pod: 1"
    if preset.layout == "single-node" and preset.nodes != 1:
        return "layout single-node needs nodes: 1"
    if preset.layout == "multi-node" and preset.nodes < 2:
        return "layout multi-node needs nodes >= 2"
    if preset.elastic is not None:
        if preset.layout != "multi-node":
            return "elastic bounds need layout multi-node"
        if not preset.elastic.min <= preset.nodes <= preset.elastic.max:
            return "elastic bounds must satisfy min <= nodes <= max"
    return _rendezvous_consistency(preset)


def _rendezvous_consistency(preset: Preset) -> str | None:
    """The rendezvous block says only what the layout renders."""
    written = preset.rendezvous.model_fields_set
    if preset.layout != "multi-node":
        if "rendezvous" in preset.model_fields_set:
            return f"rendezvous applies to multi-node layouts; {preset.layout} renders its own launcher"
        return None
    if preset.elastic is not None:
        if preset.rendezvous.backend != RDZV_BACKEND:
            return "an elastic preset needs rendezvous.backend c10d (the operator's elasticPolicy)"
        if "max_restarts" in written:
            return "an elastic preset sets torchrun's restarts in elastic.max_restarts"
    elif preset.rendezvous.backend == "static":
        extra = sorted(written - {"backend"})
        if extra:
            return (
                f"rendezvous.{extra[0]} has no effect with the static backend "
                "(torchrun's static rendezvous has no timeouts or re-admission)"
            )
    return None
