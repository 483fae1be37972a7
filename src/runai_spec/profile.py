"""Profile models (researcher-owned) and load_profile()."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InputError, Location
from .findings import Finding
from .kubeflow import DNS1035_PATTERN, DNS1123_PATTERN, NAME_MAX
from .loading import load_mapping_lines, read_text

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

Strategy = Literal["ddp", "fsdp", "deepspeed", "tensor", "pipeline", "hybrid"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
CheckpointFormat = Literal["dcp", "torch", "safetensors", "deepspeed"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Batch(_Model):
    """The batch-size arithmetic the site guide asks every project to record."""

    local: int = Field(gt=0, description="Samples per process per step (the local batch).")
    grad_accum: int = Field(1, gt=0, description="Gradient accumulation steps.")
    global_: int = Field(alias="global", gt=0,
                         description="Intended global batch = local x processes x grad_accum.")


class Model(_Model):
    """What the AI engineer needs to approve a topology."""

    parameters: int = Field(gt=0, description="Number of model parameters, e.g. 7000000000.")
    precision: Precision = Field(description="Training precision of weights and gradients.")
    sequence_length: int | None = Field(None, gt=0, description="Tokens per sample, if any.")
    optimizer: Literal["adamw", "adam", "sgd"] = Field(
        "adamw", description="Optimizer, for the memory estimate (Adam keeps two fp32 moments).")


class Checkpoint(_Model):
    """Where and how checkpoints are written; never the image filesystem."""

    dir: str = Field(pattern=r"^/", description="Absolute mount path of the checkpoints.")
    pvc: str | None = Field(None, pattern=DNS1123_PATTERN, max_length=253,
                            description="PersistentVolumeClaim mounted at `dir`.")
    source: str | None = Field(None, pattern=DNS1123_PATTERN, max_length=253,
                               description="Approved data source (site file) mounted at `dir`.")
    format: CheckpointFormat = Field("torch", description="Checkpoint format.")
    resume: str | None = Field(None, min_length=1,
                               description="How the script resumes, e.g. `latest in dir`.")
    on_sigterm: bool = Field(False, description="The script writes a checkpoint when it "
                             "receives SIGTERM (preemption, eviction, a restart), within the "
                             "preset's termination grace period.")


class DataVolume(_Model):
    """A volume to mount in every pod."""

    path: str = Field(pattern=r"^/", description="Absolute mount path in the container.")
    pvc: str | None = Field(None, pattern=DNS1123_PATTERN, max_length=253,
                            description="PersistentVolumeClaim to mount.")
    source: str | None = Field(None, pattern=DNS1123_PATTERN, max_length=253,
                               description="Approved data source (site file) to mount.")
    read_only: bool = Field(True, description="Mount read-only (the default).")


class Diagnostics(_Model):
    """Temporary switches for diagnosing a failing run; reported in every output."""

    nccl_debug: bool = Field(False, description="Set NCCL_DEBUG=INFO temporarily (per-rank logs).")
    reason: str | None = Field(None, description="Why the switch is on (ticket, date).")


class Metrics(_Model):
    """How the script writes shared metrics; the site guide: only rank 0 writes them."""

    writer: Literal["rank0", "per-rank", "all-ranks"] = Field(
        description="`rank0`: only global rank 0 writes; `per-rank`: each rank its own files; "
                    "`all-ranks`: every rank writes the same metrics (duplicates).")
    tracker: str | None = Field(None, min_length=1,
                                description="Metrics tracker, e.g. tensorboard, wandb, mlflow.")


class SecretRef(_Model):
    """A key of a Kubernetes Secret in the project's namespace (valueFrom.secretKeyRef)."""

    secret: str = Field(pattern=DNS1123_PATTERN, max_length=253, description="Secret name.")
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253, description="Key in the Secret.")


EnvValue = Annotated[str | int | float | bool, Field(union_mode="left_to_right")]


class Profile(_Model):
    """A researcher's project profile: what to run, never how the cluster runs it."""

    name: str = Field(pattern=DNS1035_PATTERN, max_length=NAME_MAX,
                      description="Workload name (DNS-1035 label).")
    project: str = Field(pattern=DNS1123_PATTERN, max_length=NAME_MAX, description="Run:ai project.")
    preset: str = Field(pattern=DNS1123_PATTERN, max_length=NAME_MAX, description="Approved preset name.")
    image: str = Field(min_length=1, description="Immutable image: registry/repo[:tag]@sha256:<64 hex>.")
    command: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="Training entry point and arguments, e.g. [train.py, --cfg, c.yaml].")
    working_dir: str | None = Field(None, pattern=r"^/", description="Container working directory.")
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], EnvValue] = Field(
        default_factory=dict, description="Plain environment variables.")
    secret_env: dict[Annotated[str, Field(pattern=ENV_NAME)], SecretRef] = Field(
        default_factory=dict,
        description="Credentials as variables read from a Secret (never written in the profile).")
    batch: Batch = Field(description="Batch arithmetic.")
    strategy: Strategy = Field("ddp", description="Parallelism strategy.")
    zero_stage: int | None = Field(None, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    model: Model | None = Field(None, description="Model size, precision, sequence length.")
    checkpoint: Checkpoint = Field(description="Checkpoint location and format.")
    data: list[DataVolume] = Field(default_factory=list, description="Data volumes to mount.")
    metrics: Metrics | None = Field(None, description="Who writes shared metrics (rank 0 only).")
    diagnostics: Diagnostics = Field(default_factory=Diagnostics,
                                     description="Temporary diagnostic switches.")

    def env_strings(self) -> dict[str, str]:
        def text(value: str | int | float | bool) -> str:
            return ("true" if value else "false") if isinstance(value, bool) else str(value)
        return {key: text(value) for key, value in self.env.items()}


# The site guide reserves these for the engineers; a profile naming one gets a finding
# that names the rule, not a silent drop or a generic "unknown field".
RESERVED: dict[str, str] = {
    key: "reserved-field" for key in (
        "gpus", "gpu", "gpus_per_pod", "gpu_devices", "gpu_devices_per_pod", "num_gpus",
        "resources", "cpu", "memory", "shared_memory", "shm", "compute", "compute_preset",
        "workers", "num_workers", "replicas", "nodes", "num_nodes", "nnodes", "nproc_per_node",
        "priority", "priority_class", "priorityClassName", "preemptible", "preemptibility",
        "elastic", "elasticity", "elastic_policy", "elasticPolicy", "min_replicas",
        "max_replicas", "node_pool", "node_pools", "nodePool", "node_selector",
        "nodeSelector", "affinity", "tolerations", "network", "annotations", "labels",
        "infiniband", "rdma", "extended_resources", "capabilities", "hostNetwork",
        "host_network", "privileged", "securityContext", "namespace", "scheduler",
        "schedulerName", "restart_policy", "backoff_limit",
    )
}


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile with its source file, sha256, line map and pre-model findings."""

    profile: Profile
    path: str
    sha256: str
    lines: dict[str, int] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = "global" if part == "global_" else str(part)
            out = f"{out}.{name}" if out else name
    return out


def _line_of(path: str, lines: dict[str, int]) -> int | None:
    """The line of a field, or of its nearest parent (a missing field has none of its own)."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def _explained(error: Any) -> tuple[str, str, str | None]:
    """(field path, message, hint) of one pydantic error, in the profile's words."""
    path = _field_path(tuple(p for p in error["loc"] if not str(p).startswith("function-")))
    msg, hint = error["msg"], None
    if error["type"] == "extra_forbidden":
        msg, hint = "unknown field", "see `runai-spec schema` for the fields a profile may set"
    elif error["type"] == "missing":
        msg, hint = "required field is missing", "see examples/ for a complete profile"
    elif error["type"] == "string_pattern_mismatch" and path == "name":
        msg = "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
    return path, msg, hint


def _validation_error(exc: ValidationError, source: str,
                      lines: dict[str, int] | None = None) -> InputError:
    """Every problem pydantic found, one `error:` line each (a profile with five mistakes
    shows five), and the first hint."""
    errors = [InputError(msg, file=source, line=_line_of(path, lines or {}), field=path or None,
                         hint=hint) for path, msg, hint in map(_explained, exc.errors())]
    first = errors[0]
    return InputError(first.message, file=source, line=first.line, field=first.field,
                      hint=next((e.hint for e in errors if e.hint), None),
                      also=[e.lines()[0] for e in errors[1:]])


_RESERVED_MESSAGE = ("reserved for the SCC AI Engineers (compute preset, workers, priority, "
                     "elasticity, node pools, network attachment are set by the preset)")
# Variable names are the researcher's own namespace: `env.GPUS` is a plain variable.
_FREE_KEYS = ("env", "secret_env")


def _strip_reserved(value: Any, path: str, source: str, lines: dict[str, int],
                    findings: list[Finding]) -> Any:
    # Nested too: `checkpoint.annotations` or `nvidia.com/rdma_ib` copied from another
    # project must name the rule, not fail as a generic unknown field.
    if isinstance(value, list):
        return [_strip_reserved(item, f"{path}[{i}]", source, lines, findings)
                for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    kept = {}
    for key, child in value.items():
        child_path = f"{path}.{key}" if path else key
        if key in RESERVED or "/" in key:
            what = ("extended resources, annotations and InfiniBand devices come from the preset"
                    if "/" in key else _RESERVED_MESSAGE)
            if "/" in key:
                what = f"reserved for the SCC AI Engineers ({what})"
            findings.append(Finding(
                "reserved-field", Location(source, lines.get(child_path), child_path), what,
                "remove it; ask your AI Engineer for a preset that has what you need"))
        elif not path and key in _FREE_KEYS:
            kept[key] = child
        else:
            kept[key] = _strip_reserved(child, child_path, source, lines, findings)
    return kept


def _reserved_findings(raw: dict[str, Any], source: str,
                       lines: dict[str, int]) -> tuple[dict[str, Any], list[Finding]]:
    findings: list[Finding] = []
    kept = _strip_reserved(raw, "", source, lines, findings)
    return kept, findings


def parse_profile(text: str, source: str) -> LoadedProfile:
    """Validate profile text; reserved fields become findings, everything else must be valid."""
    raw, lines = load_mapping_lines(text, source)
    kept, findings = _reserved_findings(raw, source, lines)
    try:
        profile = Profile.model_validate(kept)
    except ValidationError as exc:
        raise _validation_error(exc, source, lines) from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return LoadedProfile(profile, source, digest, lines, tuple(findings))


def load_profile(path: Path) -> LoadedProfile:
    """Read and validate a profile file."""
    return parse_profile(read_text(path), str(path))


def profile_schema() -> dict[str, Any]:
    """The JSON Schema of the profile, for editors."""
    schema = Profile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "runai-spec profile"
    return schema

