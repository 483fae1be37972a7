"""Plan: topology, launcher argv, env, names, volumes, and where each value came from (pure)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from .. import __version__
from ..facts.kubeflow import (
    DIAGNOSTICS_ANNOTATION,
    GPU_RESOURCE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MASTER,
    NAME_LABEL,
    NPROC_FLAG,
    POD_NAME_ENV,
    PRESET_ANNOTATION,
    PRESET_SHA_ANNOTATION,
    PROFILE_SHA_ANNOTATION,
    PROJECT_LABEL,
    SITE_SHA_ANNOTATION,
    VERSION_ANNOTATION,
    WORKER,
    kubelet_literal,
    pod_name,
)
from ..facts.torchrun import (
    LOG_DIR_FLAG,
    NCCL_DEBUG,
    NCCL_DEBUG_FILE,
    NO_PYTHON,
    RANK_LOGS,
    RANK_PREFIX,
    RANK_PREFIX_ENV,
    SHUTDOWN_DEFAULT_S,
    SHUTDOWN_TIMEOUT_ENV,
    TEE_FLAG,
    for_entry_point,
    shutdown_window,
)
from ..load.presets import LEDGER_FILE, SITE_FILE, ApprovedPreset, Preset, Site
from ..load.profile import LoadedProfile

Pairs = tuple[tuple[str, str], ...]


class Origin(NamedTuple):
    """One source of a value: the profile, the preset, the site file, a rule or the template."""

    # A tuple, not a dataclass: a plan records some sixty of them, and tuples are built
    # several times faster (10,000 profiles in one call).
    kind: str  # profile | preset | site | ledger | derived | template
    field: str = ""  # the field in that file, or what the rule is
    file: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.kind in ("derived", "template"):
            return f"{self.kind}: {self.field}"
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.kind} {where} {self.field}".rstrip()


@lru_cache(maxsize=256)
def derived(rule: str) -> Origin:
    return Origin("derived", rule)


@dataclass(frozen=True)
class Volume:
    """A pod volume and where the `pytorch` container mounts it."""

    name: str
    mount_path: str
    read_only: bool
    claim: str | None = None  # persistentVolumeClaim.claimName
    memory_size: str | None = None  # emptyDir medium Memory (for /dev/shm)
    source: str | None = None  # the approved Run:ai data source mounted through `claim`


@dataclass(frozen=True)
class Replica:
    """One replica type of the PyTorchJob."""

    role: str  # kubeflow.MASTER or kubeflow.WORKER
    replicas: int


@dataclass(frozen=True)
class ElasticPlan:
    """Elastic bounds (pods) and torchrun restarts."""

    min_pods: int
    max_pods: int
    max_restarts: int


@dataclass(frozen=True)
class RendezvousPlan:
    """torchrun's rendezvous of a multi-node job, as the launcher flags render it."""

    backend: str  # c10d or static
    endpoint: str | None  # None: the operator's (PET_MASTER_* for static, PET_RDZV_ENDPOINT)
    rdzv_id: str | None
    max_restarts: int | None  # None: elasticPolicy.maxRestarts, or torchrun's default 0
    join_timeout_s: int | None
    read_timeout_s: int | None
    last_call_timeout_s: int | None


@dataclass(frozen=True)
class Plan:
    """Everything the templates need; a pure function of profile, preset and site."""

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
    operator_version: str = "1.9"
    # profile checkpoint.on_sigterm: the script checkpoints on SIGTERM (preflight reads it)
    checkpoint_on_sigterm: bool = False
    # every pod's terminationGracePeriodSeconds (preset): SIGTERM to SIGKILL
    termination_grace_period_seconds: int = 30
    # torchrun's rendezvous (multi-node layouts only); the launcher flags say the same
    rendezvous: RendezvousPlan | None = None
    # profile torch_version: the image's torch, which decides torchrun's shutdown window
    torch_version: str | None = None
    # Where each leaf came from, by its path in the plan (`env[3][1]`, `volumes[0].claim`),
    # recorded by plan_workload() as it derives the value; `render --explain` reads it.
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False, repr=False)

    @property
    def world_size(self) -> int:
        """Processes in the job at its planned size (an elastic job's nodes)."""
        return self.pods * self.procs_per_pod

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
            count = self.elastic.max_pods if (self.elastic and replica.role == WORKER) \
                else replica.replicas
            names += [pod_name(self.name, replica.role, i) for i in range(count)]
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


# Kubernetes expands $(VAR) in a container's command from that container's environment,
# including the variables the operator appends (MASTER_ADDR, MASTER_PORT: master.go); an env
# value could not use them, since it only sees variables listed before it.
RDZV_ENDPOINT = "$(MASTER_ADDR):$(MASTER_PORT)"
RDZV_ID_FLAG = "--rdzv-id"
MAX_RESTARTS_FLAG = "--max-restarts"
# torch 2.6 and later share the rendezvous TCPStore with the trainers by default
# (pytorch/pytorch#128096) and build its bootstrap info only on an agent's first round
# (#135957; dynamic_rendezvous.py, torch 2.13): a pod restarted in place then waits on
# MASTER_ADDR until read_timeout and the job fails (docs/fault-experiments).
DISABLE_SHARED_STORE = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")


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
        "c10d", None if preset.elastic else RDZV_ENDPOINT, job,
        None if preset.elastic else r.max_restarts, r.join_timeout_seconds,
        r.read_timeout_seconds, r.last_call_timeout_seconds)


def launcher_for(layout: str, gpus: int, elastic: bool = False,
                 rendezvous: RendezvousPlan | None = None) -> tuple[str, ...]:
    """The site guide's launcher for each layout, with the preset's rendezvous flags."""
    if layout == "single-gpu":
        # -u: operator 1.7+ already sets PYTHONUNBUFFERED=1 (1.6 set "0"); -u keeps stdout
        # unbuffered whatever the operator or the image sets, so a pod killed by OOM or
        # preemption keeps its last log lines. torchrun already starts its workers with -u.
        return ("python", "-u")
    if layout == "single-node":
        return ("torchrun", "--standalone", "--nnodes=1", f"{NPROC_FLAG}={gpus}")
    # Multi-node: nodes, node rank, master and processes per node come from the operator's
    # PET_* variables, which torchrun reads as the defaults of its flags; an explicit flag
    # wins over its variable (torch/distributed/argparse_util.py).
    head: tuple[str, ...] = ("torchrun",)
    if elastic:
        # Operator 1.7 gives a Worker-only job no PET_NPROC_PER_NODE (it set it in the
        # Master branch only); 1.8+ sets it from spec.nprocPerNode. The explicit flag makes
        # the process count the same on every supported operator version.
        head += (f"{NPROC_FLAG}={gpus}",)
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
        flags += [f"--rdzv-backend={r.backend}", f"--rdzv-endpoint={r.endpoint}"]
    if r.rdzv_id is not None:
        flags.append(f"{RDZV_ID_FLAG}={r.rdzv_id}")
    if r.max_restarts is not None:
        flags.append(f"{MAX_RESTARTS_FLAG}={r.max_restarts}")
    conf = [f"{key}={value}" for key, value in (
        ("join_timeout", r.join_timeout_s), ("read_timeout", r.read_timeout_s),
        ("last_call_timeout", r.last_call_timeout_s)) if value is not None]
    if conf:
        flags.append(f"--rdzv-conf={','.join(conf)}")
    return tuple(flags)


def namespace_for(site: Site, project: str) -> str:
    return site.namespaces.get(project) or site.namespace_pattern.format(project=project)


class _Sources:
    """Origins in the three files a plan reads, with the line each field is on."""

    def __init__(self, loaded: LoadedProfile, approved: ApprovedPreset, site: Site) -> None:
        self.loaded, self.approved, self.site_lines = loaded, approved, site.lines
        # Shown as presets/<file>, the name reviewers know, wherever the folder is installed.
        self.preset_file = f"presets/{approved.name}.yaml"
        self.site_file, self.ledger_file = f"presets/{SITE_FILE}", f"presets/{LEDGER_FILE}"

    def profile(self, field: str) -> Origin:
        return Origin("profile", field, self.loaded.path, self.loaded.lines.get(field))

    def preset(self, field: str) -> Origin:
        line = self.approved.lines.get(field)
        return Origin("preset", field if line else f"{field} (default)", self.preset_file, line)

    def site(self, field: str) -> Origin:
        line = self.site_lines.get(field)
        return Origin("site", field if line else f"{field} (default)", self.site_file, line)

    def ledger(self, filename: str) -> Origin:
        return Origin("ledger", f"approvals.{filename}.sha256", self.ledger_file)


# One entry of a key/value list in the plan, with where the key and the value came from.
Entry = tuple[str, Any, Origin, Origin]


def _pairs(origins: dict[str, Origin], prefix: str, entries: dict[str, Entry]
           ) -> tuple[tuple[str, Any], ...]:
    """The plan's (key, value) tuple, recording `prefix[i][0]` and `prefix[i][1]`."""
    for i, (_, _, key_origin, value_origin) in enumerate(entries.values()):
        origins[f"{prefix}[{i}][0]"], origins[f"{prefix}[{i}][1]"] = key_origin, value_origin
    return tuple((key, value) for key, value, _, _ in entries.values())


def _same(origin: Origin, key: str, value: Any) -> Entry:
    return (key, value, origin, origin)


def plan_workload(loaded: LoadedProfile, approved: ApprovedPreset, site: Site,
                  *, site_sha256: str = "") -> Plan:
    """Derive the topology and every value the manifests carry, and where each came from."""
    profile = loaded.profile
    preset = approved.preset
    src = _Sources(loaded, approved, site)
    gpus = preset.gpus_per_pod
    o: dict[str, Origin] = {
        "name": src.profile("name"), "project": src.profile("project"),
        "namespace": (src.site(f"namespaces.{profile.project}")
                      if profile.project in site.namespaces else src.site("namespace_pattern")),
        "procs_per_pod": src.preset("gpus_per_pod"), "image": src.profile("image"),
        "working_dir": src.profile("working_dir"), "scheduler_name": src.site("scheduler_name"),
        "master_port": src.preset("master_port"),
        "restart_policy": src.preset("run_policy.restart_policy"),
    }

    elastic = None
    if preset.elastic is not None:
        elastic = ElasticPlan(preset.elastic.min, preset.elastic.max, preset.elastic.max_restarts)
        o |= {"elastic.min_pods": src.preset("elastic.min"),
              "elastic.max_pods": src.preset("elastic.max"),
              "elastic.max_restarts": src.preset("elastic.max_restarts")}
        replicas: tuple[Replica, ...] = (Replica(WORKER, preset.nodes),)
        counts = [src.preset("nodes")]
    elif preset.nodes == 1:
        replicas = (Replica(MASTER, 1),)
        counts = [derived("exactly one Master")]
    else:
        replicas = (Replica(MASTER, 1), Replica(WORKER, preset.nodes - 1))
        counts = [derived("exactly one Master"),
                  derived(f"preset nodes ({preset.nodes}) - 1 Master")]
    for i, count in enumerate(counts):
        o[f"replicas[{i}].role"] = derived("Master trains; Workers join it" if elastic is None
                                           else "elastic: Worker-only job")
        o[f"replicas[{i}].replicas"] = count

    rendezvous = rendezvous_plan(preset, profile.name)
    launcher = launcher_for(preset.layout, gpus, elastic=elastic is not None,
                            rendezvous=rendezvous)
    launcher = for_entry_point(launcher, profile.command)  # a wrapper script: --no-python
    logs = rank_log_dir(profile.checkpoint.dir) if launcher[:1] == ("torchrun",) else None
    if logs is not None:
        launcher += (f"{LOG_DIR_FLAG}={logs}", f"{TEE_FLAG}=3")
    for i, arg in enumerate(launcher):
        o[f"launcher[{i}]"] = (src.profile("command[0]") if arg == NO_PYTHON
                               else _launcher_origin(arg, preset.layout, src))
    o["termination_grace_period_seconds"] = src.preset("termination_grace_period_seconds")
    for i in range(len(profile.command)):
        o[f"entrypoint[{i}]"] = src.profile(f"command[{i}]")

    env = {key: _same(src.profile(f"env.{key}"), key, kubelet_literal(value))
           for key, value in profile.env_strings().items()}
    if preset.layout == "single-gpu":
        # Scripts written for torchrun read LOCAL_RANK; nothing else sets it for bare python.
        env["LOCAL_RANK"] = _same(derived("single GPU: bare python sets no LOCAL_RANK"),
                                  "LOCAL_RANK", "0")
    for key, value in preset.network.env.items():
        env[key] = _same(src.preset(f"network.env.{key}"), key, value)
    if rendezvous is not None and rendezvous.backend == "c10d":
        key, value = DISABLE_SHARED_STORE
        env[key] = _same(derived("c10d: a pod restarted in place must be able to rejoin "
                                 "(torch's shared rendezvous store deadlocks it)"), key, value)
    if launcher[:1] == ("torchrun",):
        # torchrun (PID 1) gives its ranks this long from SIGTERM to SIGKILL (torch >= 2.12;
        # launcher.SHUTDOWN_TIMEOUT_ENV): the pod's whole grace period, not torch's 30 s
        grace_origin = src.preset("termination_grace_period_seconds")
        env[SHUTDOWN_TIMEOUT_ENV] = (
            SHUTDOWN_TIMEOUT_ENV, str(preset.termination_grace_period_seconds),
            derived("torchrun's SIGTERM-to-SIGKILL window for its ranks (torch >= 2.12)"),
            grace_origin)
    field_env: list[tuple[str, str]] = []
    if logs is not None:
        field_env.append(POD_NAME_ENV)
        o["field_env[0][0]"] = o["field_env[0][1]"] = derived(
            "the pod's name (downward API), for its per-rank log folder")
        env[RANK_PREFIX_ENV] = _same(derived("each pod log line names its global rank "
                                             "(`logs --out` splits them)"),
                                     RANK_PREFIX_ENV, RANK_PREFIX)
    diagnostics: list[str] = []
    if profile.diagnostics.nccl_debug:
        env[NCCL_DEBUG] = _same(src.profile("diagnostics.nccl_debug"), NCCL_DEBUG, "INFO")
        if logs is not None:  # %h host, %p pid (NCCL's debug file name): one file per rank
            env[NCCL_DEBUG_FILE] = _same(src.profile("diagnostics.nccl_debug"),
                                         NCCL_DEBUG_FILE, f"{logs}/nccl.%h.%p.log")
        diagnostics.append("nccl-debug")
    secret_env = []
    for i, (name, ref) in enumerate(profile.secret_env.items()):
        secret_env.append((name, ref.secret, ref.key))
        for j in range(3):
            o[f"secret_env[{i}][{j}]"] = src.profile(f"secret_env.{name}")

    limits = {GPU_RESOURCE: _same(src.preset("gpus_per_pod"), GPU_RESOURCE, gpus),
              "cpu": _same(src.preset("cpu"), "cpu", preset.cpu),
              "memory": _same(src.preset("memory"), "memory", preset.memory)}
    for key, devices in preset.network.resources.items():
        limits[key] = _same(src.preset(f"network.resources.{key}"), key, devices)
    for i in range(len(preset.network.capabilities)):
        o[f"capabilities[{i}]"] = src.preset(f"network.capabilities[{i}]")

    volumes = _volumes(loaded, approved, site, src, o)

    key_fixed = derived("label key fixed by runai-spec")
    labels = {
        site.queue_label: (site.queue_label, profile.project, src.site("queue_label"),
                           src.profile("project")),
        PROJECT_LABEL: (PROJECT_LABEL, profile.project, key_fixed, src.profile("project")),
        site.priority_label: (site.priority_label, preset.priority, src.site("priority_label"),
                              src.preset("priority")),
        site.preemptibility_label: (
            site.preemptibility_label, "preemptible" if preset.preemptible else "non-preemptible",
            src.site("preemptibility_label"), src.preset("preemptible")),
        MANAGED_BY_LABEL: (MANAGED_BY_LABEL, MANAGED_BY, key_fixed,
                           derived(f"{MANAGED_BY} marks what it created")),
        NAME_LABEL: (NAME_LABEL, profile.name, key_fixed, src.profile("name")),
    }
    if preset.node_pool:
        labels[site.node_pool_label] = (site.node_pool_label, preset.node_pool,
                                        src.site("node_pool_label"), src.preset("node_pool"))
    note = derived("annotation key fixed by runai-spec")
    annotations = {
        VERSION_ANNOTATION: (VERSION_ANNOTATION, __version__, note, derived("runai-spec version")),
        PRESET_ANNOTATION: (PRESET_ANNOTATION, approved.name, note, src.profile("preset")),
        PRESET_SHA_ANNOTATION: (PRESET_SHA_ANNOTATION, approved.sha256, note,
                                src.ledger(f"{approved.name}.yaml")),
        PROFILE_SHA_ANNOTATION: (PROFILE_SHA_ANNOTATION, loaded.sha256, note,
                                 derived(f"sha256 of {loaded.path} as parsed (canonical JSON)")),
    }
    if site_sha256:
        annotations[SITE_SHA_ANNOTATION] = (SITE_SHA_ANNOTATION, site_sha256, note,
                                            src.ledger(SITE_FILE))
    if diagnostics:
        annotations[DIAGNOSTICS_ANNOTATION] = (DIAGNOSTICS_ANNOTATION, ",".join(diagnostics),
                                               note, src.profile("diagnostics"))
    pod_annotations = {key: _same(src.preset(f"network.annotations.{key}"), key, value)
                       for key, value in preset.network.annotations.items()}

    policy = preset.run_policy
    kubeflow_field = derived("Kubeflow runPolicy field")

    def run(key: str, value: str | int, field: str) -> Entry:
        return (key, value, kubeflow_field, src.preset(f"run_policy.{field}"))

    run_policy = {"cleanPodPolicy": run("cleanPodPolicy", policy.clean_pod_policy,
                                        "clean_pod_policy"),
                  "backoffLimit": run("backoffLimit", policy.backoff_limit, "backoff_limit")}
    if policy.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = run(
            "ttlSecondsAfterFinished", policy.ttl_seconds_after_finished,
            "ttl_seconds_after_finished")
    if policy.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = run(
            "activeDeadlineSeconds", policy.active_deadline_seconds, "active_deadline_seconds")

    return Plan(
        name=profile.name,
        namespace=namespace_for(site, profile.project),
        project=profile.project,
        layout=preset.layout,
        pods=preset.nodes,
        procs_per_pod=gpus,
        elastic=elastic,
        replicas=replicas,
        launcher=launcher,
        entrypoint=tuple(profile.command),
        env=_pairs(o, "env", env),
        image=profile.image,
        working_dir=profile.working_dir,
        limits=_pairs(o, "limits", limits),
        capabilities=tuple(preset.network.capabilities),
        volumes=volumes,
        labels=_pairs(o, "labels", labels),
        annotations=_pairs(o, "annotations", annotations),
        pod_annotations=_pairs(o, "pod_annotations", pod_annotations),
        scheduler_name=site.scheduler_name,
        master_port=preset.master_port,
        restart_policy=policy.restart_policy,
        run_policy=_pairs(o, "run_policy", run_policy),
        preset_name=approved.name,
        diagnostics=tuple(diagnostics),
        secret_env=tuple(secret_env),
        field_env=tuple(field_env),
        operator_version=site.operator_version,
        checkpoint_on_sigterm=bool(profile.checkpoint and profile.checkpoint.on_sigterm),
        termination_grace_period_seconds=preset.termination_grace_period_seconds,
        rendezvous=rendezvous,
        torch_version=profile.torch_version,
        origins=o,
    )


def _launcher_origin(arg: str, layout: str, src: _Sources) -> Origin:
    """Where launcher flag ARG came from: the preset field it renders, or the layout."""
    fields = {NPROC_FLAG: "gpus_per_pod", MAX_RESTARTS_FLAG: "rendezvous.max_restarts",
              "--rdzv-backend": "rendezvous.backend", "--rdzv-conf": "rendezvous"}
    name = arg.split("=", 1)[0]
    if name in fields:
        return src.preset(fields[name])
    if name == "--rdzv-endpoint":
        return derived("c10d store on the Master's service: the operator's MASTER_ADDR and "
                       "MASTER_PORT, expanded by the kubelet")
    if name == RDZV_ID_FLAG:
        return derived("rendezvous id: the job name (unique while the job exists)")
    if name in (LOG_DIR_FLAG, TEE_FLAG):
        return derived("a log per rank (site guide), kept on the checkpoint volume so that "
                       "it outlives the pod; the pod log carries every rank's lines too")
    return derived(f"launcher for the {layout} layout (site guide)")


def _volumes(loaded: LoadedProfile, approved: ApprovedPreset, site: Site, src: _Sources,
             o: dict[str, Origin]) -> tuple[Volume, ...]:
    """The checkpoint volume, the data volumes, /dev/shm; their origins into `o`."""
    profile, preset = loaded.profile, approved.preset
    ckpt = profile.checkpoint
    def claim(pvc: str | None, source: str | None) -> str | None:
        # An approved data source is mounted through its claim in the project's namespace.
        return pvc or (None if source is None else site.claim_for(source, profile.project))

    volumes = [Volume("checkpoint", ckpt.dir, False, claim=claim(ckpt.pvc, ckpt.source),
                      source=None if ckpt.pvc else ckpt.source)]
    origins = [{"mount_path": src.profile("checkpoint.dir"),
                "claim": src.profile("checkpoint.pvc" if ckpt.pvc else "checkpoint.source"),
                "read_only": derived("checkpoints are written")}]
    for index, data in enumerate(profile.data):
        d = f"data[{index}]"
        volumes.append(Volume(f"data-{index}", data.path, data.read_only,
                              claim=claim(data.pvc, data.source),
                              source=None if data.pvc else data.source))
        read_only = src.profile(f"{d}.read_only")
        origins.append({
            "mount_path": src.profile(f"{d}.path"),
            "claim": src.profile(f"{d}.pvc" if data.pvc else f"{d}.source"),
            "read_only": read_only if read_only.line else
            derived("data is read-only unless the profile says otherwise")})
    if preset.shared_memory:
        volumes.append(Volume("dshm", "/dev/shm", False, memory_size=preset.shared_memory))
        origins.append({"mount_path": derived("large shared memory at /dev/shm"),
                        "memory_size": src.preset("shared_memory"),
                        "read_only": derived("shared memory is written")})
    for i, fields in enumerate(origins):
        o[f"volumes[{i}].name"] = derived("volume name")
        o |= {f"volumes[{i}].{name}": origin for name, origin in fields.items()}
    return tuple(volumes)


@dataclass(frozen=True)
class FaultOutcome:
    """What one kind of fault does to a job of this plan, in the cluster."""

    fault: str
    outcome: str
    restarts: int | None  # container restarts it uses against backoffLimit (None: all of them)
    recovers: bool


@dataclass(frozen=True)
class FailureSemantics:
    """The plan's failure semantics, as `plan` shows them (RESULTS.md measured each row)."""

    choices: tuple[tuple[str, str], ...]  # (what, value) in the order plan shows them
    faults: tuple[FaultOutcome, ...]
    tolerated: int | None  # worst-case faults the backoffLimit absorbs (None: no limit)
    resubmit: str  # the commands that resume the job from its checkpoint


def _backoff_limit(plan: Plan) -> int | None:
    value = dict(plan.run_policy).get("backoffLimit")
    return value if isinstance(value, int) else None


def sigterm_window(plan: Plan) -> str:
    """How long the ranks of PLAN have to save between SIGTERM and SIGKILL, in words: the
    grace period for python (one GPU); for torchrun (PID 1 of its pod) its shutdown timeout,
    which the render sets to the grace period and torch reads from 2.12 only
    (launcher.shutdown_window)."""
    grace = plan.termination_grace_period_seconds
    if plan.launcher[:1] != ("torchrun",):
        return (f"the script, PID 1 of its container, has {grace} s, then SIGKILL; PID 1 has no "
                "default action for SIGTERM, so a script without a handler keeps running, and "
                "holds its GPU, until that SIGKILL")
    window = shutdown_window(plan.torch_version, grace)
    old = min(SHUTDOWN_DEFAULT_S, grace)
    if window is None:
        return (f"torchrun forwards it to the ranks and gives them {grace} s on torch 2.12 and "
                f"later ({SHUTDOWN_TIMEOUT_ENV}), {old} s on older torch, then SIGKILL "
                "(torch_version in the profile says which)")
    if window == grace:
        return (f"torchrun forwards it to the ranks and gives them the grace period, {grace} s "
                f"(torch {plan.torch_version} reads {SHUTDOWN_TIMEOUT_ENV}), then SIGKILL")
    return (f"torchrun forwards it to the ranks and SIGKILLs them {window} s later: torch "
            f"{plan.torch_version} has no setting for it (2.12 and later read "
            f"{SHUTDOWN_TIMEOUT_ENV}); the rest of the {grace} s grace period only holds the "
            "GPUs")


def save_time(plan: Plan) -> str:
    """sigterm_window in a few words: `300 s`, `30 s (torch 2.11)`, `300 s on torch >= 2.12,
    30 s before`."""
    grace = plan.termination_grace_period_seconds
    if plan.launcher[:1] != ("torchrun",):
        return f"{grace} s (if the script handles SIGTERM)"
    window = shutdown_window(plan.torch_version, grace)
    if window is None:
        return f"{grace} s on torch >= 2.12, {min(SHUTDOWN_DEFAULT_S, grace)} s before"
    return f"{window} s" + ("" if window == grace else f" (torch {plan.torch_version})")


def failure_semantics(plan: Plan, profile_path: str = "PROFILE") -> FailureSemantics:
    """Each failure-semantics choice of PLAN and, per fault, what it does: the kubelet
    restarts a failed container in place (OnFailure/Always), the operator sums the restarts
    against backoffLimit and fails the job when they reach it (training-operator v1.9
    pkg/core/job.go PastBackoffLimit); a preemption deletes every pod and the operator
    creates them anew, which costs no restart."""
    limit = _backoff_limit(plan)
    r = plan.rendezvous
    grace = plan.termination_grace_period_seconds
    choices: list[tuple[str, str]] = [
        ("restart policy", plan.restart_policy),
        ("backoffLimit", "none (the operator never gives up)" if limit is None else str(limit)),
    ]
    if r is not None:
        where = (f"{r.endpoint} (the Master's service)" if r.endpoint else
                 "worker-0's service (the operator's PET_RDZV_ENDPOINT)")
        choices.append(("rendezvous", "static (bare torchrun)" if r.backend == "static" else
                        f"{r.backend} at {where}, id {r.rdzv_id}"))
        if r.backend == "c10d":
            restarts = (r.max_restarts if r.max_restarts is not None
                        else plan.elastic.max_restarts if plan.elastic else 0)
            choices += [
                ("torchrun max restarts", str(restarts)),
                ("rendezvous join / read timeout", f"{r.join_timeout_s} s / {r.read_timeout_s} s"),
            ]
            if plan.elastic is not None:
                choices.append(("rendezvous last call", f"{r.last_call_timeout_s} s"
                                if r.last_call_timeout_s else "torch's default (30 s)"))
    choices.append(("termination grace period", f"{grace} s (SIGTERM, then SIGKILL)"))
    window = sigterm_window(plan)
    choices.append(("time to save on SIGTERM", window))
    name = plan.name
    resubmit = (f"runai-spec delete {name} --project {plan.project} --yes && "
                f"runai-spec submit {shlex.quote(profile_path)}")
    preempt = FaultOutcome(
        "preemption or eviction",
        f"every pod gets SIGTERM and {save_time(plan)} to checkpoint, then SIGKILL; the "
        "operator creates the pods anew and the job resumes from its last checkpoint", 0, True)
    faults: tuple[FaultOutcome, ...]
    tolerated: int | None
    if plan.restart_policy == "ExitCode" and plan.pods == 1:
        faults = (FaultOutcome(
            "the pod's container fails",
            "a signal (exit 128 and up: OOM kill, node loss) makes the operator recreate the "
            "pod, which resumes from its last checkpoint; an error exit (1-127) fails the job "
            "at once and stops it (fail fast)", 0, True), preempt)
        return FailureSemantics(tuple(choices), faults, 0, resubmit)
    if plan.restart_policy in ("Never", "ExitCode"):
        # ExitCode recreates a pod killed by a signal, but its peers then exit 1 (torchrun's
        # ChildFailedError), a permanent code: the job fails one recreation later.
        how = ("the operator marks the job Failed at once and stops every pod"
               if plan.restart_policy == "Never" else
               "the operator recreates a pod killed by a signal, but its peers then exit 1, "
               "a permanent error: the job is marked Failed and every pod stopped")
        faults = (FaultOutcome("a pod's container fails", f"fails fast: {how}", None, False),
                  preempt)
        return FailureSemantics(tuple(choices), faults, 0, resubmit)
    in_place = "the kubelet restarts that container in place after its back-off (10 s, " \
               "doubling up to 300 s)"
    if r is None:
        faults = (FaultOutcome(
            "the pod's container fails", f"{in_place}; the job resumes from its last "
            "checkpoint", 1, True), preempt)
        worst = 1
    elif r.backend == "static":
        faults = (FaultOutcome(
            "any pod's container fails",
            f"{in_place}, but torchrun's static rendezvous never re-admits it: a restarted pod "
            "can meet the others' old store and fail again, so one fault can use the whole "
            "backoffLimit, and whether the job recovers depends on timing (measured: "
            "docs/fault-experiments/RESULTS.md)", None, False), preempt)
        return FailureSemantics(tuple(choices), faults, 0, resubmit)
    else:
        host = "master-0" if plan.elastic is None else "worker-0"
        join = f"torchrun on the other pods waits up to {r.join_timeout_s} s for it to rejoin"
        others = FaultOutcome(
            "a worker's container fails" if plan.elastic is None
            else "another worker's container fails",
            f"{in_place}; {join}, then every rank resumes from the last checkpoint", 1, True)
        store = FaultOutcome(
            f"{name}-{host} fails (it hosts the c10d store)",
            f"{in_place}; torchrun on the other pods loses the store and exits, so the kubelet "
            "restarts every pod's container once; the job resumes from the last checkpoint",
            plan.pods, True)
        faults = (store, others, preempt)
        worst = plan.pods
    # the operator fails the job when the summed restarts reach backoffLimit (0: at once)
    tolerated = None if limit is None else max((limit - 1) // worst, 0) if limit else 0
    return FailureSemantics(tuple(choices), faults, tolerated, resubmit)
