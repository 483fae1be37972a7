"""The policy's checks: each approved preset's gate (from its shape), the variables and the rules."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...facts.kubeflow import PRESET_ANNOTATION, SMOKE_LABEL
from ...load.profile import MAX_ARGS
from ...load.registry import PresetRegistry
from ...load.site import Site
from ...plan.launcher import PROFILE_LAUNCHERS
from .cel import ARG_INDEXES, CHUNK_LIMIT, PIN_SHOWN, PIN_VALUE
from .fields import replica_keys, roles_variable
from .preset import preset_shape
from .problems import preset_problems
from .role_lists import ROLE_LIST, ROLE_LIST_DEFAULT
from .rules import RuleContext, balanced, lit
from .shape import LauncherRefused


@dataclass(frozen=True)
class Validation:
    """One CEL rule of the policy, with the message a denial reads as."""

    name: str
    expression: str
    message: str
    message_expression: str

    def document(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "message": self.message,
            "messageExpression": self.message_expression,
            "reason": "Forbidden",
        }


def param(field: str) -> str:
    return f"params.data[variables.key + {lit(field)}]"


def listed(field: str, item: str) -> str:
    """ITEM (a CEL string) is an item of the comma-separated parameter FIELD, compared as
    text, never as a pattern (core CEL has no split; a name with a comma is no item)."""
    # the list is the receiver of every call (cel-python loses a concatenation's string type)
    p = param(field)
    return (
        f"(!{item}.contains(',') && ({p} == {item} || {p}.startsWith({item} + ',') || "
        f"{p}.endsWith(',' + {item}) || {p}.contains(',' + {item} + ',')))"
    )


# -- the shapes ----------------------------------------------------------------------------
FAMILY = "\0F\0"  # the prefix of a gate's variables, bound to its family's
_PLACEHOLDER = re.compile("\0P([0-9]+)\0|" + r"\\u0000M([0-9]+)\\u0000")
assert PIN_VALUE.format(0) == "\0P0\0" and lit(PIN_SHOWN.format(0)) == '"\\u0000M0\\u0000"'


def pin_key(values: Mapping[str, str]) -> str:
    """The parameter (after `<preset>.`) of a pinned value whose VALUES (preset -> value) differ
    within a family: named by them, so that the job and its smoke test, and the families of
    a preset's launchers, read one parameter where they pin the same values (and share the
    checks that read it)."""
    text = json.dumps(sorted(values.items()))
    return "pin-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class PresetGate:
    """One approved preset's checks (job and smoke test), their pinned values written as
    placeholders (cel.PIN_VALUE) and the values themselves."""

    name: str
    launcher: str  # the profile's `launcher` the renders were made with
    job: tuple[str, ...]  # CEL lists of lists of messages: the job's problems
    smoke: tuple[str, ...]  # the same for its smoke test
    anchors: tuple[tuple[str, str], ...] = ()  # variables (name, expression) they read
    pins: tuple[str, ...] = ()  # the pinned values, by placeholder
    kind: str = ""  # the job's kind (PyTorchJob, MPIJob): its checks are the closest for that kind

    def texts(self) -> list[str]:
        return [self.launcher, *self.job, "--smoke--", *self.smoke, *(f"{n}={x}" for n, x in self.anchors)]

    @property
    def checks(self) -> str:
        """The digest of the checks without their pinned values: presets whose checks are
        equal but for pinned values share them (a family)."""
        return hashlib.sha256("\n".join(self.texts()).encode("utf-8")).hexdigest()


def bind(text: str, gate: PresetGate, keys: Mapping[int, str], family: str) -> str:
    """TEXT of GATE with its placeholders bound: a pinned value that differs within its family
    (KEYS: its index -> its parameter) is read from the preset's parameters, any other is the
    literal; the variables' prefix FAMILY."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            n = int(m.group(1))
            return param(keys[n]) if n in keys else lit(gate.pins[n])
        n = int(m.group(2))
        if n in keys:  # inside the message's string literal
            return "'\" + " + param(keys[n]) + " + \"'"
        return lit(repr(gate.pins[n]))[1:-1]

    return _PLACEHOLDER.sub(one, text).replace(FAMILY, family)


@dataclass(frozen=True)
class Family:
    """The presets whose checks are equal but for pinned values: the checks are written once
    (variables prefixed ID), each value that differs between them is a parameter."""

    id: str
    gates: tuple[PresetGate, ...]

    @property
    def varying(self) -> frozenset[int]:
        pins = [g.pins for g in self.gates]
        return frozenset(n for n in range(len(pins[0])) if len({p[n] for p in pins}) > 1)

    @property
    def keys(self) -> dict[int, str]:
        """The parameter of each pinned value that differs within the family."""
        return {n: pin_key({g.name: g.pins[n] for g in self.gates}) for n in sorted(self.varying)}

    def bound(self, texts: Sequence[str]) -> list[str]:
        return [bind(t, self.gates[0], self.keys, self.id) for t in texts]

    def digest(self, gate: PresetGate) -> str:
        """What the policy enforces for GATE: its checks with every value bound, and which of
        them the parameters give (a policy and parameters of two generations differ here)."""
        concrete = [bind(t, gate, {}, "") for t in gate.texts()]
        read = [f"{n}={key}" for n, key in self.keys.items()]
        text = "\n".join([gate.name, *concrete, "--parameters--", *read])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def params(self, gate: PresetGate) -> dict[str, str]:
        """GATE's pinned values that differ within the family: `pin-<digest>` -> value."""
        return {key: gate.pins[n] for n, key in self.keys.items()}


def families(gates: Sequence[PresetGate]) -> list[Family]:
    """GATES grouped by their checks, in the order of their first preset. A family reads one
    value per preset for each pinned value that differs within it, so two gates of one preset
    with equal checks (accelerate's strategies: `--multi_gpu` or `--use_fsdp` in one place)
    are in two families: a preset's N-th gate of those checks in the N-th."""
    groups: dict[tuple[str, int], list[PresetGate]] = {}
    seen: dict[tuple[str, str], int] = {}
    for gate in gates:
        n = seen[gate.checks, gate.name] = seen.get((gate.checks, gate.name), -1) + 1
        groups.setdefault((gate.checks, n), []).append(gate)
    return [Family(f"f{i}", tuple(members)) for i, members in enumerate(groups.values())]


def preset_gates(registry: PresetRegistry, name: str) -> list[PresetGate]:
    """Preset NAME's checks, derived from its renders: one gate for each launcher a profile
    may choose with it (validate's verdict on the probe profile decides which; the first is
    the profile's default) and each strategy the preset allows (its first first), but one
    where they render alike (torchrun's renders do not carry the strategy; one GPU: python)."""
    out: list[PresetGate] = []
    for launcher in PROFILE_LAUNCHERS:
        for strategy in registry.get(name).preset.strategies:
            try:
                gate = preset_gate(registry, name, launcher, strategy)
            except LauncherRefused:
                if launcher == PROFILE_LAUNCHERS[0]:
                    raise
                break
            if not any((g.texts()[1:], g.pins) == (gate.texts()[1:], gate.pins) for g in out):
                out.append(gate)
    return out


def preset_gate(
    registry: PresetRegistry, name: str, launcher: str = PROFILE_LAUNCHERS[0], strategy: str | None = None
) -> PresetGate:
    """Preset NAME's checks for jobs of LAUNCHER and STRATEGY (else the preset's first),
    derived from its renders."""
    site = registry.site()
    shape = preset_shape(registry, name, launcher, strategy)
    ctx = RuleContext(
        tuple(site.registries), shape.name_max, shape.reserved_mounts, site.allow_module_entrypoint
    )
    pins: list[str] = []
    job, job_anchors = preset_problems(shape, ctx, smoke=False, prefix=f"{FAMILY}job", pins=pins)
    smoke, smoke_anchors = preset_problems(shape, ctx, smoke=True, prefix=f"{FAMILY}smoke", pins=pins)
    anchors = tuple(job_anchors + smoke_anchors)
    return PresetGate(name, launcher, tuple(job), tuple(smoke), anchors, tuple(pins), shape.kind)


def pack(pieces: list[str]) -> list[str]:
    """PIECES (list expressions) as lists of them of at most CHUNK_LIMIT characters: a list
    literal of lists adds one level for a parser, where a chain of `+` adds one per operand."""
    chunks: list[list[str]] = [[]]
    for piece in pieces:
        if chunks[-1] and sum(len(p) + 2 for p in chunks[-1]) + len(piece) > CHUNK_LIMIT:
            chunks.append([])
        chunks[-1].append(piece)
    return [f"[{', '.join(c)}]" for c in chunks if c]


KINDS = ("job", "smoke")


def _users(users: Sequence[tuple[str, str]]) -> str:
    """The condition that the job is one of USERS (family id, job or smoke): the families'
    checks are evaluated only for a job of their presets, and of their kind."""
    kinds: dict[str, set[str]] = {}
    for fid, kind in users:
        kinds.setdefault(fid, set()).add(kind)
    terms = []
    for fid, own in kinds.items():
        mine = f"{lit(fid)} in variables.mine"
        if own == set(KINDS):
            terms.append(mine)
        else:
            terms.append(f"({mine} && {'' if 'smoke' in own else '!'}variables.smoke)")
    return balanced("||", terms, "false")


_VARIABLE = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


def _shape_variables(fams: Sequence[Family]) -> list[tuple[str, str]]:
    """The families' checks, each piece written once however many families and kinds (job,
    smoke test) have it, in variables of pieces with the same users (each below the CEL
    parser's size limit; a list of lists of messages), evaluated only for a job of one of
    those users; the derived values they read (`a<n>`), each written once too; one variable
    per family, `[problems]` for a job of its presets and `[]` for any other; and `problems`:
    none where one of the preset's launcher families finds none, else those of the family
    closest to the job (fewest pieces with problems; the default launcher's first).

    Variables are evaluated lazily and at most once per evaluation (the API server's
    lazily evaluated, cached composition variables: k8s.io/apiserver
    pkg/admission/plugin/cel/composition.go), so a piece shared by two families of a preset
    costs once."""
    anchors: dict[str, str] = {}  # expression -> its shared name
    anchor_users: dict[str, list[str]] = {}  # shared name -> families
    defaults: dict[str, str] = {}  # shared name -> its value where it is not evaluated
    users: dict[str, list[tuple[str, str]]] = {}  # piece -> (family, kind), first use first
    for fam in fams:
        renamed: dict[str, str] = {}

        def rename(text: str, renamed: dict[str, str] = renamed) -> str:
            return _VARIABLE.sub(lambda m: f"variables.{renamed.get(m.group(1), m.group(1))}", text)

        for n, x in fam.gates[0].anchors:
            name, expression = fam.bound([n, x])
            # an anchor may read the ones before it (a role's arguments, their parts)
            renamed[name] = anchors.setdefault(rename(expression), f"a{len(anchors)}")
            defaults[renamed[name]] = ROLE_LIST_DEFAULT if ROLE_LIST.search(n) else "''"
            anchor_users.setdefault(renamed[name], []).append(fam.id)

        for kind in KINDS:
            gate = fam.gates[0]
            for piece in fam.bound(gate.job if kind == "job" else gate.smoke):
                users.setdefault(rename(piece), []).append((fam.id, kind))
    items = [
        (
            name,
            f"{_users([(f, k) for f in dict.fromkeys(anchor_users[name]) for k in KINDS])} "
            f"? ({expression}) : {defaults[name]}",
        )
        for expression, name in anchors.items()
    ]
    shared: dict[tuple[tuple[str, str], ...], list[str]] = {}  # users -> their pieces
    for piece, who in users.items():
        shared.setdefault(tuple(dict.fromkeys(who)), []).append(piece)
    read: dict[str, list[str]] = {fam.id: [] for fam in fams}  # family -> its variables
    for readers, pieces in shared.items():
        for chunk in pack(pieces):
            name = f"s{len(items) - len(anchors)}"
            items.append((name, f"{_users(readers)} ? {chunk} : []"))
            for fid in dict.fromkeys(f for f, _ in readers):
                read[fid].append(name)
    for fam in fams:
        mine = f"{lit(fam.id)} in variables.mine"
        every = balanced("+", [f"variables.{name}" for name in read[fam.id]], "[]")
        kept = f"({every}).map(l, l.filter(m, m != '')).filter(l, size(l) > 0)"
        items.append((fam.id, f"{mine} ? [{kept}] : []"))
    candidates = balanced("+", [f"variables.{fam.id}" for fam in fams], "[]")
    kinds = sorted({fam.gates[0].kind for fam in fams})
    if len(kinds) > 1:  # a job's closest checks are those of its own kind, where the preset has any
        same = "[]"
        for kind in kinds:
            own = balanced("+", [f"variables.{fam.id}" for fam in fams if fam.gates[0].kind == kind], "[]")
            same = f"has(object.kind) && object.kind == {lit(kind)} ? {own} : {same}"
        candidates = f"[{same}].map(s, size(s) > 0 ? s : {candidates})[0]"
    closest = (
        "size(c) == 0 ? [[" + lit("the policy has no checks for this preset") + "]] : "
        "c.exists(p, size(p) == 0) ? [] : "
        "(c.filter(p, size(p) == 1) + c.filter(p, size(p) == 2) + c)[0]"
    )
    items.append(("problems", f"!variables.current ? [] : [{candidates}].map(c, {closest})[0]"))
    return items


def _table(entries: dict[str, str]) -> str:
    return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in entries.items()) + "}"


def _lists(fams: Sequence[Family]) -> str:
    """{preset: [its families' ids]}, a preset's default launcher's first."""
    out: dict[str, list[str]] = {}
    for gate, fam in sorted(members(fams), key=lambda m: PROFILE_LAUNCHERS.index(m[0].launcher)):
        out.setdefault(gate.name, []).append(fam.id)
    return "{" + ", ".join(f"{lit(k)}: [{', '.join(map(lit, v))}]" for k, v in sorted(out.items())) + "}"


def members(fams: Sequence[Family]) -> list[tuple[PresetGate, Family]]:
    return [(g, fam) for fam in fams for g in fam.gates]


def preset_digests(fams: Sequence[Family]) -> dict[str, str]:
    """Each preset's digest of what the policy enforces for it: its launchers' checks."""
    parts: dict[str, list[str]] = {}
    for gate, fam in members(fams):
        parts.setdefault(gate.name, []).append(f"{gate.launcher}={fam.digest(gate)}")
    return {
        name: hashlib.sha256("\n".join(sorted(p)).encode("utf-8")).hexdigest()
        for name, p in sorted(parts.items())
    }


def variables(site: Site, fams: Sequence[Family]) -> list[dict[str, str]]:
    queue = lit(site.queue_label)
    nslabels = "namespaceObject.metadata.labels"
    items = [
        ("project", f"has({nslabels}) && {queue} in {nslabels} ? {nslabels}[{queue}] : ''"),
        ("labels", "has(object.metadata.labels) ? object.metadata.labels : {}"),
        ("annotations", "has(object.metadata.annotations) ? object.metadata.annotations : {}"),
        (
            "preset",
            f"{lit(PRESET_ANNOTATION)} in variables.annotations "
            f"? variables.annotations[{lit(PRESET_ANNOTATION)}] : ''",
        ),
        ("key", "variables.preset + '.'"),
        ("known", "variables.preset != '' && (variables.key + 'sha256') in params.data"),
        # the presets this policy has checks for: their family and what it enforces for them
        ("families", _lists(fams)),
        ("digests", _table(preset_digests(fams))),
        ("mine", "variables.preset in variables.families ? variables.families[variables.preset] : []"),
        (
            "current",
            "variables.known && variables.preset in variables.digests && "
            "(variables.key + 'shape-sha256') in params.data && "
            "params.data[variables.key + 'shape-sha256'] == variables.digests[variables.preset]",
        ),
        (
            "smoke",
            f"{lit(SMOKE_LABEL)} in variables.labels && variables.labels[{lit(SMOKE_LABEL)}] == 'true'",
        ),
        *(
            (
                roles_variable(k),
                f"has(object.spec) && has(object.spec.{k}) ? object.spec.{k}.filter(r, true) : []",
            )
            for k in replica_keys()
        ),
        ("argIndexes", "[" + ", ".join(str(i) for i in range(MAX_ARGS + 32)) + "]"),
        *_shape_variables(fams),
    ]
    assert ARG_INDEXES == "variables.argIndexes"
    return [{"name": name, "expression": expression} for name, expression in items]


def validations() -> list[Validation]:
    """The policy's rules: an approved preset, granted to the namespace's project, and the
    exact shape of that preset's render."""
    rules: list[Validation] = []

    def add(name: str, expression: str, message: str, message_expression: str) -> None:
        rules.append(Validation(name, expression, message, message_expression))

    add(
        "preset-annotation",
        "variables.preset != ''",
        f"metadata.annotations.{PRESET_ANNOTATION}: missing; only jobs rendered by runai-spec "
        "from an approved preset are admitted",
        f"'metadata.annotations.{PRESET_ANNOTATION}: missing; only jobs rendered by runai-spec "
        "from an approved preset are admitted'",
    )
    add(
        "preset-approved",
        "variables.preset == '' || variables.known",
        f"metadata.annotations.{PRESET_ANNOTATION}: not an approved preset",
        f"(variables.key + 'expired') in params.data ? 'metadata.annotations.{PRESET_ANNOTATION}:"
        f" the approval of preset ' + variables.preset + ' expired on ' + "
        "params.data[variables.key + 'expired'] : "
        f"'metadata.annotations.{PRESET_ANNOTATION}: ' + variables.preset + "
        "' is not an approved preset'",
    )
    add(
        "preset-current",
        "!variables.known || variables.current",
        f"metadata.annotations.{PRESET_ANNOTATION}: the deployed parameters of the preset are "
        "not those of this policy",
        "'metadata.annotations." + PRESET_ANNOTATION + ": ' + (variables.preset in variables.digests "
        "? 'the deployed parameters of preset ' + variables.preset + ' are not those of this policy' "
        ": 'preset ' + variables.preset + ' is in the deployed parameters but this policy has no "
        "checks for it') + '; the AI Engineers apply policy.yaml and params.yaml together'",
    )
    add(
        "project-granted",
        f"!variables.known || (variables.project != '' && "
        f"({listed('projects', lit('*'))} || {listed('projects', 'variables.project')}))",
        "metadata.namespace: the project is not granted the preset",
        "'metadata.namespace: project ' + (variables.project == '' ? '(none)' : "
        "variables.project) + ' (namespace ' + request.namespace + ') is not granted preset ' "
        "+ variables.preset",
    )
    add(
        "shape",
        "size(variables.problems) == 0",
        "the job is not the exact shape of its approved preset's render",
        "variables.problems[0][0] + ' (preset ' + variables.preset + "
        "(size(variables.problems) > 1 || size(variables.problems[0]) > 1 ? '; and more)' : ')')",
    )
    return rules
