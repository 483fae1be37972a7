"""The policy's checks: each approved preset's gate (from its shape), the variables and the rules."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...facts.kubeflow import PRESET_ANNOTATION, SMOKE_LABEL
from ...load.registry import PresetRegistry
from ...load.site import Site
from .cel import ARG_INDEXES, preset_problems
from .rules import MAX_ARGS, RuleContext, balanced, lit
from .shape import preset_shape


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


def listed(field: str, pattern: str) -> str:
    """An item of the comma-separated parameter FIELD matches PATTERN (a CEL string of a
    regular expression; core CEL has no split): project names are DNS labels."""
    return f"{param(field)}.matches('(^|,)' + {pattern} + '(,|$)')"


# -- the shapes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PresetGate:
    """One approved preset's checks (job and smoke test) and their digest."""

    name: str
    job: tuple[str, ...]  # CEL lists of lists of messages: the job's problems
    smoke: tuple[str, ...]  # the same for its smoke test
    anchors: tuple[tuple[str, str], ...] = ()  # variables (name, expression) they read

    @property
    def digest(self) -> str:
        text = "\n".join(
            [self.name, *self.job, "--smoke--", *self.smoke, *(f"{n}={x}" for n, x in self.anchors)]
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def preset_gate(registry: PresetRegistry, name: str, index: int = 0) -> PresetGate:
    """Preset NAME's checks, derived from its renders (INDEX: its place in the policy, which
    names its variables)."""
    site = registry.site()
    shape = preset_shape(registry, name)
    ctx = RuleContext(
        tuple(site.registries), shape.name_max, shape.reserved_mounts, site.allow_module_entrypoint
    )
    job, job_anchors = preset_problems(shape, ctx, smoke=False, prefix=f"p{index}job")
    smoke, smoke_anchors = preset_problems(shape, ctx, smoke=True, prefix=f"p{index}smoke")
    return PresetGate(name, tuple(job), tuple(smoke), tuple(job_anchors + smoke_anchors))


def _shape_variables(gates: Sequence[PresetGate]) -> list[tuple[str, str]]:
    """One variable per piece of each preset's checks (each below the CEL parser's size
    limit; a list of lists of messages), evaluated only for a job of that preset, and
    `problems`: the non-empty lists of non-empty messages of them all, in order."""
    items: list[tuple[str, str]] = []
    for i, gate in enumerate(gates):
        params_ok = f"{param('shape-sha256')} == {lit(gate.digest)} ? '' : " + lit(
            f"the deployed parameters of preset {gate.name} are not those of "
            "this policy; the AI Engineers apply policy.yaml and params.yaml "
            "together"
        )
        items.append((f"p{i}", f"variables.preset == {lit(gate.name)} ? [[{params_ok}]] : []"))
        items += [(n, f"variables.preset == {lit(gate.name)} ? ({x}) : ''") for n, x in gate.anchors]
        for kind, pieces in (("job", gate.job), ("smoke", gate.smoke)):
            smoke = "variables.smoke" if kind == "smoke" else "!variables.smoke"
            for j, piece in enumerate(pieces):
                items.append(
                    (f"p{i}{kind}{j}", f"variables.preset == {lit(gate.name)} && {smoke} ? {piece} : []")
                )
    anchors = {n for gate in gates for n, _ in gate.anchors}
    every = balanced("+", [f"variables.{name}" for name, _ in items if name not in anchors], "[]")
    items.append(
        ("problems", f"!variables.known ? [] : ({every}).map(l, l.filter(m, m != '')).filter(l, size(l) > 0)")
    )
    return items


def variables(site: Site, gates: Sequence[PresetGate]) -> list[dict[str, str]]:
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
        (
            "smoke",
            f"{lit(SMOKE_LABEL)} in variables.labels && variables.labels[{lit(SMOKE_LABEL)}] == 'true'",
        ),
        (
            "roles",
            "has(object.spec) && has(object.spec.pytorchReplicaSpecs) ? "
            "object.spec.pytorchReplicaSpecs.filter(r, true) : []",
        ),
        ("argIndexes", "[" + ", ".join(str(i) for i in range(MAX_ARGS + 32)) + "]"),
        *_shape_variables(gates),
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
        "project-granted",
        f"!variables.known || (variables.project != '' && "
        f"({listed('projects', lit('[*]'))} || {listed('projects', 'variables.project')}))",
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
