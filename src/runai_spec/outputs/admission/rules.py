"""The profile-side rules of the admission policy, in CEL, built from validate's own definitions.

Each rule is what `validate` (check/, load/profile.py) refuses of one kind of profile value,
written once there and translated here: the same regular expressions, prefix lists and
name lists, never a second copy. tests/test_admission_shape.py feeds values through both and
checks that they agree.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...check.accelerate import CONFIG_ESCAPE_TAIL, CONFIG_KEY_TAIL, check_accelerate_config
from ...check.catalogue import RULES as SITE_RULES
from ...check.env import (
    OPERATOR_ENV_NAMES,
    SECRET_FLAG,
    check_nccl_debug,
    check_nccl_transport,
    check_operator_env,
    check_secret_env,
)
from ...check.identity import (
    IMAGE_REPO,
    IMAGE_TAG,
    IMAGE_TAG_ANY_LENGTH,
    IMAGE_TAG_MAX,
    check_image_digest,
    check_name_length,
    check_preset_expiry,
    check_preset_granted,
    check_registry,
    check_reserved,
    check_smoke_name,
)
from ...check.launcher import LAUNCHER_FLAG_PATTERNS, LAUNCHERS, check_launcher, check_nproc
from ...check.rules import RuleFn
from ...check.storage import (
    PATH_NAME_MAX,
    SYSTEM_PATHS,
    WORKDIR_REFUSED,
    check_checkpoint,
    check_data_sources,
    check_mount_paths,
)
from ...check.training import (
    check_deepspeed_autotune,
    check_global_batch,
    check_preemptible_resume,
    check_rank0_metrics,
    check_replica_fits,
    check_sharded_state_fits,
    check_shutdown_window,
    check_sigterm_one_gpu,
    check_strategy,
)
from ...facts import torchrun
from ...facts.accelerate import ENGINEER_DEEPSPEED_KEYS, ENGINEER_KEYS, ENGINEER_PREFIXES
from ...facts.kubeflow import DNS1035_PATTERN, DNS1123_PATTERN, INJECTED_ENV, SMOKE_SUFFIX
from ...load.profile import (
    ENV_NAME,
    MAX_ARGS,
    MAX_COMMAND_TEXT,
    MAX_ENTRIES,
    MAX_NAME,
    MAX_TEXT,
    CheckpointFormat,
    ZeroStage,
)
from ...secrets import SECRET_VALUE_SHAPES

CHECKPOINT_FORMATS: tuple[str, ...] = typing.get_args(CheckpointFormat)


def _bounds(annotated: object) -> tuple[int, int]:
    """The ge and le bounds of an Annotated int of the profile model (its Field)."""
    found = {
        name: getattr(m, name)
        for info in typing.get_args(annotated)[1:]
        for m in getattr(info, "metadata", ())
        for name in ("ge", "le")
        if hasattr(m, name)
    }
    return int(found["ge"]), int(found["le"])


ZERO_STAGES = tuple(range(_bounds(ZeroStage)[0], _bounds(ZeroStage)[1] + 1))  # the profile's 0..3

SPACE = r"\s"
DOT_PART = r"(^|/)\.\.?(/|$)"
# A profile's entries in one list of a pod (env: its env and secret_env; volumes, mounts: its
# data): at most this many beside the render's own (validate's bounds, load/profile.py).
MAX_LISTED = 2 * MAX_ENTRIES
SUBDOMAIN_MAX = 253  # a PVC, Secret or key name (profile.py: max_length=253)


def lit(text: str) -> str:
    """A CEL string literal (JSON's escapes are a subset of CEL's)."""
    return json.dumps(text, ensure_ascii=False)


def text(value: str) -> str:
    """VALUE as text: CEL's string() of a scalar, `?` for a list or map (so that a comparison
    fails instead of raising an evaluation error)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):  # bound once: the path is long
        return f"[{value}].map(s, {text('s')})[0]"
    return (
        f"(type({value}) == bool ? ({value} ? 'true' : 'false') : type({value}) == string "
        f"|| type({value}) == int || type({value}) == uint || type({value}) == double "
        f"? string({value}) : '?')"
    )


def balanced(op: str, items: list[str], empty: str) -> str:
    """ITEMS joined by the binary operator OP. A parser counts a chain of `+` as one level of
    recursion per operand (cel-cpp refuses more than 32): those are joined as a balanced
    tree; a chain of `&&` or `||` is one level however long (the parsers balance it
    themselves), where each pair of parentheses would be one more."""
    if not items:
        return empty
    if len(items) == 1:
        return items[0]
    if op in ("&&", "||") or len(items) <= 3:  # `(a + b + c)`: no deeper than balanced
        return "(" + f" {op} ".join(items) + ")"
    half = len(items) // 2
    return f"({balanced(op, items[:half], empty)} {op} {balanced(op, items[half:], empty)})"


def is_string(e: str) -> str:
    return f"type({e}) == string"


def _regex(e: str, pattern: str) -> str:
    return f"{e}.matches({lit(pattern)})"


def _under(e: str, folder: str) -> list[str]:
    """E is FOLDER or lies under it (either term)."""
    return [f"{e} == {lit(folder)}", f"{e}.startsWith({lit(folder.rstrip('/') + '/')})"]


def _nested(e: str, folder: str) -> list[str]:
    """E and FOLDER are the same, or one holds the other (storage._nested; any term)."""
    return [*_under(e, folder), f"{lit(folder)}.startsWith({e} + '/')"]


# storage._PATH_CONTROL, storage._path_problem: one clean absolute path
LONG_NAME = f"[^/]{{{PATH_NAME_MAX + 1},}}"
# the characters themselves, not escapes: RE2 writes `\x{2028}`, Python's `re` `\u2028`
_CONTROL = "[\x00-\x1f\x7f-\x9f\u2028\u2029]"


def clean_path(e: str) -> str:
    # RE2 counts characters where NAME_MAX counts bytes: the policy admits a folder name of
    # 128..255 multi-byte characters that validate refuses (docs/admission.md)
    return (
        f"({is_string(e)} && {e}.startsWith('/') && !{_regex(e, _CONTROL)} && "
        f"!{e}.contains('//') && !{_regex(e, DOT_PART)} && "
        f"({e} == '/' || !{e}.endsWith('/')) && (size({e}) <= {PATH_NAME_MAX} || !{_regex(e, LONG_NAME)}))"
    )


@dataclass(frozen=True)
class Rule:
    """One kind of profile value: its CEL condition on the rendered text E (with the text
    PREFIX before and SUFFIX after the profile's own value) and what it admits, in words."""

    name: str
    what: str
    build: Callable[[str, RuleContext], str]
    whole_value: bool = False  # needs the value alone (no prefix or suffix around it)
    # validate's site rules whose refusals of this kind of value the policy enforces with it
    enforces: tuple[RuleFn, ...] = ()

    def cel(self, e: str, ctx: RuleContext, prefix: str = "", suffix: str = "") -> str:
        if (prefix or suffix) and self.whole_value:
            raise ValueError(f"rule {self.name} cannot be checked inside a longer text")
        if not (prefix or suffix):
            return self.build(e, ctx)
        framing = (
            f"{is_string(e)} && {e}.startsWith({lit(prefix)}) && {e}.endsWith({lit(suffix)})"
            f" && size({e}) >= {len(prefix) + len(suffix)}"
        )
        return f"({framing} && {self.build(e, ctx.framed(prefix, suffix))})"


@dataclass(frozen=True)
class RuleContext:
    """What a rule needs from the site and the preset's render."""

    registries: tuple[str, ...]
    name_max: int  # the longest workload name whose pod names stay DNS labels
    reserved_mounts: tuple[str, ...]  # the preset's and runai-spec's own mount paths
    allow_module: bool
    prefix: str = ""
    suffix: str = ""

    def framed(self, prefix: str, suffix: str) -> RuleContext:
        return RuleContext(
            self.registries, self.name_max, self.reserved_mounts, self.allow_module, prefix, suffix
        )

    def pattern(self, inner: str) -> str:
        """INNER (a pattern for the value alone) with the frame around it, anchored."""
        return "^" + re.escape(self.prefix) + "(" + inner.strip("^$") + ")" + re.escape(self.suffix) + "$"


def _name(e: str, c: RuleContext) -> str:
    # identity.check_name_length (name_room) and check_smoke_name (no `-smoke` suffix)
    return (
        f"({_regex(e, c.pattern(DNS1035_PATTERN))} && "
        f"size({e}) <= {c.name_max + len(c.prefix) + len(c.suffix)} && "
        f"!{e}.endsWith({lit(SMOKE_SUFFIX + c.suffix)}))"
    )


def _project(e: str, c: RuleContext) -> str:
    return f"({e} == {lit(c.prefix)} + variables.project + {lit(c.suffix)})"


def image_pattern(registries: Sequence[str], tag: str = IMAGE_TAG) -> str:
    """identity.IMAGE with the digest required and the registry one of the site's (TAG: the
    tag's pattern)."""
    names = "|".join(re.escape(r) for r in registries)
    return f"^({names})/{IMAGE_REPO}({tag})?@sha256:[0-9a-f]{{64}}$"


DIGESTED = len("@sha256:") + 64
# The shortest image whose tag is longer than identity.IMAGE_TAG allows: `r/x:` and the tag.
LONG_TAGGED = len("r/x:") + IMAGE_TAG_MAX + DIGESTED


def _image(e: str, c: RuleContext) -> str:
    # the tag's bound is a counted repetition, slow to compile (cel-cpp compiles a pattern
    # at every match): read only where the text is long enough to hold a longer tag
    loose, strict = image_pattern(c.registries, IMAGE_TAG_ANY_LENGTH), image_pattern(c.registries)
    return (
        f"({is_string(e)} && {_regex(e, c.pattern(loose))} && "
        f"(size({e}) < {LONG_TAGGED} || {_regex(e, c.pattern(strict))}))"
    )


def _launcher_name(e: str) -> str:
    names = "|".join(re.escape(n) for n in sorted(LAUNCHERS))
    return _regex(e, f"(^|/)({names})$")


def _launcher_script(e: str) -> str:
    """torchrun's own module and the other launchers' scripts, named as a file in any
    spelling validate refuses (torchrun.LAUNCHER_SCRIPT: `//`, `/./`, `x/../`)."""
    return _regex(e, torchrun.LAUNCHER_SCRIPT.pattern)


def _entry_python(e: str, c: RuleContext) -> str:
    # torchrun.entry_point_kind: a `*.py` script; launcher.check_launcher: no flag, no space
    return (
        f"({is_string(e)} && {e}.endsWith('.py') && !{e}.startsWith('-') && "
        f"!{_regex(e, SPACE)} && !{_launcher_name(e)} && !{_launcher_script(e)})"
    )


def _script(e: str) -> str:
    suffixes = "|".join(re.escape(s) for s in torchrun.SHELL_SUFFIXES)
    return f"({is_string(e)} && !{e}.startsWith('-') && !{_regex(e, SPACE)} && {_regex(e, f'({suffixes})$')})"


def _entry_executable(e: str, c: RuleContext) -> str:
    # torchrun.entry_point_kind: a wrapper script, named with a `/` (./run.sh)
    return f"({_script(e)} && {e}.contains('/'))"


def _shell(e: str, c: RuleContext) -> str:
    shells = "|".join(sorted(torchrun.SHELLS))
    return f"({is_string(e)} && {_regex(e, f'^(/[^ ]*/)?({shells})$')})"


def _module(e: str, c: RuleContext) -> str:
    modules = getattr(torchrun, "LAUNCHER_MODULES", ())
    refused = f"{e} in [{', '.join(lit(m) for m in modules)}]"
    return f"({is_string(e)} && !{e}.startsWith('-') && !{_regex(e, SPACE)} && !({refused}))"


# The API server's limit on the runtime cost of one expression (a variable is one):
# PerCallLimit, kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/apis/cel/config.go;
# the policy keeps ten times under it for any command validate accepts (issue 41 item 8).
PER_CALL_LIMIT = 1_000_000
HEADROOM = 10
# cel-go charges a match ceil((1 + len(text)) / 10) * ceil(len(pattern) / 4) units
# (interpreter/runtimecost.go; common/cost.go RegexStringLengthCostFactor): a command validate
# accepts is at most this many tenths of characters, each argument rounded up once.
COMMAND_TENTHS = (MAX_COMMAND_TEXT + 10 * MAX_ARGS) // 10 + 1
# The units per tenth that one expression's patterns may cost on each argument, less five for
# the rest of its loop (the `-` test, the bounds, the positions it filters).
ARG_UNITS = PER_CALL_LIMIT // HEADROOM // COMMAND_TENTHS - 5


def regex_units(pattern: str) -> int:
    """What PATTERN costs a match per tenth of the text's characters (cel-go)."""
    return -(-len(pattern) // 4)


@dataclass(frozen=True)
class Refusal:
    """One pattern validate refuses a text by, read where a cheap test (a literal part that
    every match holds, or a first character) lets it match: the API server charges a match by
    the pattern's length, and the tests' cel-cpp compiles a pattern at every match."""

    pattern: str
    part: str = ""  # every match holds it
    start: str = ""  # every match starts with it

    @property
    def units(self) -> int:
        """Its cost a tenth of the text's characters (contains: the part's tenths too)."""
        return regex_units(self.pattern) + (-(-len(self.part) // 10) if self.part else 0) + bool(self.start)

    def cel(self, e: str) -> str:
        gate = f"{e}.contains({lit(self.part)})" if self.part else f"{e}.startsWith({lit(self.start)})"
        return f"({gate} && {_regex(e, self.pattern)})"


def secret_value_refusals() -> list[Refusal]:
    """secrets.SECRET_VALUE, each shape by its literal part (secrets.SECRET_VALUE_SHAPES)."""
    return [Refusal(shape, part=part) for part, shape in SECRET_VALUE_SHAPES]


def no_secret_value(e: str) -> str:
    """E holds no credential-shaped part (secrets.secret_value)."""
    return f"!({' || '.join(r.cel(e) for r in secret_value_refusals())})"


def packed(refusals: Sequence[Refusal]) -> list[list[Refusal]]:
    """REFUSALS in runs of at most ARG_UNITS together, in order (first fit)."""
    runs: list[list[Refusal]] = []
    for refusal in refusals:
        if refusal.units > ARG_UNITS:
            raise ValueError(f"a pattern of {len(refusal.pattern)} characters costs more than one check may")
        if not runs or sum(r.units for r in runs[-1]) + refusal.units > ARG_UNITS:
            runs.append([])
        runs[-1].append(refusal)
    return runs


def arg_refusals() -> list[Refusal]:
    """What validate refuses an argument by: a credential-shaped part (env.check_secret_env),
    each launcher's topology flags (launcher.check_launcher; each launcher's pattern apart)
    and a credential flag, these two for a text that starts with `-`."""
    flags = [*LAUNCHER_FLAG_PATTERNS.values(), SECRET_FLAG.pattern]
    return [*secret_value_refusals(), *(Refusal(p, start="-") for p in flags)]


def arg_parts(e: str) -> list[str]:
    """The argument rule as conditions that each hold on their own, each of refusals that cost
    at most ARG_UNITS a tenth together: the policy evaluates each in a variable of its own, all
    of a command's arguments in one. The first also holds the text and its length validate
    allows (before any pattern is read)."""
    bounded = f"{is_string(e)} && size({e}) <= {MAX_TEXT}"
    parts = []
    for n, run in enumerate(packed(arg_refusals())):
        none = f"!({' || '.join(r.cel(e) for r in run)})"
        parts.append(f"({bounded} && {none})" if n == 0 else f"(!({bounded}) || {none})")
    return parts


def _arg(e: str, c: RuleContext) -> str:
    return balanced("&&", arg_parts(e), "true")


def _working_dir(e: str, c: RuleContext) -> str:
    # one chain of `||` (a parser's one level), not a chain of parenthesised ones
    refused = [t for p in (*WORKDIR_REFUSED, *c.reserved_mounts) for t in _under(e, p)]
    return f"({clean_path(e)} && !{balanced('||', refused, 'false')})"


def _mount(e: str, c: RuleContext) -> str:
    refused = [t for p in (*SYSTEM_PATHS, *c.reserved_mounts) for t in _nested(e, p)]
    return f"({clean_path(e)} && {e} != '/' && !{balanced('||', refused, 'false')})"


def reserved_env_pattern() -> str:
    """The variables `validate` refuses in `env` and `secret_env` whoever sets them, as one
    regular expression: the transport list (torchrun.TRANSPORT_ENV_*), the diagnostics
    switch (only through `diagnostics`), what the operator and torchrun inject
    (kubeflow.INJECTED_ENV) and every variable the modelled operators set."""
    injected = INJECTED_ENV.pattern.strip("^$")
    names = sorted(
        {*torchrun.TRANSPORT_ENV_NAMES, *torchrun.NCCL_DIAGNOSTICS, *OPERATOR_ENV_NAMES}
        - {n for n in OPERATOR_ENV_NAMES if INJECTED_ENV.match(n)}
    )
    prefixes = "|".join(re.escape(p) for p in torchrun.TRANSPORT_ENV_PREFIXES)
    return f"^(({prefixes}).*|{'|'.join(re.escape(n) for n in names)}|{injected})$"


def env_name_reserved(e: str) -> str:
    return _regex(e, reserved_env_pattern())


def _env_name(e: str, c: RuleContext) -> str:
    return f"({is_string(e)} && size({e}) <= {MAX_NAME} && {_regex(e, ENV_NAME)} && !{env_name_reserved(e)})"


def _env_value(e: str, c: RuleContext) -> str:
    return f"({is_string(e)} && size({e}) <= {MAX_TEXT} && {no_secret_value(e)})"


def _subdomain(pattern: str) -> Callable[[str, RuleContext], str]:
    def build(e: str, c: RuleContext) -> str:
        return f"({is_string(e)} && {_regex(e, c.pattern(pattern))} && size({e}) <= {SUBDOMAIN_MAX})"

    return build


def _boolean(e: str, c: RuleContext) -> str:
    return f"type({e}) == bool"


def _any_text(e: str, c: RuleContext) -> str:
    return is_string(e)


def _digest(e: str, c: RuleContext) -> str:
    return f"({is_string(e)} && {_regex(e, c.pattern('[0-9a-f]{64}'))})"


def container_relations(c: str) -> list[tuple[str, str]]:
    """(condition, what) between values of one container that validate's mount-path rule
    relates: no mount is the working directory or holds it; no two mounts are equal or
    nested (storage.check_mount_paths)."""
    mounts = f"{c}.volumeMounts"
    # ternaries guard every selection (an implementation may not absorb an error in a macro)
    held = (
        f"has({c}.workingDir) && has({mounts}) ? {mounts}.all(m, has(m.mountPath) ? "
        f"!({c}.workingDir == m.mountPath || {c}.workingDir.startsWith(m.mountPath + '/')) "
        ": true) : true"
    )
    nested = (
        f"has({mounts}) ? {mounts}.all(m, {mounts}.all(n, has(m.mountPath) && "
        "has(n.mountPath) && has(m.name) && has(n.name) ? (m.name == n.name || "
        "!(m.mountPath == n.mountPath || m.mountPath.startsWith(n.mountPath + '/') || "
        "n.mountPath.startsWith(m.mountPath + '/'))) : true)) : true"
    )
    return [
        (held, "no volume may be mounted at the working directory or above it"),
        (nested, "no two volumes may be mounted at the same or nested paths"),
    ]


def _count(e: str, c: RuleContext) -> str:
    return f"({is_string(e)} && {_regex(e, c.pattern('[1-9][0-9]{0,17}'))})"


def _checkpoint_format(e: str, c: RuleContext) -> str:
    formats = ", ".join(lit(f) for f in CHECKPOINT_FORMATS)
    return f"({e} in [{formats}])"


def _zero_stage(e: str, c: RuleContext) -> str:
    stages = "|".join(str(n) for n in ZERO_STAGES)
    return f"({is_string(e)} && {_regex(e, c.pattern(f'({stages})'))})"


def _accelerate_config(e: str, c: RuleContext) -> str:
    """The researcher's part of the rendered accelerate config (facts.accelerate.config_text:
    `{` + it + the engineers' part, pinned as the frame): no engineers' key
    (check.accelerate.CONFIG_KEY_TAIL, from validate's names), none spelled by an escape. Its first
    key follows the frame's `{`, so the frame must end with one."""
    if not c.prefix.endswith("{"):
        raise ValueError("the accelerate config's researcher part must follow its opening brace")
    key = c.pattern("(?s:(.*[{,])?" + CONFIG_KEY_TAIL + ".*)")
    escape = c.pattern(r"(?s:(.*[^\\])?" + CONFIG_ESCAPE_TAIL + ".*)")
    return f"({is_string(e)} && !{_regex(e, key)} && !{_regex(e, escape)})"


_ENTRY = (check_launcher,)  # the entry point and its arguments: launcher.check_launcher
_ENV_NAME = (check_nccl_transport, check_operator_env)
RULES = {
    r.name: r
    for r in (
        Rule(
            "name",
            "a DNS-1035 label short enough for the pod names",
            _name,
            enforces=(check_name_length, check_smoke_name),
        ),
        Rule("project", "the project of the namespace", _project),
        Rule(
            "image",
            "an image of an allowed registry, pinned by digest",
            _image,
            enforces=(check_image_digest, check_registry),
        ),
        Rule("entry-python", "a Python script (*.py), not a launcher", _entry_python, True, _ENTRY),
        Rule("entry-executable", "a wrapper script (./*.sh)", _entry_executable, True, _ENTRY),
        Rule("shell", "a shell (bash, sh)", _shell, True, _ENTRY),
        Rule("script", "a shell script (*.sh)", lambda e, c: _script(e), True, _ENTRY),
        Rule("module", "a module that is not a launcher", _module, True, _ENTRY),
        Rule(
            "arg",
            f"an argument of at most {MAX_TEXT} characters that is no launcher flag and no credential",
            _arg,
            True,
            (check_launcher, check_secret_env),
        ),
        Rule(
            "working-dir",
            "a clean absolute path outside the system's and the preset's folders",
            _working_dir,
            True,
            (check_mount_paths,),
        ),
        Rule(
            "mount",
            "a clean absolute path, no system path, not overlapping the preset's mounts",
            _mount,
            True,
            (check_mount_paths,),
        ),
        Rule(
            "env-name",
            f"a variable name of at most {MAX_NAME} characters, not reserved",
            _env_name,
            True,
            _ENV_NAME,
        ),
        Rule(
            "env-value",
            f"a plain value of at most {MAX_TEXT} characters (credentials come from a Secret)",
            _env_value,
            True,
            (check_secret_env,),
        ),
        Rule("claim", "a claim name (DNS-1123)", _subdomain(DNS1123_PATTERN)),
        Rule("secret", "a Secret name (DNS-1123)", _subdomain(DNS1123_PATTERN)),
        Rule("secret-key", "a key of the Secret", _subdomain(r"^[-._a-zA-Z0-9]+$")),
        Rule("bool", "true or false", _boolean, True),
        Rule("text", "any text", _any_text, True),
        Rule("digest", "a sha256 (64 hex digits)", _digest),
        Rule("count", "a positive whole number", _count),
        Rule("checkpoint-format", "a checkpoint format", _checkpoint_format, True),
        Rule("zero-stage", "a DeepSpeed ZeRO stage (the profile's zero_stage)", _zero_stage),
        Rule(
            "accelerate-config",
            "an accelerate config with training keys only, none of the engineers' ("
            + ", ".join((*ENGINEER_KEYS, *ENGINEER_DEEPSPEED_KEYS, *(f"{p}*" for p in ENGINEER_PREFIXES)))
            + ")",
            _accelerate_config,
            # its engineers' keys; the config's contradictions of the profile (model.precision,
            # the strategy, the batch) and a config on one GPU (never rendered) are validate's:
            # the render does not carry them
            enforces=(check_accelerate_config,),
        ),
    )
}

# validate's site rules that no profile-side rule above enforces, and why the policy leaves
# them to validate (or to the gate). A site rule in neither list fails
# tests/outputs/admission/test_rule_coverage.py: a new rule is placed, never skipped.
LEFT_TO_VALIDATE: dict[RuleFn, str] = {
    # the diagnostics switch renders NCCL_DEBUG=INFO, so the policy admits the variable (a job
    # that sets it in `env` carries no NCCL_DEBUG_FILE: the policy does not pair the two)
    check_nccl_debug: "NCCL_DEBUG=INFO is a value the diagnostics switch renders too",
    check_reserved: "a reserved field is dropped with its finding; the render has the preset's value",
    check_global_batch: "batch arithmetic: the global batch is not in the render",
    check_strategy: "torchrun's render does not carry the strategy (accelerate's does: each "
    "strategy the preset allows is a family of checks of its own, its ZeRO stage checked)",
    check_checkpoint: "where checkpoints go is a claim name the cluster resolves (the live checks)",
    check_data_sources: "which claims and data sources the site approved: a claim name is all the render has",
    check_nproc: "the processes per pod are the preset's, pinned by the shape",
    check_preemptible_resume: "the resume setting is not in the render",
    check_sigterm_one_gpu: "the script's SIGTERM handling is not in the render (a warning)",
    check_shutdown_window: "the torch version is not in the render (a warning)",
    check_rank0_metrics: "who writes metrics is not in the render",
    check_replica_fits: "the model's size is not in the render",
    check_sharded_state_fits: "the model's size is not in the render",
    check_deepspeed_autotune: "an autotuning sweep is a script argument of any other spelling too",
    check_preset_expiry: "a warning: it refuses nothing",
    check_preset_granted: "the gate denies a project the preset is not granted (the grants parameter)",
}


def enforced_rule_ids() -> frozenset[str]:
    """The ids of validate's site rules the profile-side rules enforce: a profile value one of
    them refuses renders into a job the policy denies."""
    by_check = {entry.check: entry.id for entry in SITE_RULES.values()}
    return frozenset(by_check[check] for rule in RULES.values() for check in rule.enforces)
