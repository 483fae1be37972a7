"""A preset's checks of its job or its smoke test, in the pieces the policy packs.

The problems under the preset's shape are written by cel.Emitter, in pieces below the CEL
parser's size limit (gate.pack puts them into variables); a role's pod template is written once
where every role's is alike, and checked for each role in a loop."""

from __future__ import annotations

from collections.abc import Callable

from ...facts.kubeflow import CONTAINER, SMOKE_LABEL
from .cel import CHUNK_LIMIT, ROLE_GROUP_LIMIT, Emitter, groups, let, msg
from .fields import roles_variable
from .repeat import NO_SMOKE
from .role_lists import MAIN_PLACE, ROLE
from .rules import RuleContext, balanced, lit
from .shape import MapShape, PresetShape, alike, role_commands


def preset_problems(
    shape: PresetShape, ctx: RuleContext, smoke: bool, prefix: str = "", pins: list[str] | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """The job's problems under SHAPE, as CEL lists of messages ('' where none), each below
    the parser's size limit, and the variables (name, expression) of the values
    other values derive from. Where every role's pod
    template has the same shape, it is written once and checked for each role. The pinned
    values are placeholders numbered from len(PINS), whose values are appended to PINS."""
    root = shape.smoke if smoke else shape.job
    if root is None:  # a kind with no smoke test (an MPIJob): no smoke job of it is admitted
        return [f"[[{lit(f'metadata.labels.{SMOKE_LABEL}: {NO_SMOKE}')}]]"], []
    emitter = Emitter(shape, ctx, root, prefix)
    pins = [] if pins is None else pins
    emitter.pins = pins
    spec = root.keys["spec"]
    assert isinstance(spec, MapShape)
    replicas = spec.keys[shape.replicas]
    assert isinstance(replicas, MapShape)
    emitter.replicas, emitter.roles = shape.replicas, list(replicas.keys)
    roles = list(replicas.keys.values())
    templates = [r.keys["template"] for r in roles if isinstance(r, MapShape)]
    commands = role_commands(templates, CONTAINER)  # alike but for them: each checked on its own
    if not templates or not (commands or all(alike(templates[0], t) for t in templates[1:])):
        return (
            _pieces(emitter.problems(root, "object", "", (), 0), lambda body: body),
            list(emitter.anchors.values()),
        )
    template = templates[0]
    emitter.skip = {id(role) for role in roles} | ({id(commands[0][0])} if commands else set())
    job = _pieces(emitter.problems(root, "object", "", (), 0), lambda body: body)
    for name, (_, command) in zip(replicas.keys, commands, strict=True) if commands else ():
        c, guards, at = emitter.locate(("spec", shape.replicas, name, *MAIN_PLACE))
        body = emitter.problems(command, "w.command", f"{at}.command", ("has(w.command)",), 1)
        listed = f"({balanced('&&', guards, 'true')}) ? {let(c, 'w', balanced('+', body, '[]'))} : []"
        job += _pieces([listed], lambda body: body)
    role = lit(ROLE)[1:-1]
    missing = msg(f"spec.{shape.replicas}.{ROLE}.template", "missing: the preset's render has it").replace(
        role, '" + r + "'
    )
    specs = f"object.spec.{shape.replicas}"
    where = f"spec.{shape.replicas}.{ROLE}.template"

    def per_role(body: str) -> str:
        # a message's start, the role's template, is the variable w
        body = body.replace(role, '" + r + "')
        loop = (
            f"variables.{roles_variable(shape.replicas)}.map(r, has({specs}[r].template) ? "
            f"[{specs}[r].template].map(t, {body})[0] : [{missing}])"
        ).replace(role, '" + r + "')
        return f"({loop}.filter(l, l.exists(m, m != '')) + [[]])[0]"

    parts = emitter.problems(template, "t", where, (), 1)
    merged = [balanced("+", group, "[]") for group in groups(parts, ROLE_GROUP_LIMIT)]
    return job + _pieces(merged, per_role), list(emitter.anchors.values())


def _pieces(parts: list[str], wrap: Callable[[str], str]) -> list[str]:
    """PARTS (list expressions), each WRAP-ped: the pieces the policy packs into variables
    (gate.pack), each below CHUNK_LIMIT."""
    out = [wrap(part) for part in parts if part != "[]"]
    for piece in out:
        if len(piece) > CHUNK_LIMIT:
            raise ValueError(f"a check of {len(piece)} characters cannot be split further")
    return out
