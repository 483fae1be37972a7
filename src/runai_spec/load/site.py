"""Site: the cluster-wide settings of site.yaml, engineer-owned."""

# No `from __future__ import annotations`: the string annotations of a pydantic model are
# compiled one by one when it is defined (~0.15 M instructions each: benchmarks/README.md).
from typing import Any, Literal, get_args

from pydantic import Field, PrivateAttr, field_validator

from ..facts.kai import KAI_VERSION, PLACEMENT_ANNOTATION, TOPOLOGY_ANNOTATION, KaiVersion
from ..facts.kubeflow import OPERATOR_VERSION, OperatorVersion
from ..facts.mpi import NO_OPERATOR, MpiOperator
from ..facts.runai import NODE_POOL_LABEL, PREEMPTIBILITY_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from .model import FileModel
from .profile import LauncherName

SITE_FILE = "site.yaml"


# Run:ai 2.2x's priority dictionary (the PriorityClasses it serves).
RUNAI_PRIORITIES = ("very-low", "low", "medium-low", "medium", "medium-high", "high", "very-high")
ALL_PROJECTS = "*"


class LabelKeys(FileModel):
    """The scheduler's label keys (Run:ai's by default; `kai.scheduler/...` for standalone KAI)."""

    queue: str = QUEUE_LABEL
    priority: str = PRIORITY_LABEL
    preemptibility: str = PREEMPTIBILITY_LABEL
    node_pool: str = NODE_POOL_LABEL


class DataSource(FileModel):
    """An approved data source: its PVC claim in each project's namespace."""

    claim: str = Field("{source}", description="Claim name pattern ({source}, {project}).")
    projects: dict[str, str] = Field(
        default_factory=lambda: {}, description="Explicit claim name per project."
    )
    read_only: bool = Field(True, description="Mounted read-only unless the profile says not.")

    def claim_for(self, source: str, project: str) -> str:
        return self.projects.get(project) or self.claim.format(source=source, project=project)

    @field_validator("claim")
    @classmethod
    def _claim_placeholders(cls, value: str) -> str:
        return _only_placeholders(value, ("source", "project"))


def _only_placeholders(pattern: str, allowed: tuple[str, ...]) -> str:
    """PATTERN if every `{...}` in it is one of ALLOWED (a typo such as `{proj}` or `{0}` would
    crash every render later); ValueError, with the names that are allowed, otherwise."""
    # string.Formatter().parse is this parser: string's own import compiles Template's regex
    # (~4 M instructions at every start), _string's does nothing
    import _string  # type: ignore[import-not-found]

    try:
        fields = [
            (name, spec, conv)
            for _, name, spec, conv in _string.formatter_parser(pattern)
            if name is not None
        ]
    except ValueError as exc:
        raise ValueError(f"{pattern!r} is not a pattern ({exc})") from None
    # a conversion or a format spec ({project!r}, {project:>9}) changes the text: refused too
    wrong = [
        name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
        for name, spec, conv in fields
        if name not in allowed or spec or conv
    ]
    if wrong:
        raise ValueError(
            f"{pattern!r} names the placeholder {{{wrong[0]}}}; only "
            + ", ".join(f"{{{a}}}" for a in allowed)
            + " exist"
        )
    return pattern


class WorkloadGuard(FileModel):
    """The optional second admission policy (`presets policy`): in the project namespaces,
    only the listed creators may make Pods and workloads that request GPUs, RDMA devices or
    a network attachment, so the PyTorchJob gate cannot be sidestepped with a bare Pod."""

    enabled: bool = Field(False, description="Generate the workload guard policy.")
    creators: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:kubeflow:training-operator"],
        description="User names (service accounts) that may create such Pods: the training "
        "operator's, and any other controller of the site that runs approved workloads.",
    )
    resource_prefixes: list[str] = Field(
        default_factory=lambda: ["nvidia.com/", "rdma/"],
        description="Extended resource name prefixes that count as accelerators or RDMA "
        "devices (the presets' network.resources are added).",
    )


# a node label key, as KAI's Topology CRD validates TopologyLevel.nodeLabel (topology_types.go)
NODE_LABEL_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


class Placement(FileModel):
    """The topology level a preset's pods are placed within (a node label key of a level of
    the site's Topology object): required (KAI schedules the job only there) or preferred."""

    required: str | None = Field(
        None,
        max_length=316,
        pattern=NODE_LABEL_PATTERN,
        description=f"Every pod within one domain of this level ({PLACEMENT_ANNOTATION['required']}).",
    )
    preferred: str | None = Field(
        None,
        max_length=316,
        pattern=NODE_LABEL_PATTERN,
        description=f"Within one domain of this level where KAI can ({PLACEMENT_ANNOTATION['preferred']}).",
    )

    def model_post_init(self, context: Any, /) -> None:
        if self.required is None and self.preferred is None:
            raise ValueError("a placement names a required or a preferred level (a node label key)")

    def levels(self) -> list[tuple[str, str]]:
        """(required|preferred, level) as set."""
        return [(k, v) for k, v in (("required", self.required), ("preferred", self.preferred)) if v]


class SiteTopology(FileModel):
    """The cluster's KAI-Scheduler Topology object and where each multi-node preset's pods go
    in it: KAI reads both from the PyTorchJob's annotations (facts/kai.py); Run:ai adds them
    only to workloads it submits itself, so the kubectl path renders them from here."""

    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        max_length=253,
        description="The Topology object's name "
        f"(`kubectl get topologies.kai.scheduler`; {TOPOLOGY_ANNOTATION}).",
    )
    placement: dict[str, Placement] = Field(
        default_factory=lambda: {},
        description="Preset name -> its placement; multi-node presets only (one pod needs none).",
    )


# a pattern (re.match compiles it where it is used: cluster/runai_api.py), not at every start
RUNAI_CLUSTER_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


class RunaiControlPlane(FileModel):
    """Run:ai's control plane, for submitting through its Workloads V2 API (issue 27)."""

    url: str = Field(
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="The control plane's URL (the Run:ai UI's address), e.g. https://runai.example.org.",
    )
    cluster: str = Field(
        min_length=1, description="The cluster's id (a UUID) or its name, as the control plane lists it."
    )
    category: str | None = Field(
        "Train",
        description="The workload category Run:ai monitors "
        "it under (Build, Train, Deploy); null: the workload type's "
        "default.",
    )

    def model_post_init(self, context: Any, /) -> None:
        if self.url.startswith("http://") and not _loopback(self.url):
            raise ValueError(
                "submit.runai.url: http:// would send the access key's secret and every token in "
                "clear; use https:// (plain http only to a loopback address, as tests do)"
            )


def _loopback(url: str) -> bool:
    """Whether URL's host is this machine (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SiteSubmit(FileModel):
    """How the site submits: the Kubernetes API (apply) or Run:ai's Workloads V2 API."""

    via: Literal["kubernetes", "runai"] = Field(
        "kubernetes",
        description="The default path: `kubernetes` applies the PyTorchJob with "
        "the Kubernetes client (Run:ai schedules it as an externally submitted workload); "
        "`runai` submits it as a Run:ai workload (POST /api/v2/workloads). `--via` overrides "
        "it per call when `runai` is configured.",
    )
    runai: RunaiControlPlane | None = Field(
        None, description="The Run:ai control plane; needed for `via: runai` and for `--via runai`."
    )

    def model_post_init(self, context: Any, /) -> None:
        if self.via == "runai" and self.runai is None:
            raise ValueError("submit.via is runai but submit.runai (url, cluster) is not set")


class Site(FileModel):
    """Cluster-wide settings, engineer-owned."""

    cluster: str
    family: Literal["kubeflow", "runai"] = "kubeflow"
    namespace_pattern: str = "runai-{project}"
    namespaces: dict[str, str] = Field(
        default_factory=lambda: {}, description="Projects mapped to other namespaces."
    )
    scheduler_name: str = "runai-scheduler"
    queue_label: str = QUEUE_LABEL
    priority_label: str = PRIORITY_LABEL
    preemptibility_label: str = PREEMPTIBILITY_LABEL
    node_pool_label: str = NODE_POOL_LABEL
    registries: list[str] = Field(min_length=1)
    data_sources: dict[str, DataSource] = Field(
        default_factory=lambda: {}, description="Approved data sources (a list: claim = source name)."
    )
    priorities: list[str] = Field(
        default_factory=lambda: list(RUNAI_PRIORITIES),
        min_length=1,
        description="The cluster's priority dictionary.",
    )
    launchers: list[LauncherName] = Field(
        default_factory=lambda: [n for n in get_args(LauncherName) if n != "mpi"],
        min_length=1,
        description="The launchers a profile may choose (its `launcher` field) on this site; "
        "a preset may narrow it. torchrun and accelerate by default: the accelerate render keeps "
        "torchrun's c10d rendezvous, restarts and shutdown window (one GPU always runs python); "
        "`mpi` only where named, on a site whose `mpi_operator` is mpi-operator v2beta1.",
    )
    mpi_operator: MpiOperator = Field(
        NO_OPERATOR,
        description="The MPI operator the cluster runs: an mpi-operator release serving MPIJob "
        "kubeflow.org/v2beta1 (v0.6.0 or later, as Run:ai requires), `none`, or "
        "`training-operator-v1` (training-operator's older MPIJob v1 under the same CRD name, "
        "which runai-spec does not render): `launcher: mpi` needs the first.",
    )
    allow_module_entrypoint: bool = Field(
        False,
        description="Whether a profile's command may start with `-m <module>` (torchrun "
        "--module / python -m) instead of a script path.",
    )
    operator_version: OperatorVersion = Field(
        OPERATOR_VERSION,
        description="The Kubeflow training-operator release the cluster runs "
        "(kubeflow.OPERATOR_VERSIONS); it fixes the env the operator injects per pod.",
    )
    kai_version: KaiVersion = Field(
        KAI_VERSION,
        description="The KAI-Scheduler release the cluster runs (kai.KAI_VERSIONS): which "
        "Topology object it reads and whether it honours a job's staleness grace period.",
    )
    label_keys: LabelKeys | None = Field(
        None, description="Scheduler label keys; overrides queue_label, priority_label, ... when given."
    )
    grants: dict[str, list[str]] | None = Field(
        None,
        description="Project -> presets it may use (`*`: every project / every preset); "
        "absent: every project may use every preset.",
    )
    workload_guard: WorkloadGuard = Field(
        default_factory=lambda: WorkloadGuard(),
        description="The optional admission policy that keeps "
        "GPU, RDMA and network-attachment Pods to the listed creators (docs/admission.md).",
    )
    submit: SiteSubmit = Field(
        default_factory=lambda: SiteSubmit(),
        description="How `submit`, `status` and `delete` reach the cluster (docs/runai-submit.md).",
    )
    topology: SiteTopology | None = Field(
        None,
        description="The cluster's KAI Topology object and each multi-node preset's placement in it "
        "(topology-aware scheduling; none: KAI places pods without it).",
    )

    @field_validator("namespace_pattern")
    @classmethod
    def _namespace_placeholders(cls, value: str) -> str:
        return _only_placeholders(value, ("project",))

    @field_validator("data_sources", mode="before")
    @classmethod
    def _sources_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {name: {} for name in value}
        return {k: ({} if v is None else v) for k, v in value.items()} if isinstance(value, dict) else value

    def model_post_init(self, context: Any, /) -> None:
        keys = self.label_keys
        if keys is not None:
            for name, value in (
                ("queue_label", keys.queue),
                ("priority_label", keys.priority),
                ("preemptibility_label", keys.preemptibility),
                ("node_pool_label", keys.node_pool),
            ):
                object.__setattr__(self, name, value)

    def claim_for(self, source: str, project: str) -> str:
        """The PVC claim of data source SOURCE in PROJECT's namespace."""
        spec = self.data_sources.get(source)
        return source if spec is None else spec.claim_for(source, project)

    def granted(self, project: str, preset: str) -> bool:
        """May PROJECT use PRESET? (no grants at all: yes)."""
        if self.grants is None:
            return True
        for who in (project, ALL_PROJECTS):
            names = self.grants.get(who, [])
            if preset in names or ALL_PROJECTS in names:
                return True
        return False

    # The line of each field in the file it was read from (for `explain`); empty when built
    # in code. Not a field: it is no setting, and the schema does not show it.
    _lines: dict[str, int] = PrivateAttr(default_factory=dict)

    @property
    def lines(self) -> dict[str, int]:
        return self._lines
