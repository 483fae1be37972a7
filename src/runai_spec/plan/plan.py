"""Plan: topology, launcher argv, env, names, volumes, and where each value came from (pure)."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..facts.kubeflow import OPERATOR_VERSION, kubelet_literal, pod_name
from ..load.profile import LoadedProfile
from ..load.registry import ApprovedPreset
from ..load.site import Site
from ..records import Record
from .container import plan_env, plan_limits
from .launcher import (
    PYTORCHJOB,
    LauncherFile,
    LaunchSetup,
    RendezvousPlan,
    WorkloadKind,
    choose_launcher,
    launch_setup,
    launcher_named,
    plan_launcher,
)
from .launcher.mpi import MpiPlan, plan_mpi
from .metadata import (
    namespace_for,
    plan_annotations,
    plan_labels,
    plan_pod_annotations,
    plan_run_policy,
    plan_topology_annotations,
)
from .origins import Origin, Sources, derived, pairs, same
from .topology import ElasticPlan, Replica, plan_topology
from .volumes import Volume, mount_of, plan_volumes

Pairs = tuple[tuple[str, str], ...]


class Plan(Record):
    """Everything the templates need; a pure function of profile, preset and site. Equal,
    and hashed, by every field but `origins` (the record of where each came from)."""

    name: str
    namespace: str
    project: str
    layout: str
    pods: int
    procs_per_pod: int
    elastic: ElasticPlan | None
    replicas: tuple[Replica, ...]
    launcher: tuple[str, ...]
    entrypoint: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    image: str
    working_dir: str | None
    limits: tuple[tuple[str, str | int], ...]  # requests are the same (see `requests`)
    capabilities: tuple[str, ...]
    volumes: tuple[Volume, ...]
    labels: Pairs  # the job's and every pod's (see `pod_labels`)
    annotations: Pairs
    pod_annotations: Pairs
    scheduler_name: str
    master_port: int
    restart_policy: str
    run_policy: tuple[tuple[str, str | int], ...]
    preset_name: str
    diagnostics: tuple[str, ...]
    # (variable, Secret name, key): rendered as valueFrom.secretKeyRef, never as a value
    secret_env: tuple[tuple[str, str, str], ...] = ()
    # (variable, pod field): the downward API (valueFrom.fieldRef), listed first in env
    field_env: tuple[tuple[str, str], ...] = ()
    # the training-operator release of the site (site.yaml operator_version): which env
    # kubeflow.operator_env() predicts for each pod
    operator_version: str = OPERATOR_VERSION
    # profile checkpoint.on_sigterm: the script checkpoints on SIGTERM (preflight reads it)
    checkpoint_on_sigterm: bool = False
    # every pod's terminationGracePeriodSeconds (preset): SIGTERM to SIGKILL
    termination_grace_period_seconds: int = 30
    # torchrun's rendezvous (multi-node layouts only); the launcher flags say the same
    rendezvous: RendezvousPlan | None = None
    # profile torch_version: the image's torch, which decides torchrun's shutdown window
    torch_version: str | None = None
    # the launcher's name in the registry (plan.launcher: launcher_named), which made `launcher`
    launcher_name: str = "torchrun"
    # the Kubernetes object the launcher's job is (its template, apiVersion, kind, roles)
    workload: WorkloadKind = PYTORCHJOB
    # files the launcher reads in the pod (accelerate's config): pod annotations, mounted
    launcher_files: tuple[LauncherFile, ...] = ()
    # the preset's MPIJob settings, for a job of the mpi launcher (an MPIJob) only
    mpi: MpiPlan | None = None
    # what the launcher was planned from (its strategy, ZeRO stage, config...): the smoke
    # test's launcher is planned from the same, with its own entry point and rendezvous
    launcher_setup: LaunchSetup | None = None
    # Where each leaf came from, by its path in the plan (`env[3][1]`, `volumes[0].claim`),
    # recorded by plan_workload() as it derives the value; `render --explain` reads it.
    origins: Mapping[str, Origin] = MappingProxyType({})

    def __eq__(self, other: object) -> bool:
        return type(other) is Plan and self[:-1] == other[:-1]

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self[:-1])

    @property
    def world_size(self) -> int:
        """Processes in the job at its planned size (an elastic job's nodes)."""
        return self.pods * self.procs_per_pod

    @property
    def min_world_size(self) -> int | None:
        """Processes in an elastic job at its fewest pods (None: not elastic)."""
        return None if self.elastic is None else self.elastic.min_pods * self.procs_per_pod

    @property
    def attaches_network(self) -> bool:
        """Whether the pods get a network beside the pod network (the preset's network
        annotations: Multus's): an address found by `hostname -I` may be that one's."""
        files = {f.annotation for f in self.launcher_files}
        return any(key not in files for key, _ in self.pod_annotations)

    def mount_of(self, role: str) -> str | None:
        """Where the container mounts the volume of ROLE (volumes.CHECKPOINT, DATA, SHM)."""
        return mount_of(self.volumes, role)

    @property
    def requests(self) -> tuple[tuple[str, str | int], ...]:
        """Requests equal limits: Kubernetes requires it of extended resources (GPUs, RDMA
        devices), and it puts the pods in the Guaranteed QoS class."""
        return self.limits

    @property
    def pod_labels(self) -> Pairs:
        """Pods carry the job's labels: the Run:ai scheduler reads queue and priority there."""
        return self.labels

    @property
    def command(self) -> tuple[str, ...]:
        """The container's full argv: launcher then the researcher's entry point, written so
        that the kubelet's `$(VAR)` expansion leaves it as typed."""
        return self.launcher + tuple(kubelet_literal(arg) for arg in self.entrypoint)

    @property
    def pod_names(self) -> tuple[str, ...]:
        names = []
        for replica in self.replicas:
            # an elastic job's workers (the workload kind's last role) may grow to its maximum
            workers = replica.role == self.workload.roles[-1]
            count = self.elastic.max_pods if (self.elastic and workers) else replica.replicas
            names += [pod_name(self.name, replica.role, i) for i in range(count)]
        return tuple(names)

    @property
    def longest_pod_name(self) -> str:
        return max(self.pod_names, key=len)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly view (for plan --format json and rehearse)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "project": self.project,
            "layout": self.layout,
            "pods": self.pods,
            "procs_per_pod": self.procs_per_pod,
            "world_size": self.world_size,
            "elastic": None
            if self.elastic is None
            else {
                "min_pods": self.elastic.min_pods,
                "max_pods": self.elastic.max_pods,
                "max_restarts": self.elastic.max_restarts,
            },
            "replicas": {r.role: r.replicas for r in self.replicas},
            "command": list(self.command),
            "env": dict(self.env),
            "image": self.image,
            "preset": self.preset_name,
            "pod_names": list(self.pod_names),
        }


def _own_origins(loaded: LoadedProfile, site: Site, src: Sources) -> dict[str, Origin]:
    """The origins of the plan's scalar fields."""
    project = loaded.profile.project
    return {
        "name": src.profile("name"),
        "project": src.profile("project"),
        "namespace": (
            src.site(f"namespaces.{project}") if project in site.namespaces else src.site("namespace_pattern")
        ),
        "procs_per_pod": src.preset("gpus_per_pod"),
        "image": src.profile("image"),
        "working_dir": src.profile("working_dir"),
        "scheduler_name": src.site("scheduler_name"),
        "master_port": src.preset("master_port"),
        "restart_policy": src.preset("run_policy.restart_policy"),
        "termination_grace_period_seconds": src.preset("termination_grace_period_seconds"),
    }


def plan_workload(
    loaded: LoadedProfile,
    approved: ApprovedPreset,
    site: Site,
    *,
    site_sha256: str = "",
    launcher_name: str | None = None,
) -> Plan:
    """Derive the topology and every value the manifests carry, and where each came from.
    LAUNCHER_NAME: a registered launcher to use instead of the layout's (choose_launcher)."""
    profile, preset = loaded.profile, approved.preset
    src = Sources(loaded, approved, site)
    o = _own_origins(loaded, site, src)
    name = choose_launcher(
        preset.layout, launcher_name, profile=profile.launcher, elastic=preset.elastic is not None
    )
    launcher = launcher_named(name)
    elastic, replicas = plan_topology(preset, launcher.workload.roles, src, o)
    rendezvous = launcher.rendezvous(preset, profile.name)
    setup = launch_setup(profile, preset, rendezvous, loaded.accelerate_config)
    argv, logs = plan_launcher(launcher, setup, src, o)
    env = plan_env(profile, preset, launcher, setup, logs, src, o)
    limits = plan_limits(preset, src, o)
    volumes = plan_volumes(profile, preset, site, src, o)
    annotations = plan_annotations(loaded, approved, site_sha256, env.diagnostics, src)
    annotations.update(plan_topology_annotations(site, approved, src))
    files = launcher.files(setup)
    pod_annotations = plan_pod_annotations(preset, src)
    for i, file in enumerate(files):
        why = derived(f"the {name} launcher's {file.name}, mounted at {file.path} (downward API)")
        pod_annotations[file.annotation] = same(why, file.annotation, file.text)
        o.update({f"launcher_files[{i}].{field}": why for field in file._fields})
    return Plan(
        name=profile.name,
        namespace=namespace_for(site, profile.project),
        project=profile.project,
        layout=preset.layout,
        pods=preset.nodes,
        procs_per_pod=preset.gpus_per_pod,
        elastic=elastic,
        replicas=replicas,
        launcher=argv,
        entrypoint=tuple(profile.command),
        env=pairs(o, "env", env.env),
        image=profile.image,
        working_dir=profile.working_dir,
        limits=pairs(o, "limits", limits),
        capabilities=tuple(preset.network.capabilities),
        volumes=volumes,
        labels=pairs(o, "labels", plan_labels(profile, preset, site, src)),
        annotations=pairs(o, "annotations", annotations),
        pod_annotations=pairs(o, "pod_annotations", pod_annotations),
        scheduler_name=site.scheduler_name,
        master_port=preset.master_port,
        restart_policy=preset.run_policy.restart_policy,
        run_policy=pairs(o, "run_policy", plan_run_policy(preset, src)),
        preset_name=approved.name,
        diagnostics=env.diagnostics,
        secret_env=env.secret_env,
        field_env=env.field_env,
        operator_version=site.operator_version,
        checkpoint_on_sigterm=bool(profile.checkpoint and profile.checkpoint.on_sigterm),
        termination_grace_period_seconds=preset.termination_grace_period_seconds,
        rendezvous=rendezvous,
        torch_version=profile.torch_version,
        launcher_name=name,
        workload=launcher.workload,
        launcher_files=files,
        mpi=plan_mpi(launcher.workload, setup, src, o),
        launcher_setup=setup,
        origins=o,
    )
