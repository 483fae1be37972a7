"""Profile models (researcher-owned) and load_profile()."""

# No `from __future__ import annotations`: the string annotations of a pydantic model are
# compiled one by one when it is defined (~0.15 M instructions each: benchmarks/README.md).
import copy
import difflib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError
from pydantic_core import PydanticCustomError

from ..errors import InputError, RunaiSpecError
from ..facts.kubeflow import DNS1035_PATTERN, DNS1123_PATTERN, NAME_MAX
from ..findings import Finding
from ..records import Record
from .model import FileModel, read_once
from .profile_hints import YAML11_BOOLS, count_hint, dns_suggestion, fallback_hint, field_path, line_of
from .reserved_fields import FREE_KEYS, reserved_findings
from .yaml import literal_text, load_mapping_lines, load_mapping_text, read_text

read_once(literal_text)  # the validator of every text field below (model.read_once)

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# The most a profile's command, env and data may hold (issue 41 item 8): the admission policy
# reads each argument and value with regular expressions, which the API server charges by the
# text's length times the pattern's (cel-go: ceil((1 + len) / 10) * ceil(len(regex) / 4)) within
# a limit per expression; validate refuses more, and the policy (admission/rules.py) denies more.
MAX_ARGS = 128  # arguments after the entry point
MAX_TEXT = 1024  # characters of one argument, or of one variable's value
MAX_ENTRIES = 16  # variables in env, in secret_env; data volumes
MAX_NAME = 64  # characters of a variable's name
# Validate's alone (the policy's CEL cannot add lengths up): every job validate accepts stays
# within the API server's cost limits, which deny (fail closed) beyond them.
MAX_COMMAND_TEXT = 8192  # characters of the command, all its items
MAX_ENV_TEXT = 4096  # characters of env's values, all of them
EnvName = Annotated[str, Field(pattern=ENV_NAME, max_length=MAX_NAME)]


def _total(most: int, what: str) -> AfterValidator:
    """At most MOST characters in all the texts of a list or a map's values together."""

    def check(value: Any) -> Any:
        if sum(map(len, value.values() if isinstance(value, dict) else value)) > most:
            raise ValueError(f"{what} hold more than {most:,} characters together")
        return value

    return AfterValidator(check)


# DESIGN section 5: a plain scalar in a string field is exactly the text written (`1.10`
# stays "1.10", `--epochs, 90` gives "90"); Arg also says so in the JSON Schema, for editors.
Text = Annotated[str, BeforeValidator(literal_text)]
_AS_WRITTEN = BeforeValidator(literal_text, json_schema_input_type=str | int | float | bool)
Arg = Annotated[str, _AS_WRITTEN]
# An optional text's constraints go inside its type, before the validator: given to the field
# of a `Text | None`, pydantic left the pattern out of the JSON Schema (issue 26 item 5).
DnsText = Annotated[str, Field(pattern=DNS1123_PATTERN, max_length=253), BeforeValidator(literal_text)]
PathText = Annotated[str, Field(pattern=r"^/"), BeforeValidator(literal_text)]
# a file beside the profile: relative (load_profile refuses a `..` in it)
RelativePath = Annotated[str, Field(pattern=r"^[^/]", max_length=255), BeforeValidator(literal_text)]
SomeText = Annotated[str, Field(min_length=1), BeforeValidator(literal_text)]
# A torch release as `torch.__version__` writes it (`2.13.0`, `2.13.0+cu130`, `2.12`).
TorchVersion = Annotated[
    str,
    Field(pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?([+.a-z0-9]*)$", max_length=64),
    BeforeValidator(literal_text),
]
# Only `true`/`false`: YAML 1.1's yes/no/on/off (and pydantic's "1", "t", ...) never flip a switch.
Switch = Annotated[bool, Field(strict=True)]


COUNT_TEXT = "count_text"  # the error type of a count written as text


@read_once
def _a_number(value: Any) -> Any:
    """A count is a number as the strict loader reads one (JSON's: `4`, `13e9`): `true` is
    never 1, and text is never read as a number, whether quoted (`"4"`) or a plain scalar
    that is no JSON number (`1_000`, `017`, `00004`, `+4`), which Python's int() would take
    and YAML 1.1 would read otherwise (`017` is 15 there)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    if isinstance(value, str):
        raise PydanticCustomError(COUNT_TEXT, "{text} is not a number", {"text": repr(value)})
    return value


Count = Annotated[int, BeforeValidator(_a_number)]
# Likewise an optional count's bounds: given to the field of a `Count | None`, pydantic wrote
# them into the JSON Schema as `gt`/`ge`/`le`, which no JSON Schema validator knows.
PositiveCount = Annotated[int, Field(gt=0), BeforeValidator(_a_number)]
ZeroStage = Annotated[int, Field(ge=0, le=3), BeforeValidator(_a_number)]

# The launchers a profile may choose (`launcher`), the default first; site.yaml and the presets
# narrow them. One GPU always runs python.
LauncherName = Literal["torchrun", "accelerate", "mpi"]
Strategy = Literal["ddp", "fsdp", "deepspeed", "tensor", "pipeline", "hybrid"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
CheckpointFormat = Literal["dcp", "torch", "safetensors", "deepspeed"]


class Batch(FileModel):
    """The batch-size arithmetic the site guide asks every project to record."""

    local: Count = Field(gt=0, description="Samples per process per step (the local batch).")
    grad_accum: Count = Field(1, gt=0, description="Gradient accumulation steps.")
    global_: Count = Field(
        alias="global", gt=0, description="Intended global batch = local x processes x grad_accum."
    )


class Model(FileModel):
    """What the AI engineer needs to approve a topology."""

    parameters: Count = Field(gt=0, description="Number of model parameters, e.g. 7000000000.")
    precision: Precision = Field(description="Training precision of weights and gradients.")
    sequence_length: PositiveCount | None = Field(None, description="Tokens per sample, if any.")
    optimizer: Literal["adamw", "adam", "sgd"] = Field(
        "adamw", description="Optimizer, for the memory estimate (Adam keeps two fp32 moments)."
    )


class Checkpoint(FileModel):
    """Where and how checkpoints are written; never the image filesystem."""

    dir: Text = Field(pattern=r"^/", description="Absolute mount path of the checkpoints.")
    pvc: DnsText | None = Field(None, description="PersistentVolumeClaim mounted at `dir`.")
    source: DnsText | None = Field(None, description="Approved data source (site file) mounted at `dir`.")
    format: CheckpointFormat = Field("torch", description="Checkpoint format.")
    resume: SomeText | None = Field(None, description="How the script resumes, e.g. `latest in dir`.")
    on_sigterm: Switch = Field(
        False,
        description="The script writes a checkpoint when it "
        "receives SIGTERM (preemption, eviction, a restart), within the "
        "preset's termination grace period.",
    )


class DataVolume(FileModel):
    """A volume to mount in every pod."""

    path: Text = Field(pattern=r"^/", description="Absolute mount path in the container.")
    pvc: DnsText | None = Field(None, description="PersistentVolumeClaim to mount.")
    source: DnsText | None = Field(None, description="Approved data source (site file) to mount.")
    read_only: Switch = Field(True, description="Mount read-only (the default).")


class Diagnostics(FileModel):
    """Temporary switches for diagnosing a failing run; reported in every output."""

    nccl_debug: Switch = Field(False, description="Set NCCL_DEBUG=INFO temporarily (per-rank logs).")
    reason: Text | None = Field(None, description="Why the switch is on (ticket, date).")


class Metrics(FileModel):
    """How the script writes shared metrics; the site guide: only rank 0 writes them."""

    writer: Literal["rank0", "per-rank", "all-ranks"] = Field(
        description="`rank0`: only global rank 0 writes; `per-rank`: each rank its own files; "
        "`all-ranks`: every rank writes the same metrics (duplicates)."
    )
    tracker: SomeText | None = Field(None, description="Metrics tracker, e.g. tensorboard, wandb, mlflow.")


class SecretRef(FileModel):
    """A key of a Kubernetes Secret in the project's namespace (valueFrom.secretKeyRef)."""

    secret: Text = Field(pattern=DNS1123_PATTERN, max_length=253, description="Secret name.")
    key: Text = Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253, description="Key in the Secret.")


class Profile(FileModel):
    """A researcher's project profile: what to run, never how the cluster runs it."""

    name: Text = Field(
        pattern=DNS1035_PATTERN, max_length=NAME_MAX, description="Workload name (DNS-1035 label)."
    )
    project: Text = Field(pattern=DNS1123_PATTERN, max_length=NAME_MAX, description="Run:ai project.")
    preset: Text = Field(pattern=DNS1123_PATTERN, max_length=NAME_MAX, description="Approved preset name.")
    image: Text = Field(min_length=1, description="Immutable image: registry/repo[:tag]@sha256:<64 hex>.")
    command: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT), _AS_WRITTEN]],
        _total(MAX_COMMAND_TEXT, "the command's items"),
    ] = Field(
        min_length=1,
        max_length=1 + MAX_ARGS,
        description="Training entry point and arguments, e.g. [train.py, --cfg, c.yaml]; items of "
        f"at most {MAX_TEXT:,} characters, {MAX_COMMAND_TEXT:,} in all.",
    )
    working_dir: PathText | None = Field(None, description="Container working directory.")
    launcher: LauncherName = Field(
        "torchrun",
        description="What starts the processes of a multi-GPU layout: `torchrun`, or "
        "`accelerate` (`accelerate launch`, for Hugging Face Accelerate scripts; not on elastic "
        "presets), or `mpi` (an MPIJob whose launcher runs `mpirun`, on a site with "
        "mpi-operator v2beta1) where the site and the preset allow it. One GPU always runs `python`.",
    )
    accelerate_config: RelativePath | None = Field(
        None,
        description="Your accelerate config file (YAML or JSON; `launcher: accelerate`), relative "
        "to the profile: its training keys (mixed precision, FSDP or DeepSpeed settings, dynamo) "
        "go into the config runai-spec renders; its topology keys are the engineers' and refused.",
    )
    torch_version: TorchVersion | None = Field(
        None,
        description="The image's PyTorch version, e.g. 2.13.0: how long torchrun lets "
        "the ranks save on SIGTERM (30 s before torch 2.12, the preset's grace period since).",
    )
    env: Annotated[
        dict[EnvName, Annotated[str, Field(max_length=MAX_TEXT), _AS_WRITTEN]],
        _total(MAX_ENV_TEXT, "the variables' values"),
    ] = Field(
        default_factory=lambda: {},
        max_length=MAX_ENTRIES,
        description=f"Plain environment variables: names of at most {MAX_NAME} characters, values of "
        f"at most {MAX_TEXT:,}, {MAX_ENV_TEXT:,} in all.",
    )
    secret_env: dict[EnvName, SecretRef] = Field(
        default_factory=lambda: {},
        max_length=MAX_ENTRIES,
        description="Credentials as variables read from a Secret (never written in the profile).",
    )
    batch: Batch = Field(description="Batch arithmetic.")
    strategy: Strategy = Field("ddp", description="Parallelism strategy.")
    zero_stage: ZeroStage | None = Field(None, description="DeepSpeed ZeRO stage.")
    model: Model | None = Field(None, description="Model size, precision, sequence length.")
    checkpoint: Checkpoint = Field(description="Checkpoint location and format.")
    data: list[DataVolume] = Field(
        default_factory=lambda: [], max_length=MAX_ENTRIES, description="Data volumes to mount."
    )
    metrics: Metrics | None = Field(None, description="Who writes shared metrics (rank 0 only).")
    diagnostics: Diagnostics = Field(
        default_factory=lambda: Diagnostics(), description="Temporary diagnostic switches."
    )

    def env_strings(self) -> dict[str, str]:
        return dict(self.env)


# Where a finding about a field the profile left out points instead.
_NEAR = {"zero_stage": "strategy", "strategy": "model"}


class LoadedProfile(Record):
    """A validated profile with its source file, sha256, line map and pre-model findings.

    From parse_partial, a profile with schema errors too: `problems` are its errors (one
    InputError each), and the fields that did not parse hold a default or a placeholder;
    `invalid` names those field paths, `replaced` their top-level fields, so that the rules
    run on every field that parsed and nothing else (issue 16 item 4)."""

    profile: Profile
    path: str
    sha256: str
    lines: dict[str, int]  # no default: a NamedTuple's would be one dict for all
    findings: tuple[Finding, ...] = ()
    problems: tuple[InputError, ...] = ()
    invalid: frozenset[str] = frozenset()
    replaced: frozenset[str] = frozenset()
    # the file accelerate_config names, parsed (load_profile reads it beside the profile)
    accelerate_config: Mapping[str, Any] | None = None

    def line(self, path: str) -> int | None:
        """The line of a field, else of its nearest parent or the field written near it."""
        line = line_of(path, self.lines)
        if line is None and path in _NEAR:
            return self.line(_NEAR[path])
        return line

    def trusted(self, finding: Finding, reads: tuple[str, ...] | None) -> bool:
        """False for a finding about a field that did not parse, or from a rule that reads a
        field holding a placeholder (reads None: a rule that says nothing of what it reads)."""
        path = finding.path
        if any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in self.invalid):
            return False
        if not self.replaced:
            return True
        return reads is not None and not self.replaced.intersection(reads)


class ProfileProblems(InputError):
    """Everything wrong with one profile in one pass, sorted by line: its schema errors and
    the findings of the rules on the fields that parsed, each with its own hint. Bad input
    (exit 2) even where findings are listed too."""

    def __init__(self, errors: Sequence[RunaiSpecError], findings: Sequence[Finding] = ()) -> None:
        first = min(errors, key=lambda e: e.line or 0)
        super().__init__(first.message, file=first.file, line=first.line, field=first.field, hint=first.hint)
        self.errors = tuple(sorted(errors, key=lambda e: e.line or 0))
        self.findings = tuple(sorted(findings, key=lambda f: f.line or 0))

    def lines(self) -> list[str]:
        items: list[tuple[int, list[str]]] = [(e.line or 0, e.lines()) for e in self.errors]
        items += [(f.line or 0, f.lines()) for f in self.findings]
        return [line for _, block in sorted(items, key=lambda item: item[0]) for line in block]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def field_names(loc: tuple[Any, ...]) -> list[str]:
    """The field names a profile may write in the mapping at loc (`("checkpoint",)`: dir, pvc,
    ...), as written (aliases); [] where loc is not a model (env, a list)."""
    model: type[BaseModel] = Profile
    parts = [p for p in loc if not isinstance(p, int)]
    index = 0
    while index < len(parts):
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        info = fields.get(str(parts[index]))
        sub = _submodel(info.annotation) if info is not None else None
        if info is None or sub is None:
            return []
        model = sub
        index += 2 if get_origin(info.annotation) is dict else 1  # skip the variable name
    return [f.alias or n for n, f in model.model_fields.items()]


def _meant(loc: tuple[Any, ...]) -> str | None:
    """The field an unknown key at loc was probably meant to be (`grad_acum`: grad_accum)."""
    key = str(loc[-1]) if loc else ""
    names = field_names(loc[:-1])
    close = [key.lower()] if key.lower() in names else difflib.get_close_matches(key, names, n=1)
    return close[0] if close else None


def _explained(error: Any) -> tuple[str, str, str | None]:
    """(field path, message, hint) of one pydantic error, in the profile's words."""
    loc = tuple(p for p in error["loc"] if not str(p).startswith("function-"))
    path = field_path(loc)
    msg, hint, value = error["msg"].removeprefix("Value error, "), None, error.get("input")
    kind = error["type"]
    if kind == "extra_forbidden":
        close = _meant(loc)
        msg = "unknown field"
        hint = (
            f"did you mean {close!r}? (`runai-spec schema` lists every field)"
            if close
            else "see `runai-spec schema` for the fields a profile may set"
        )
    elif kind == "missing":
        msg, hint = "required field is missing", "see examples/ for a complete profile"
    elif kind == "string_pattern_mismatch" and path in ("name", "project", "preset"):
        pattern = DNS1035_PATTERN if path == "name" else DNS1123_PATTERN
        if path == "name":
            msg = "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
        else:
            msg = "must be a DNS-1123 label: lowercase letters, digits and '-'"
        suggestion = dns_suggestion(value, pattern)
        hint = f"use {suggestion!r}" if suggestion else None
    elif kind == "string_pattern_mismatch" and (error.get("ctx") or {}).get("pattern") in (
        DNS1123_PATTERN,
        DNS1035_PATTERN,
    ):
        msg = f"{value!r} is not a Kubernetes name: lowercase letters, digits and '-'"
        suggestion = dns_suggestion(value, error["ctx"]["pattern"])
        hint = (
            f"use {suggestion!r}"
            if suggestion
            else "name the object as it is in the cluster (`kubectl get pvc,secret`)"
        )
    elif kind == "bool_type":
        msg = "must be true or false"
        hint = (
            f"write true or false; {value!r} is not a boolean here (YAML 1.1's yes/no/on/off "
            "are not accepted)"
            if isinstance(value, str) and value in YAML11_BOOLS
            else "write true or false"
        )
    elif kind == COUNT_TEXT:
        hint = count_hint(value) or (
            "write a plain number, e.g. 4 (digits only: no quotes, leading zeros, `+`, `_` or spaces)"
        )
    return path, msg, hint or fallback_hint(kind, path)


def _validation_errors(
    exc: ValidationError, source: str, lines: dict[str, int] | None = None
) -> list[InputError]:
    """Every problem pydantic found, one InputError each (a profile with five mistakes
    shows five), each with its own hint."""
    return [
        InputError(msg, file=source, line=line_of(path, lines or {}), field=path or None, hint=hint)
        for path, msg, hint in map(_explained, exc.errors())
    ]


# What a required field that did not parse holds while the rules look at the rest: valid,
# and never the subject of a finding that is kept (`trusted` leaves out their rules).
_PLACEHOLDER: dict[str, Any] = {
    "name": "placeholder",
    "project": "placeholder",
    "preset": "placeholder",
    "image": "registry.invalid/placeholder@sha256:" + "0" * 64,
    "command": ["placeholder.py"],
    "batch": {"local": 1, "global": 1},
    "checkpoint": {"dir": "/placeholder/checkpoints", "pvc": "placeholder"},
}


# What an item of a list that did not parse holds meanwhile: valid, on a path of its own.
_ITEM_PLACEHOLDER: dict[str, Any] = {
    "data": lambda i: {"path": f"/placeholder/data-{i}", "pvc": "placeholder"},
}


def _repair_item(items: list[Any], top: str, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Item loc[1] of items made valid where loc points: the one field that did not parse back
    to its default (the placeholder's value where it has no default), else the whole item the
    placeholder; the path of what was replaced."""
    index = loc[1]
    placeholder = _ITEM_PLACEHOLDER[top](index)
    item = items[index]
    if len(loc) >= 3 and isinstance(loc[2], str) and isinstance(item, dict) and loc[2] in item:
        if loc[2] in placeholder:
            item[loc[2]] = placeholder[loc[2]]
        else:
            item.pop(loc[2])
        return loc[:3]
    items[index] = placeholder
    return loc[:2]


def _loc(error: Any) -> tuple[Any, ...]:
    return tuple(p for p in error["loc"] if not str(p).startswith("function-"))


def _repair(data: dict[str, Any], exc: ValidationError) -> tuple[Profile, set[str], set[str]] | None:
    """A valid Profile from data: unknown keys dropped, each variable that did not parse
    dropped, any other field that did not parse back to its default or a placeholder."""
    data = copy.deepcopy(data)
    invalid: set[str] = set()
    replaced: set[str] = set()
    for _ in range(4):
        for error in exc.errors():
            loc = _loc(error)
            if not loc:
                return None
            top = str(loc[0])
            if error["type"] == "extra_forbidden":
                parent: Any = data
                try:  # (its parent may be replaced already, by an earlier error)
                    for part in loc[:-1]:
                        parent = parent[part]
                except (KeyError, IndexError, TypeError):
                    continue
                if isinstance(parent, dict):
                    value = parent.pop(loc[-1], None)
                    meant = _meant(loc)
                    # a typo's value is checked as the field the hint names (`grad_acum: 8` as
                    # grad_accum), so no finding assumes the default the typo left in place
                    if meant is not None and meant not in parent and meant != loc[-1]:
                        parent[meant] = value
                        invalid.add(field_path((*loc[:-1], meant)))
                continue
            if top in FREE_KEYS and len(loc) >= 2 and isinstance(data.get(top), dict):
                data[top].pop(loc[1], None)
                invalid.add(field_path(loc[:2]))
                continue
            if (
                top in _ITEM_PLACEHOLDER
                and len(loc) >= 2
                and isinstance(loc[1], int)
                and isinstance(data.get(top), list)
                and loc[1] < len(data[top])
            ):
                # one bad item of a list stands in for itself only: the other items, and the
                # rules that read the list, are still checked (issue 26 item 2); one bad field
                # of an item stands in for that field only, so the item's other fields are
                # checked too (issue 40 item 6)
                invalid.add(field_path(_repair_item(data[top], top, loc)))
                continue
            invalid.add(top)
            replaced.add(top)
            if top in _PLACEHOLDER:
                data[top] = copy.deepcopy(_PLACEHOLDER[top])
            else:
                data.pop(top, None)
        try:
            return Profile.model_validate(data), invalid, replaced
        except ValidationError as again:
            exc = again
    return None


def parse_partial(text: str, source: str) -> LoadedProfile:
    """Profile text -> LoadedProfile, with its schema errors as `problems` (the fields that
    did not parse replaced) rather than raised; YAML that does not load is still raised."""
    raw, lines = load_mapping_lines(text, source, literal=True)
    kept, findings = reserved_findings(raw, source, lines)
    digest = canonical_sha256(raw)
    try:
        profile = Profile.model_validate(kept)
    except ValidationError as exc:
        errors = _validation_errors(exc, source, lines)
        repaired = _repair(kept, exc)
        if repaired is None:
            raise ProfileProblems(errors, findings) from None
        profile, invalid, replaced = repaired
        return LoadedProfile(
            profile,
            source,
            digest,
            lines,
            tuple(findings),
            tuple(errors),
            frozenset(invalid),
            frozenset(replaced),
        )
    return LoadedProfile(profile, source, digest, lines, tuple(findings))


def parse_profile(text: str, source: str) -> LoadedProfile:
    """Validate profile text; reserved fields become findings, everything else must be valid
    (ProfileProblems, every schema error at once, where it is not)."""
    loaded = parse_partial(text, source)
    if loaded.problems:
        raise ProfileProblems(loaded.problems, loaded.findings)
    return loaded


def _canonical(value: Any) -> Any:
    kind = type(value)
    if kind is dict:  # (a string, the most common leaf, is itself: no call)
        return {key: child if type(child) is str else _canonical(child) for key, child in value.items()}
    if kind is list:
        return [child if type(child) is str else _canonical(child) for child in value]
    text = getattr(value, "text", None)  # a plain-scalar number: its text, marked as one
    return "\x00" + text if type(text) is str else value  # (strings hold no NUL: the loader)


# json.dumps(sort_keys=True, ensure_ascii=False, separators=(",", ":")), made once; a parsed
# profile is a tree (no cycle to look for).
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), check_circular=False)


def canonical_json(value: Any) -> str:
    """The parsed profile as sorted-key JSON with every number as the text written: what the
    profile says, not how the file is laid out (line endings, comments, quoting, key order)."""
    return _CANONICAL.encode(_canonical(value))


def canonical_sha256(raw: dict[str, Any]) -> str:
    """The `profile-sha256` annotation: sha256 of canonical_json (issue 16 item 6)."""
    return hashlib.sha256(canonical_json(raw).encode("utf-8")).hexdigest()


def load_profile(path: Path, *, partial: bool = False) -> LoadedProfile:
    """Read and validate a profile file (partial: see parse_partial), and the accelerate
    config it names, beside it."""
    loaded = (parse_partial if partial else parse_profile)(read_text(path), str(path))
    name = loaded.profile.accelerate_config
    if name is None:
        return loaded
    try:
        if ".." in name.split("/"):
            raise InputError("a path through `..` leaves the profile's folder")
        config = load_mapping_text(read_text(path.parent / name), str(path.parent / name))
    except InputError as exc:
        raise InputError(
            f"accelerate_config {name!r}: {exc.message}",
            file=str(path),
            line=loaded.line("accelerate_config"),
            field="accelerate_config",
            hint="write the path of your accelerate config relative to the profile's folder",
        ) from None
    return loaded._replace(accelerate_config=config)


def profile_schema() -> dict[str, Any]:
    """The JSON Schema of the profile, for editors."""
    schema = Profile.model_json_schema(by_alias=True)
    for sub in _subschemas(schema):
        if "patternProperties" in sub and "additionalProperties" not in sub:
            sub["additionalProperties"] = False  # a dict's key pattern: other keys are refused
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "runai-spec profile"
    return schema


def _subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every mapping in a JSON Schema (enum and default values included: harmless here)."""
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _subschemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _subschemas(value)
