"""A launcher head with a run of repeated windows (mpirun's `-x NAME`) written as CEL.

shape.Repeat: one window a variable of the profile; the problems of one command variant.

The run's length is not known before the command is read: it is the first count of windows
after which the head's fixed items follow (`o`, the position of the first of them), and every
other check reads its positions from there. A window of the run is checked like the leaves
it is made of, at each of its places.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ...load.profile import MAX_ARGS
from .rules import RULES, RuleContext, balanced, lit
from .shape import (
    Ctx,
    KeyedListShape,
    ListShape,
    MapShape,
    Pin,
    Repeat,
    Shape,
    ShapeError,
    Slot,
    replicas_key,
    same_shape,
)

# the denial of a smoke job of a kind that has no smoke test (an MPIJob, for now)
NO_SMOKE = "runai-spec renders no smoke test of this kind of job (docs/mpi.md): none is admitted"
FORWARD = "must forward (-x) each of the container's variables but the preset's, once"
# where a message's place goes (lit() writes it `\u0001`): the place is computed in CEL
MARK = "\x01"
_MARKED = lit(MARK)[1:-1]


# -- the derivation: a run of windows in a launcher head (shape._command_shape's) ----------
def repeats(head: list[Shape]) -> Iterator[int]:
    return (i for i, x in enumerate(head) if isinstance(x, Repeat))


def fold(head: list[Shape], ctx: Ctx, where: str, minimal: list[str] | None) -> list[Shape]:
    """HEAD with its run of windows that each carry one key of a profile mapping (mpirun's
    `-x NAME`: the full probes give two `env` and two `secret_env` names, the minimal one none)
    as one Repeat; MINIMAL, the minimal probe's head (python's), must be HEAD without the run."""
    keyed = [
        i
        for i, x in enumerate(head)
        if isinstance(x, Slot) and x.token and ctx.tokens[x.token].field.endswith("{key}")
    ]
    if not keyed:
        return list(head)
    width = keyed[1] - keyed[0] if len(keyed) > 1 else 0
    start = keyed[0] - width + 1
    windows = [head[i - width + 1 : i + 1] for i in keyed]
    if (
        width < 1
        or start < 0
        or keyed != list(range(keyed[0], keyed[0] + width * len(keyed), width))
        or not all(isinstance(x, Pin | Slot) for x in windows[0])
        or not all(all(same_shape(p, q) for p, q in zip(windows[0], w, strict=True)) for w in windows)
    ):
        raise ShapeError(f"{where}: the profile's names are not a run of like windows")
    rest = [*head[:start], *head[keyed[-1] + 1 :]]
    if minimal is not None and (
        len(minimal) != len(rest)
        or any(isinstance(x, Pin) and str(x.value) != y for x, y in zip(rest, minimal, strict=True))
    ):
        raise ShapeError(f"{where}: the minimal probe's launcher is not the full one's without its names")
    items = tuple(x for x in windows[0] if isinstance(x, Pin | Slot))
    return [*head[:start], Repeat(items), *head[keyed[-1] + 1 :]]


def forwarded(
    command: ListShape, container: MapShape, ca: list[str], job: dict[str, Any], role: str, where: str
) -> ListShape:
    """COMMAND with its Repeat (if any) bound to the container's variables: the render forwards
    each variable of the profile (`-x NAME`), and names no other in the run."""
    run = next((h for h in command.head if isinstance(h, Repeat)), None)
    env = container.keys.get("env")
    if run is None:
        return command
    spec = job["spec"][replicas_key(job["spec"])][role]["template"]["spec"]["containers"][0]
    if not isinstance(env, KeyedListShape) or not env.classes:
        raise ShapeError(f"{where}: a run of names, but the container has no variables of the profile")
    others = tuple(env.fixed)
    own = [v["name"] for v in spec["env"] if v["name"] not in others]
    start = next(repeats(command.head)) + next(j for j, x in enumerate(run.items) if isinstance(x, Slot))
    if sorted(ca[start : start + len(run.items) * len(own) : len(run.items)]) != sorted(own):
        raise ShapeError(f"{where}: the run does not name the container's own variables")
    bound = Repeat(run.items, others)

    def rebind(head: list[Shape]) -> list[Shape]:
        return [bound if isinstance(h, Repeat) else h for h in head]

    command.head = rebind(command.head)
    command.variants = [(rebind(h), r) for h, r in command.variants]
    return command


# -- CEL ------------------------------------------------------------------------------------
class Leaves(Protocol):
    ctx: RuleContext
    tag: str

    def leaf(self, leaf: Shape, e: str, where: str) -> tuple[str, str]: ...

    def bad_args(self, c: str, where: str) -> str: ...


def has_run(head: list[Shape]) -> bool:
    return any(isinstance(h, Repeat) for h in head)


def placed(message: str, where: str, position: str) -> str:
    """MESSAGE (a CEL literal written for the place MARK) naming WHERE[POSITION]."""
    return message.replace(_MARKED, f'{where}[" + string({position}) + "]')


def _entry(em: Leaves, rule: str, at: str) -> tuple[str, str]:
    """(condition, message) of an entry point's item at AT: a fixed text (`=x`) or a rule's."""
    if rule.startswith("="):
        return f"{at} == {lit(rule[1:])}", lit(f"{MARK}: must be {rule[1:]!r}{em.tag}")
    what = f"{MARK}: the entry point must be {RULES[rule].what}{em.tag}"
    return RULES[rule].cel(at, em.ctx), lit(what)


def variant(
    em: Leaves,
    head: list[Shape],
    entry: list[str],
    e: str,
    where: str,
    indexes: str,
    optional: int | None = None,
) -> str:
    """The problems (a CEL list of messages, '' where none) of the command E as the launcher
    HEAD (with one Repeat), an entry point of rules ENTRY and arguments; INDEXES a CEL list of
    the positions 0, 1, ... (longer than any command). With OPTIONAL (a smoke job's fixed
    command) no entry point and no argument, and the last OPTIONAL items may be absent."""
    r = next(i for i, h in enumerate(head) if isinstance(h, Repeat))
    run = head[r]
    assert isinstance(run, Repeat)
    w, after = len(run.items), head[r + 1 :]
    k = len(after) + len(entry)
    always = k - (optional or 0)  # the items after the run that every such command has
    # the fixed items after the run, at o
    fixed = [em.leaf(h, f"{e}[o + {j}]", MARK) for j, h in enumerate(after)]
    fixed += [_entry(em, rule, f"{e}[o + {len(after) + j}]") for j, rule in enumerate(entry)]
    follows = balanced("&&", [f"({c})" for c, _ in fixed[: min(len(after), always)]], "true")
    found = f"{indexes}.filter(m, [{r} + {w} * m].all(o, size({e}) >= o + {always} ? ({follows}) : false))"
    start = f"[{found}].map(f, size(f) > 0 ? {r} + {w} * f[0] : -1)[0]"
    checks = [em.leaf(h, f"{e}[{i}]", f"{where}[{i}]") for i, h in enumerate(head[:r])]
    listed = [f"({c}) ? '' : {m}" for c, m in checks]
    listed += [
        f"({c}) ? '' : {placed(m, where, f'o + {j}')}"
        if j < always
        else f"size({e}) <= o + {j} || ({c}) ? '' : {placed(m, where, f'o + {j}')}"
        for j, (c, m) in enumerate(fixed)
    ]
    listed += _run(em, run, r, e, where, indexes)
    if optional is not None:
        tail = f"{k} (or {always})" if optional else f"{k}"
        size_msg = f"must have {r} items, a run of {w} for each variable it forwards, then {tail}"
        sized = f"o >= 0 && (size({e}) == o + {k} || size({e}) == o + {always})"
        size_msg = lit(f"{where}: {size_msg}{em.tag}")
        return f"[{start}].map(o, ({sized}) ? [{', '.join(listed)}] : [{size_msg}])[0]"
    args = f"{em.bad_args(e, where)}.filter(i, i >= o + {k})"
    listed.append(
        f"[{args}].map(b, size(b) == 0 ? '' : {lit(where + '[')} + string(b[0]) + "
        f"{lit(']: must be ' + RULES['arg'].what + em.tag)})[0]"
    )
    size_msg = lit(
        f"{where}: must be the preset's launcher ({r} items, a run of {w} for each variable it "
        f"forwards, {len(after)} items), an entry point and at most {MAX_ARGS} arguments{em.tag}"
    )
    sized = f"o >= 0 && size({e}) >= o + {k} && size({e}) <= o + {k + MAX_ARGS}"
    return f"[{start}].map(o, ({sized}) ? [{', '.join(listed)}] : [{size_msg}])[0]"


def _run(em: Leaves, run: Repeat, r: int, e: str, where: str, indexes: str) -> list[str]:
    """The problems of the windows of RUN (from R to o, the first fixed item after them)."""
    w = len(run.items)
    windows = [(*em.leaf(item, f"{e}[{r} + {w} * i + {j}]", MARK), j) for j, item in enumerate(run.items)]
    listed = []
    if run.others is not None:  # each window names one of the container's other variables
        c, others = e.removesuffix(".command"), ", ".join(lit(n) for n in run.others)
        own = f"has({c}.env) ? {c}.env.filter(v, has(v.name) && !(v.name in [{others}])) : []"
        windows += [
            (
                f"[{e}[{r} + {w} * i + {j}]].all(n, !(n in [{others}]) && has({c}.env) && "
                f"{c}.env.exists(v, has(v.name) && v.name == n))",
                lit(f"{MARK}: must name one of the container's variables but the preset's"),
                j,
            )
            for j, item in enumerate(run.items)
            if not isinstance(item, Pin)
        ]
    for cond, message, j in windows:
        bad = f"{indexes}.filter(i, i < (o - {r}) / {w} ? !({cond}) : false)"
        shown = placed(message, where, f"{r} + {w} * b[0] + {j}")
        listed.append(f"[{bad}].map(b, size(b) == 0 ? '' : {shown})[0]")
    if run.others is not None:  # as many windows as such variables
        listed.append(f"size({own}) == (o - {r}) / {w} ? '' : {lit(f'{where}: {FORWARD}{em.tag}')}")
    return listed
