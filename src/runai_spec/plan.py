"""Plan: topology, launcher argv, env, names, volumes and provenance (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import __version__
from .presets import ApprovedPreset, Site
from .profile import LoadedProfile

MANAGED_BY = "runai-spec"


@dataclass(frozen=True)
class Volume:
    """A pod volume and where the `pytorch` container mounts it."""

    name: str
    mount_path: str
    read_only: bool
    claim: str | None = None  # persistentVolumeClaim.claimName
    memory_size: str | None = None  # emptyDir medium Memory (for /dev/shm)


@dataclass(frozen=True)
class Replica:
    """One replica type of the PyTorchJob."""

    role: str  # "Master" or "Worker"
    replicas: int
    first_rank: int  # pod rank of the first pod of this role


@dataclass(frozen=True)
class ElasticPlan:
    """Elastic bounds (pods) and torchrun restarts."""

    min_pods: int
    max_pods: int
    max_restarts: int


@dataclass(frozen=True)
class Plan:
    """Everything the templates need; a pure function of profile, preset and site."""

    name: str
    namespace: str
    project: str
    layout: str
    pods: int
    procs_per_pod: int
    world_size: int
    elastic: ElasticPlan | None
    replicas: tuple[Replica, ...]
    launcher: tuple[str, ...]
    entrypoint: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    image: str
    working_dir: str | None
    limits: tuple[tuple[str, str | int], ...]
    requests: tuple[tuple[str, str | int], ...]
    capabilities: tuple[str, ...]
    volumes: tuple[Volume, ...]
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    pod_labels: tuple[tuple[str, str], ...]
    pod_annotations: tuple[tuple[str, str], ...]
    scheduler_name: str
    master_port: int
    restart_policy: str
    run_policy: tuple[tuple[str, str | int], ...]
    preset_name: str
    diagnostics: tuple[str, ...]
    # (variable, Secret name, key): rendered as valueFrom.secretKeyRef, never as a value
    secret_env: tuple[tuple[str, str, str], ...] = ()

    @property
    def command(self) -> tuple[str, ...]:
        """The container's full argv: launcher then the researcher's entry point."""
        return self.launcher + self.entrypoint

    @property
    def pod_names(self) -> tuple[str, ...]:
        names = []
        for replica in self.replicas:
            count = self.elastic.max_pods if (self.elastic and replica.role == "Worker") \
                else replica.replicas
            names += [f"{self.name}-{replica.role.lower()}-{i}" for i in range(count)]
        return tuple(names)

    @property
    def longest_pod_name(self) -> str:
        return max(self.pod_names, key=len)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly view (for plan --format json and rehearse)."""
        return {
            "name": self.name, "namespace": self.namespace, "project": self.project,
            "layout": self.layout, "pods": self.pods, "procs_per_pod": self.procs_per_pod,
            "world_size": self.world_size,
            "elastic": None if self.elastic is None else {
                "min_pods": self.elastic.min_pods, "max_pods": self.elastic.max_pods,
                "max_restarts": self.elastic.max_restarts},
            "replicas": {r.role: r.replicas for r in self.replicas},
            "command": list(self.command), "env": dict(self.env), "image": self.image,
            "preset": self.preset_name, "pod_names": list(self.pod_names),
        }


def launcher_for(layout: str, gpus: int, elastic: bool = False) -> tuple[str, ...]:
    """The site guide's launcher for each layout."""
    if layout == "single-gpu":
        # -u: the operator sets PYTHONUNBUFFERED=0, which Python reads as "buffered", so a pod
        # killed by OOM or preemption would lose its last log lines. torchrun already starts
        # its workers with -u.
        return ("python", "-u")
    if layout == "single-node":
        return ("torchrun", "--standalone", "--nnodes=1", f"--nproc-per-node={gpus}")
    if elastic:
        # A Worker-only job gets no PET_NPROC_PER_NODE from spec.nprocPerNode (the operator
        # sets it from the Master branch only, or from the deprecated, and with nprocPerNode
        # forbidden, elasticPolicy.nProcPerNode): without the flag torchrun starts 1 process.
        return ("torchrun", f"--nproc-per-node={gpus}")
    # Multi-node: nodes, node rank, master and processes per node come from the operator's
    # PET_* variables, which torchrun reads as the defaults of its flags.
    return ("torchrun",)


def namespace_for(site: Site, project: str) -> str:
    return site.namespaces.get(project) or site.namespace_pattern.format(project=project)


def plan_workload(loaded: LoadedProfile, approved: ApprovedPreset, site: Site,
                  *, site_sha256: str = "") -> Plan:
    """Derive the topology and every value the manifests carry."""
    profile = loaded.profile
    preset = approved.preset
    gpus = preset.gpus_per_pod
    elastic = None
    if preset.elastic is not None:
        elastic = ElasticPlan(preset.elastic.min, preset.elastic.max, preset.elastic.max_restarts)
        replicas: tuple[Replica, ...] = (Replica("Worker", preset.nodes, 0),)
    elif preset.nodes == 1:
        replicas = (Replica("Master", 1, 0),)
    else:
        replicas = (Replica("Master", 1, 0), Replica("Worker", preset.nodes - 1, 1))

    env = dict(profile.env_strings())
    if preset.layout == "single-gpu":
        # Scripts written for torchrun read LOCAL_RANK; nothing else sets it for bare python.
        env["LOCAL_RANK"] = "0"
    env.update(preset.network.env)
    diagnostics: list[str] = []
    if profile.diagnostics.nccl_debug:
        env["NCCL_DEBUG"] = "INFO"
        diagnostics.append("nccl-debug")

    limits: dict[str, str | int] = {"nvidia.com/gpu": gpus, "cpu": preset.cpu,
                                    "memory": preset.memory}
    limits.update(preset.network.resources)

    volumes: list[Volume] = []
    ckpt = profile.checkpoint
    volumes.append(Volume("checkpoint", ckpt.dir, False, claim=ckpt.pvc or ckpt.source))
    for index, data in enumerate(profile.data):
        volumes.append(Volume(f"data-{index}", data.path, data.read_only,
                              claim=data.pvc or data.source))
    if preset.shared_memory:
        volumes.append(Volume("dshm", "/dev/shm", False, memory_size=preset.shared_memory))

    labels = {
        site.queue_label: profile.project,
        "project": profile.project,
        site.priority_label: preset.priority,
        site.preemptibility_label: "preemptible" if preset.preemptible else "non-preemptible",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/name": profile.name,
    }
    if preset.node_pool:
        labels[site.node_pool_label] = preset.node_pool
    annotations = {
        "runai-spec/version": __version__,
        "runai-spec/preset": approved.name,
        "runai-spec/preset-sha256": approved.sha256,
        "runai-spec/profile-sha256": loaded.sha256,
    }
    if site_sha256:
        annotations["runai-spec/site-sha256"] = site_sha256
    if diagnostics:
        annotations["runai-spec/diagnostics"] = ",".join(diagnostics)

    policy = preset.run_policy
    run_policy: dict[str, str | int] = {"cleanPodPolicy": policy.clean_pod_policy,
                                        "backoffLimit": policy.backoff_limit}
    if policy.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = policy.ttl_seconds_after_finished
    if policy.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = policy.active_deadline_seconds

    return Plan(
        name=profile.name,
        namespace=namespace_for(site, profile.project),
        project=profile.project,
        layout=preset.layout,
        pods=preset.nodes,
        procs_per_pod=gpus,
        world_size=preset.nodes * gpus,
        elastic=elastic,
        replicas=replicas,
        launcher=launcher_for(preset.layout, gpus, elastic=elastic is not None),
        entrypoint=tuple(profile.command),
        env=tuple(env.items()),
        image=profile.image,
        working_dir=profile.working_dir,
        limits=tuple(limits.items()),
        requests=tuple(limits.items()),
        capabilities=tuple(preset.network.capabilities),
        volumes=tuple(volumes),
        labels=tuple(labels.items()),
        annotations=tuple(annotations.items()),
        pod_labels=tuple(labels.items()),
        pod_annotations=tuple(preset.network.annotations.items()),
        scheduler_name=site.scheduler_name,
        master_port=preset.master_port,
        restart_policy=policy.restart_policy,
        run_policy=tuple(run_policy.items()),
        preset_name=approved.name,
        diagnostics=tuple(diagnostics),
        secret_env=tuple((name, ref.secret, ref.key) for name, ref in profile.secret_env.items()),
    )
