"""Preset, Site, the approvals ledger and PresetRegistry (fails closed)."""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from ..errors import InputError, PresetError
from ..facts.kubeflow import DEFAULT_PORT, DNS1123, DNS1123_PATTERN, NAME_MAX, RDZV_BACKEND
from ..files import replace_file
from ..resources import shipped_dir
from .profile import Strategy
from .signing import (
    ALLOWED_SIGNERS_FILE,
    SignatureError,
    SignedApproval,
    Statement,
    sign_approval,
    verify_approval,
)
from .yaml import load_mapping_lines, load_mapping_text, read_text

SITE_FILE = "site.yaml"
LEDGER_FILE = "approvals.yaml"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_FileModel = TypeVar("_FileModel", bound=_Model)  # what an approved file holds: Site, Preset


class GpuSpec(_Model):
    """The GPU model a preset's pods get."""

    model: str = Field(description="GPU model, e.g. NVIDIA H200.")
    memory_gb: float = Field(gt=0, description="Memory per GPU in GB (an H200 has 141).")


class Elastic(_Model):
    """Elasticity bounds (pods), engineer-owned."""

    min: int = Field(ge=1, description="Fewest pods the job runs with.")
    max: int = Field(ge=1, description="Most pods the job scales to.")
    max_restarts: int = Field(3, ge=0, description="torchrun restarts before failing.")


class Network(_Model):
    """The approved high-speed network attachment."""

    annotations: dict[str, str] = Field(default_factory=dict, description="Pod annotations.")
    resources: dict[str, int] = Field(default_factory=dict,
                                      description="Extended resources per pod (RDMA devices).")
    capabilities: list[str] = Field(default_factory=list, description="Added capabilities.")
    env: dict[str, str] = Field(default_factory=dict, description="NCCL settings for this path.")


class RunPolicy(_Model):
    """Restart, backoff and clean-up policy."""

    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode"] = "OnFailure"
    backoff_limit: int = Field(3, ge=0)
    ttl_seconds_after_finished: int | None = Field(86400, ge=0)
    active_deadline_seconds: int | None = Field(None, gt=0)
    clean_pod_policy: Literal["All", "Running", "None"] = "Running"


class Rendezvous(_Model):
    """How the torchrun agents of a multi-node job meet, and meet again after a node fault
    (docs/fault-experiments/RESULTS.md measured each choice under a kubelet/operator model)."""

    backend: Literal["c10d", "static"] = Field(
        RDZV_BACKEND, description="c10d: the agents re-admit a pod the kubelet restarted in place, "
        "so one node fault costs one container restart; static (torchrun's default): never "
        "re-admits, one fault can use the whole backoffLimit (elastic presets: always c10d).")
    max_restarts: int = Field(
        3, ge=0, description="torchrun --max-restarts of a fixed-size multi-node job: how many "
        "times a surviving agent restarts its ranks for a lost peer (at least the faults the "
        "backoffLimit tolerates). Elastic presets set it in elastic.max_restarts.")
    join_timeout_seconds: int = Field(
        900, gt=0, description="rdzv-conf join_timeout: how long the agents wait for a "
        "restarted pod to rejoin (the kubelet's back-off + image pull + start).")
    read_timeout_seconds: int = Field(
        600, gt=0, description="rdzv-conf read_timeout: how long an agent waits on the "
        "rendezvous store (torch's 60 s default is shorter than a pod restart).")
    last_call_timeout_seconds: int | None = Field(
        None, gt=0, description="rdzv-conf last_call_timeout (elastic: how long a round "
        "waits for more pods once it has the minimum); torch's default (30 s) when unset.")


class Preset(_Model):
    """An engineer-approved compute shape: the only source of pods, GPUs and priority."""

    description: str = Field(description="What the preset is for.")
    layout: Literal["single-gpu", "single-node", "multi-node"]
    nodes: int = Field(ge=1, description="Pods (master + workers); the master trains too.")
    gpus_per_pod: int = Field(ge=1)
    gpu: GpuSpec
    cpu: str = Field(pattern=r"^[0-9]+(\.[0-9]+)?m?$", description="CPU per pod.")
    memory: str = Field(pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$", description="Memory per pod.")
    shared_memory: str | None = Field(None, pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$",
                                      description="Size of /dev/shm (memory emptyDir).")
    priority: str = Field(pattern=DNS1123_PATTERN, description="Run:ai priority class.")
    preemptible: bool
    elastic: Elastic | None = None
    node_pool: str | None = Field(None, pattern=DNS1123_PATTERN, description="Run:ai node pool.")
    network: Network = Field(default_factory=Network)
    strategies: list[Strategy] = Field(min_length=1)
    min_busbw_gbps: float | None = Field(None, gt=0,
                                         description="Minimum all-reduce bus bandwidth.")
    master_port: int = Field(DEFAULT_PORT, ge=1024, le=65535)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    rendezvous: Rendezvous = Field(
        default_factory=Rendezvous, description="torchrun's rendezvous of a multi-node "
        "layout (engineer-owned failure semantics).")
    termination_grace_period_seconds: int = Field(
        30, ge=0, description="Every pod's terminationGracePeriodSeconds: how long a rank "
        "asked to stop (SIGTERM: preemption, deletion) has to checkpoint before SIGKILL.")


# Run:ai 2.2x's priority dictionary (the PriorityClasses it serves).
RUNAI_PRIORITIES = ("very-low", "low", "medium-low", "medium", "medium-high", "high", "very-high")
ALL_PROJECTS = "*"


class LabelKeys(_Model):
    """The scheduler's label keys (Run:ai's by default; `kai.scheduler/...` for standalone KAI)."""

    queue: str = "runai/queue"
    priority: str = "priorityClassName"
    preemptibility: str = "kai.scheduler/preemptibility"
    node_pool: str = "runai/node-pool"


class DataSource(_Model):
    """An approved data source: its PVC claim in each project's namespace."""

    claim: str = Field("{source}", description="Claim name pattern ({source}, {project}).")
    projects: dict[str, str] = Field(default_factory=dict,
                                     description="Explicit claim name per project.")
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
    import string

    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(pattern)
                  if name is not None]
    except ValueError as exc:
        raise ValueError(f"{pattern!r} is not a pattern ({exc})") from None
    # a conversion or a format spec ({project!r}, {project:>9}) changes the text: refused too
    wrong = [name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
             for name, spec, conv in fields if name not in allowed or spec or conv]
    if wrong:
        raise ValueError(f"{pattern!r} names the placeholder {{{wrong[0]}}}; only "
                         + ", ".join(f"{{{a}}}" for a in allowed) + " exist")
    return pattern


class WorkloadGuard(_Model):
    """The optional second admission policy (`presets policy`): in the project namespaces,
    only the listed creators may make Pods and workloads that request GPUs, RDMA devices or
    a network attachment, so the PyTorchJob gate cannot be sidestepped with a bare Pod."""

    enabled: bool = Field(False, description="Generate the workload guard policy.")
    creators: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:kubeflow:training-operator"],
        description="User names (service accounts) that may create such Pods: the training "
        "operator's, and any other controller of the site that runs approved workloads.")
    resource_prefixes: list[str] = Field(
        default_factory=lambda: ["nvidia.com/", "rdma/"],
        description="Extended resource name prefixes that count as accelerators or RDMA "
        "devices (the presets' network.resources are added).")


RUNAI_CLUSTER_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class RunaiControlPlane(_Model):
    """Run:ai's control plane, for submitting through its Workloads V2 API (issue 27)."""

    url: str = Field(pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$", description="The control "
                     "plane's URL (the Run:ai UI's address), e.g. https://runai.example.org.")
    cluster: str = Field(min_length=1, description="The cluster's id (a UUID) or its name, as "
                         "the control plane lists it.")
    category: str | None = Field("Train", description="The workload category Run:ai monitors "
                                 "it under (Build, Train, Deploy); null: the workload type's "
                                 "default.")


class SiteSubmit(_Model):
    """How the site submits: the Kubernetes API (apply) or Run:ai's Workloads V2 API."""

    via: Literal["kubernetes", "runai"] = Field(
        "kubernetes", description="The default path: `kubernetes` applies the PyTorchJob with "
        "the Kubernetes client (Run:ai schedules it as an externally submitted workload); "
        "`runai` submits it as a Run:ai workload (POST /api/v2/workloads). `--via` overrides "
        "it per call when `runai` is configured.")
    runai: RunaiControlPlane | None = Field(None, description="The Run:ai control plane; "
                                            "needed for `via: runai` and for `--via runai`.")

    def model_post_init(self, context: Any, /) -> None:
        if self.via == "runai" and self.runai is None:
            raise ValueError("submit.via is runai but submit.runai (url, cluster) is not set")


class Site(_Model):
    """Cluster-wide settings, engineer-owned."""

    cluster: str
    family: Literal["kubeflow", "runai"] = "kubeflow"
    namespace_pattern: str = "runai-{project}"
    namespaces: dict[str, str] = Field(default_factory=dict,
                                       description="Projects mapped to other namespaces.")
    scheduler_name: str = "runai-scheduler"
    queue_label: str = "runai/queue"
    priority_label: str = "priorityClassName"
    preemptibility_label: str = "kai.scheduler/preemptibility"
    node_pool_label: str = "runai/node-pool"
    registries: list[str] = Field(min_length=1)
    data_sources: dict[str, DataSource] = Field(
        default_factory=dict, description="Approved data sources (a list: claim = source name).")
    priorities: list[str] = Field(default_factory=lambda: list(RUNAI_PRIORITIES),
                                  min_length=1, description="The cluster's priority dictionary.")
    allow_module_entrypoint: bool = Field(
        False, description="Whether a profile's command may start with `-m <module>` (torchrun "
        "--module / python -m) instead of a script path.")
    operator_version: Literal["1.7", "1.8", "1.9"] = Field(
        "1.9", description="The Kubeflow training-operator release the cluster runs "
        "(kubeflow.OPERATOR_VERSIONS); it fixes the env the operator injects per pod.")
    label_keys: LabelKeys | None = Field(None, description="Scheduler label keys; overrides "
                                         "queue_label, priority_label, ... when given.")
    grants: dict[str, list[str]] | None = Field(
        None, description="Project -> presets it may use (`*`: every project / every preset); "
        "absent: every project may use every preset.")
    workload_guard: WorkloadGuard = Field(
        default_factory=WorkloadGuard, description="The optional admission policy that keeps "
        "GPU, RDMA and network-attachment Pods to the listed creators (docs/admission.md).")
    submit: SiteSubmit = Field(default_factory=SiteSubmit, description="How `submit`, `status` "
                               "and `delete` reach the cluster (docs/runai-submit.md).")

    @field_validator("namespace_pattern")
    @classmethod
    def _namespace_placeholders(cls, value: str) -> str:
        return _only_placeholders(value, ("project",))

    @field_validator("data_sources", mode="before")
    @classmethod
    def _sources_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {name: {} for name in value}
        return {k: ({} if v is None else v) for k, v in value.items()} \
            if isinstance(value, dict) else value

    def model_post_init(self, context: Any, /) -> None:
        keys = self.label_keys
        if keys is not None:
            for name, value in (("queue_label", keys.queue), ("priority_label", keys.priority),
                                ("preemptibility_label", keys.preemptibility),
                                ("node_pool_label", keys.node_pool)):
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


class Approval(_Model):
    """One ledger entry: the statement an engineer signed (signing.Statement) and its SSH
    signature. An entry without a signature is kept in the model so that the refusal can
    name it, but it never vouches for a file."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    approved_by: str = Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")
    approved_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    expires: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    signature: str | None = Field(None, description="`ssh-keygen -Y sign -n runai-spec` of "
                                  "the statement, by the key allowed_signers lists for "
                                  "approved_by.")

    @field_validator("approved_at", "expires")
    @classmethod
    def _a_real_date(cls, value: str | None) -> str | None:
        if value is not None:
            dt.date.fromisoformat(value)  # 2027-13-45 matches the pattern but is no date
        return value


class Ledger(_Model):
    """presets/approvals.yaml."""

    approvals: dict[str, Approval]


@dataclass(frozen=True)
class ApprovedPreset:
    """A preset that passed every ledger check, with its approval record."""

    name: str
    preset: Preset
    sha256: str
    approval: Approval
    lines: dict[str, int] = field(default_factory=dict, compare=False)  # field -> line


@dataclass(frozen=True)
class VerifyResult:
    """What `presets verify` found: one line per file, problems first."""

    ok: tuple[str, ...]
    problems: tuple[str, ...]


def default_presets_dir() -> Path:
    """The presets/ shipped with runai-spec (tests replace this function)."""
    return shipped_dir("presets")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pydantic_error(exc: ValidationError, source: str) -> PresetError:
    """Every problem of the file, one `error:` line each, and the engineers' hint."""
    errors = [PresetError(e["msg"], file=source, field=".".join(str(p) for p in e["loc"]) or None)
              for e in exc.errors()]
    return PresetError(errors[0].message, file=source, field=errors[0].field,
                       hint="presets are engineer-owned; ask an SCC AI Engineer",
                       also=[e.lines()[0] for e in errors[1:]])


class PresetRegistry:
    """Presets of one folder, accepted only when the approvals ledger vouches for them."""

    def __init__(self, root: Path | None = None, *, today: dt.date | None = None) -> None:
        self.root = root or default_presets_dir()
        self.today = today or dt.date.today()
        self._ledger: Ledger | None = None
        self._site: Site | None = None
        self._presets: dict[str, ApprovedPreset] = {}

    # -- ledger ---------------------------------------------------------------
    @property
    def ledger_path(self) -> Path:
        return self.root / LEDGER_FILE

    def ledger(self) -> Ledger:
        if self._ledger is None:
            source = str(self.ledger_path)
            if self.ledger_path.is_symlink():
                raise PresetError("the approvals ledger is a symlink", file=source)
            raw = load_mapping_text(read_text(self.ledger_path), source)
            try:
                self._ledger = Ledger.model_validate(raw)
            except ValidationError as exc:
                raise _pydantic_error(exc, source) from None
        return self._ledger

    def names(self) -> list[str]:
        """Preset names stored in the folder (site and ledger excluded), sorted."""
        return sorted(p.name[:-5] for p in self.root.glob("*.yaml")
                      if p.name not in (SITE_FILE, LEDGER_FILE))

    @property
    def allowed_signers_path(self) -> Path:
        return self.root / ALLOWED_SIGNERS_FILE

    def _approved_bytes(self, filename: str, what: str) -> tuple[bytes, Approval]:
        path = self.root / filename
        source = str(path)
        hint_approve = approve_hint(what)
        if path.is_symlink():
            raise PresetError("is a symlink; presets must be plain files", file=source,
                              hint="replace the link with the reviewed file")
        if not path.is_file():
            raise PresetError("no such file", file=source)
        data = path.read_bytes()
        entry = self.ledger().approvals.get(filename)
        if entry is None:
            raise PresetError("not recorded in the approvals ledger", file=source,
                              field="approvals", hint=hint_approve)
        if _sha256(data) != entry.sha256:
            raise PresetError("edited since it was approved (sha256 differs from the ledger)",
                              file=source, field="sha256", hint=hint_approve)
        self._verify_signature(filename, entry, source, hint_approve)
        if dt.date.fromisoformat(entry.approved_at) > self.today:
            # signed at a date still to come: no key window (valid-after) and no review
            # vouches for it yet (the signer chose the date)
            raise PresetError(f"approval dated {entry.approved_at}, after today "
                              f"({self.today.isoformat()})", file=source, field="approved_at",
                              hint=hint_approve)
        if entry.expires is not None and dt.date.fromisoformat(entry.expires) < self.today:
            raise PresetError(f"approval expired on {entry.expires}", file=source,
                              field="expires", hint=hint_approve)
        return data, entry

    def _approved_model(self, filename: str, what: str,
                        model: type[_FileModel]) -> tuple[_FileModel, dict[str, int], Approval]:
        """FILENAME as approved (_approved_bytes), validated as MODEL: the model, the line of
        each of its fields and the ledger entry."""
        data, entry = self._approved_bytes(filename, what)
        source = str(self.root / filename)
        raw, lines = load_mapping_lines(data.decode("utf-8"), source)
        try:
            return model.model_validate(raw), lines, entry
        except ValidationError as exc:
            raise _pydantic_error(exc, source) from None

    def _verify_signature(self, filename: str, entry: Approval, source: str, hint: str) -> None:
        """Refuse the approval of FILENAME unless an engineer listed in allowed_signers signed
        exactly this entry (as an edited file is refused: one error, exit 2)."""
        if entry.signature is None:
            raise SignatureError(f"the approval in {LEDGER_FILE} is not signed; approvals are "
                                 "signed with an AI Engineer's SSH key", file=source,
                                 field="signature", hint=hint)
        try:  # in-process (signing.verify_approval): no ssh-keygen needed to load a preset
            statement = Statement(filename, entry.sha256, entry.approved_by, entry.approved_at,
                                  entry.expires)
            verify_approval(SignedApproval(statement, entry.signature),
                            self.allowed_signers_path, source=source)
        except SignatureError as exc:
            located = exc.located(source)
            if located.hint is None:
                located.hint = hint
            raise located from None

    # -- site and presets -----------------------------------------------------
    def site(self) -> Site:
        if self._site is None:
            site, lines, _ = self._approved_model(SITE_FILE, "site", Site)
            site._lines = lines
            self._site = site
        return self._site

    def get(self, name: str) -> ApprovedPreset:
        """The approved preset NAME, or a PresetError saying exactly why not."""
        if name in self._presets:
            return self._presets[name]
        if not _is_label(name) or name in ("site", "approvals"):
            raise PresetError(f"{name!r} is not a preset name (a plain lowercase label)",
                              field="preset", hint="run `runai-spec presets list`")
        filename = f"{name}.yaml"
        if not (self.root / filename).exists() and not (self.root / filename).is_symlink():
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "run `runai-spec presets list`"
            raise PresetError(f"unknown preset {name!r}", field="preset", hint=hint)
        preset, lines, entry = self._approved_model(filename, name, Preset)
        source = str(self.root / filename)
        problem = _preset_consistency(preset) or _priority_problem(preset, self.site())
        if problem:
            about_priority = problem.endswith(PRIORITY_TAIL)
            raise PresetError(problem, file=source,
                              line=lines.get("priority") if about_priority else None,
                              field="priority" if about_priority else None,
                              hint=PRIORITY_HINT if about_priority else None)
        approved = ApprovedPreset(name, preset, entry.sha256, entry, lines)
        self._presets[name] = approved
        return approved

    def verify(self) -> VerifyResult:
        """Check every file in the folder against the ledger and its signatures (for CI),
        in-process: no ssh-keygen needed."""
        ok: list[str] = []
        problems: list[str] = []
        try:
            ledger = self.ledger()
        except InputError as exc:
            return VerifyResult((), (str(exc).splitlines()[0],))
        signers = self.allowed_signers_path
        if signers.is_symlink() or not signers.is_file():
            return VerifyResult((), (f"error: {signers}: allowed_signers: no such plain file; "
                                     "no approval can verify without the engineers' keys",))
        files = sorted(p.name for p in self.root.iterdir()
                       if p.name not in (LEDGER_FILE, ALLOWED_SIGNERS_FILE)
                       and not p.name.startswith("."))
        for filename in files:
            if not filename.endswith(".yaml"):
                problems.append(f"error: {self.root / filename}: not a preset file (*.yaml)")
                continue
            try:
                if filename == SITE_FILE:
                    self.site()
                else:
                    self.get(filename[:-5])
                ok.append(filename)
            except InputError as exc:
                line = exc.lines()[0]
                if line not in problems:  # a site file that fails, failing every preset: once
                    problems.append(line)
        for filename in sorted(set(ledger.approvals) - set(files)):
            problems.append(f"error: {self.ledger_path}: approvals.{filename}: "
                            "ledger entry for a file that does not exist")
        return VerifyResult(tuple(ok), tuple(problems))

    def approve(self, name: str, key: Path, *, expires: str | None = None) -> Approval:
        """Sign the current bytes of NAME (or `site`) with the engineer's SSH KEY and record
        the signed approval in the ledger; the approver is the principal allowed_signers
        lists for KEY."""
        filename = SITE_FILE if name == "site" else f"{name}.yaml"
        path = self.root / filename
        if name != "site" and (not _is_label(name)):
            raise PresetError(f"{name!r} is not a preset name", field="preset")
        if path.is_symlink() or not path.is_file():
            raise PresetError("no such plain file", file=str(path))
        text = read_text(path)
        raw = load_mapping_text(text, str(path))
        try:
            if name == "site":
                Site.model_validate(raw)
            else:
                preset = Preset.model_validate(raw)
                problem = _preset_consistency(preset) or _priority_problem(preset, self.site())
                if problem:
                    about_priority = problem.endswith(PRIORITY_TAIL)
                    raise PresetError(problem, file=str(path),
                                      field="priority" if about_priority else None,
                                      hint=PRIORITY_HINT if about_priority else None)
        except ValidationError as exc:
            raise _pydantic_error(exc, str(path)) from None
        current = self.ledger().approvals if self.ledger_path.exists() else {}
        expires = self._expiry(name, expires, current.get(filename))
        signed = sign_approval(filename, _sha256(path.read_bytes()), key,
                               self.allowed_signers_path, approved_at=self.today.isoformat(),
                               expires=expires)
        statement = signed.statement
        entry = Approval(sha256=statement.sha256, approved_by=statement.approver,
                         approved_at=statement.approved_at, expires=statement.expires,
                         signature=signed.signature)
        approvals = dict(current)
        approvals[filename] = entry
        write_ledger(self.ledger_path, approvals)
        self._ledger = None
        self._presets.pop(name, None)
        if name == "site":
            self._site = None
        return entry


    def _expiry(self, name: str, expires: str | None, previous: Approval | None) -> str | None:
        """The expiry a new approval of NAME carries: the date given (never one already
        past), none for `never`, and without --expires the earlier approval's, if it has not
        passed; an earlier expiry that has passed must be renewed or dropped explicitly."""
        if expires == NO_EXPIRY:
            return None
        if expires is None:
            if previous is None or previous.expires is None:
                return None
            if dt.date.fromisoformat(previous.expires) >= self.today:
                return previous.expires  # re-approving an edit keeps the review's time limit
            raise InputError(f"the earlier approval of {name} expired on {previous.expires}; "
                             "say how long this one holds", field="--expires",
                             hint="`--expires YYYY-MM-DD` (today or later), or `--expires "
                             f"{NO_EXPIRY}` for an approval without an expiry")
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", expires):
                raise ValueError(expires)  # fromisoformat also takes 20271231, 2027-W52-1
            date = dt.date.fromisoformat(expires)
        except ValueError:
            raise InputError("not a date (YYYY-MM-DD)", field="--expires",
                             hint=f"e.g. 2027-06-30, or `{NO_EXPIRY}`") from None
        if date < self.today:
            raise InputError(f"{expires} has passed (today is {self.today.isoformat()}): the "
                             "approval would be refused at once", field="--expires",
                             hint="give today's date or a later one")
        return expires


NO_EXPIRY = "never"  # `presets approve --expires never`: an approval without an expiry


def approve_hint(what: str) -> str:
    """How a file gets (re-)approved: reviewed, then signed by an engineer's key."""
    return (f"an SCC AI Engineer reviews it and runs `runai-spec presets approve {what} "
            "--key ~/.ssh/id_ed25519` (a key listed in presets/allowed_signers)")


def _is_label(name: str) -> bool:
    return bool(DNS1123.match(name)) and len(name) <= NAME_MAX


PRIORITY_TAIL = ": the scheduler would silently run the job as low, preemptible"
PRIORITY_HINT = "use one of the site's priorities (site.yaml `priorities`), e.g. low or medium"


def _priority_problem(preset: Preset, site: Site) -> str | None:
    if preset.priority not in site.priorities:
        return (f"{preset.priority!r} is not a class the cluster serves "
                f"({', '.join(site.priorities)}){PRIORITY_TAIL}")
    return None


def _preset_consistency(preset: Preset) -> str | None:
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
            return (f"rendezvous applies to multi-node layouts; {preset.layout} renders its "
                    "own launcher")
        return None
    if preset.elastic is not None:
        if preset.rendezvous.backend != RDZV_BACKEND:
            return "an elastic preset needs rendezvous.backend c10d (the operator's elasticPolicy)"
        if "max_restarts" in written:
            return "an elastic preset sets torchrun's restarts in elastic.max_restarts"
    elif preset.rendezvous.backend == "static":
        extra = sorted(written - {"backend"})
        if extra:
            return (f"rendezvous.{extra[0]} has no effect with the static backend "
                    "(torchrun's static rendezvous has no timeouts or re-admission)")
    return None


def write_ledger(path: Path, approvals: dict[str, Approval]) -> None:
    """Write the ledger atomically, sorted, in a fixed plain format."""
    lines = ["# Approvals ledger: written by `runai-spec presets approve`; reviewed in merge requests.",
             "approvals:"]
    for filename in sorted(approvals):
        entry = approvals[filename]
        lines.append(f"  {filename}:")
        lines.append(f"    sha256: \"{entry.sha256}\"")
        lines.append(f"    approved_by: {json.dumps(entry.approved_by)}")
        lines.append(f'    approved_at: "{entry.approved_at}"')
        if entry.expires:
            lines.append(f'    expires: "{entry.expires}"')
        if entry.signature:
            lines.append("    signature: |")
            lines.extend(f"      {line}" for line in entry.signature.splitlines())
    replace_file(path, "\n".join(lines) + "\n")


def site_summary(registry: PresetRegistry) -> dict[str, Any]:
    """A plain mapping of the site file and its approval, for `presets show site`."""
    site = registry.site()
    approval = registry.ledger().approvals[SITE_FILE]
    return {"name": "site", "sha256": approval.sha256,
            "approval": approval.model_dump(exclude_none=True, exclude={"signature"}),
            **site.model_dump(exclude_none=True)}


def preset_summary(approved: ApprovedPreset) -> dict[str, Any]:
    """A plain mapping of the preset and its approval, for `presets show`."""
    return {"name": approved.name, "sha256": approved.sha256,
            "approval": approved.approval.model_dump(exclude_none=True, exclude={"signature"}),
            **approved.preset.model_dump(exclude_none=True)}
