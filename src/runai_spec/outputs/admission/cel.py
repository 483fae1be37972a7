"""A preset's derived shape (admission_shape) written as CEL: a list of the problems found.

Each place of the shape binds its value once, with a one-element list's `map` (core CEL's
only `let`), so that the checks under it read `v3.cpu` and not the whole path again; a
check is `cond ? '' : message`, and the policy keeps the non-empty messages.
"""

from __future__ import annotations

import re

from ...facts.kubeflow import CONTAINER
from ...load.profile import MAX_ARGS
from . import repeat
from .role_lists import ARG_INDEXES, RoleLists
from .rules import (
    MAX_LISTED,
    RULES,
    Rule,
    RuleContext,
    balanced,
    container_relations,
    is_string,
    lit,
    text,
)
from .shape import (
    ItemClass,
    KeyedListShape,
    ListShape,
    MapShape,
    Named,
    Pin,
    PresetShape,
    Same,
    Shape,
    Slot,
)

# CEL's reserved words: a schema property of that name cannot be selected as itself. The API
# server escapes a property named by one of CEL's keywords as `__name__` (Kubernetes'
# property-name escaping, apiextensions-apiserver pkg/apis/apiextensions/v1/types.go,
# ValidationRule: "true", "false", "null", "in", "as", "break", "const", "continue", "else",
# "for", "function", "if", "import", "let", "loop", "package", "namespace", "return"); the
# only one in the PyTorchJob schema is `namespace` (the pod template's metadata.namespace).
_WORDS = (
    "as break const continue else for function if import let loop package namespace return var "
    "void while in true false null"
)
RESERVED = frozenset(_WORDS.split())
ESCAPED = RESERVED - {"var", "void", "while"}
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys at the top of the job and of its metadata that the API server or the operator writes
# (status; uid, resourceVersion, managedFields, finalizers, ...): not the render's to judge.
SERVER_KEYS: dict[str, tuple[str, ...] | None] = {"": ("status",), "metadata": None}
# A message that starts with LET is a whole check that yields '' or its message itself.
LET = "\0let\0"
# The longest list expression written as one piece: cel-go and cel-cpp refuse an expression
# of more than 100,000 code points (their parsers' default expression size limit, which the
# API server keeps); the policy packs its checks into variables of at most CHUNK_LIMIT.
CHUNK_LIMIT = 60_000
# The parts bound once (a named list entry, a role's pod template) before they are packed:
# small enough that several fit one piece.
GROUP_LIMIT = 2_000
ROLE_GROUP_LIMIT = 2_000
GROUP_PARTS = 8
# A pinned leaf's value is written as a placeholder (its index among the preset's pins), bound
# later (gate.Family.bind) to the literal or, where the presets sharing these checks differ in
# it, to the preset's parameter: PIN_VALUE in the condition, PIN_SHOWN inside the message's
# string literal (lit() writes the NULs as \u0000).
PIN_VALUE = "\0P{}\0"
PIN_SHOWN = "\0M{}\0"


def check(cond: str, message: str) -> str:
    return f"({cond}) ? '' : {message}"


MISSING = ": missing: the preset's render has it"


def msg(path: str, what: str) -> str:
    return lit(f"{path}: {what}")


def rng(e: str) -> str:
    """E as the range of a comprehension: cel-cpp's checker refuses an index expression of
    type dyn there (`o["a"].all(...)`), `dyn(...)` around it is the same value everywhere."""
    return f"dyn({e})" if e.endswith("]") else e


def child(e: str, key: str, typed: bool) -> tuple[str, str]:
    """(expression, presence test) of KEY under E (a map's key that is a CEL identifier is
    selected like a field)."""
    if IDENT.match(key) and key not in RESERVED:
        return f"{e}.{key}", f"has({e}.{key})"
    if typed and key in ESCAPED:  # a property of the schema: selected by its escaped name
        return f"{e}.__{key}__", f"has({e}.__{key}__)"
    return f"{e}[{lit(key)}]", f"{lit(key)} in {e}"


def item(e: str, name: str) -> tuple[str, str]:
    return (
        f"{rng(e)}.filter(x, has(x.name) && x.name == {lit(name)})[0]",
        f"{rng(e)}.exists(x, has(x.name) && x.name == {lit(name)})",
    )


def let(value: str, var: str, body: str) -> str:
    """BODY (a list) with VAR bound to VALUE."""
    return f"[{value}].map({var}, {body})[0]"


def groups(parts: list[str], limit: int) -> list[list[str]]:
    """PARTS (list expressions; `[]` left out) in runs of at most LIMIT characters (a part
    longer than LIMIT alone) and of at most GROUP_PARTS parts (joined by `+`, a balanced
    tree of them is two levels of a parser's recursion each time it halves)."""
    out: list[list[str]] = [[]]
    for part in parts:
        if part == "[]":
            continue
        if out[-1] and (sum(len(p) + 3 for p in out[-1]) + len(part) > limit or len(out[-1]) == GROUP_PARTS):
            out.append([])
        out[-1].append(part)
    return [g for g in out if g]


class Emitter(RoleLists):
    """The problems of one preset's shape, with its rules' context."""

    def __init__(self, shape: PresetShape, ctx: RuleContext, root: MapShape, prefix: str = "") -> None:
        self.ctx = ctx
        self.prefix = prefix  # of the names of the anchors' variables
        self.anchors: dict[tuple[object, ...], tuple[str, str]] = {}
        self.root = root
        self.tag = ""  # the validation's message names the preset once
        self.skip: set[int] = set()  # role shapes whose template is checked in a loop
        self.pins: list[str] = []  # the pinned values, by their placeholders' index
        self.replicas = ""  # the job's key of its roles, and their names
        self.roles: list[str] = []
        self.lists: dict[tuple[str, str], str] = {}  # (field, role) -> its variable (per_role)

    # -- the anchors of derived values (absolute places) -----------------------------------
    def locate(self, path: tuple[object, ...]) -> tuple[str, list[str], str]:
        """Expression, guards and dotted text of PATH (an admission_shape anchor)."""
        e, guards, where = "object", [], ""
        node: Shape = self.root
        for step in path:
            if isinstance(step, tuple):
                assert isinstance(node, KeyedListShape)
                e, present = item(e, str(step[1]))
                guards.append(present)
                where += f"[{step[1]}]"
                node = node.fixed[str(step[1])]
            elif isinstance(step, int):
                assert isinstance(node, ListShape)
                guards.append(f"size({e}) > {step}")
                e, where = f"{e}[{step}]", f"{where}[{step}]"
                node = node.head[step]
            else:
                assert isinstance(node, MapShape)
                e, present = child(e, str(step), node.typed)
                guards.append(present)
                where = f"{where}.{step}" if where else str(step)
                node = node.keys[str(step)]
        return e, guards, where

    # -- leaves ---------------------------------------------------------------------------
    def leaf(self, leaf: Shape, e: str, where: str) -> tuple[str, str]:
        """(condition, message) of one scalar."""
        if isinstance(leaf, Named):
            return (
                f"{is_string(e)} && {self.named(leaf.stem, e)}",
                msg(where, f"must be {leaf.stem}<n>" + self.tag),
            )
        if isinstance(leaf, Pin):
            n = self.pin(leaf)
            return f"{text(e)} == {PIN_VALUE.format(n)}", msg(where, f"must be {PIN_SHOWN.format(n)}")
        if isinstance(leaf, Slot):
            rule = RULES[leaf.rule]
            return (
                rule.cel(e, self.ctx, leaf.prefix, leaf.suffix),
                msg(where, self._what(rule, leaf.prefix, leaf.suffix)),
            )
        assert isinstance(leaf, Same)
        anchor, guards, anchor_where = self.locate(leaf.anchor)
        # the anchor's value is a variable of the policy (a selection path of a dozen
        # levels would not fit a parser's recursion limit inside the checks)
        if leaf.anchor not in self.anchors:
            name = f"{self.prefix}a{len(self.anchors)}"
            self.anchors[leaf.anchor] = (name, f"{balanced('&&', guards, 'true')} ? {text(anchor)} : ''")
        var = f"variables.{self.anchors[leaf.anchor][0]}"
        return (
            f"{e} == {lit(leaf.prefix)} + {var} + {lit(leaf.suffix)}",
            msg(where, self._same(leaf, anchor_where)),
        )

    def _same(self, leaf: Same, anchor_where: str) -> str:
        """What a derived value must be, in words (a denial never shows CEL)."""
        framed = f" after {leaf.prefix!r}" if leaf.prefix else ""
        framed += f" before {leaf.suffix!r}" if leaf.suffix else ""
        return f"must be the value of {anchor_where}{framed}" + self.tag

    @staticmethod
    def named(stem: str, e: str) -> str:
        return f"{e}.matches({lit('^' + re.escape(stem) + '[0-9]+$')})"

    def _what(self, rule: Rule, prefix: str, suffix: str) -> str:
        framed = f" after {prefix!r}" if prefix else ""
        framed += f" before {suffix!r}" if suffix else ""
        return f"must be {rule.what}{framed}{self.tag}"

    # -- problems (a CEL list of messages) --------------------------------------------------
    # -- problems (CEL lists of messages) ------------------------------------------------
    # A place is reached by plain selection from the nearest bound variable (the pod
    # template, a named list entry), its checks guarded by the presence of every key on the
    # way: a parser counts each nested `let` several levels deep, a selection one.
    def problems(self, shape: Shape, e: str, where: str, guards: tuple[str, ...], depth: int) -> list[str]:
        """List expressions whose concatenation is the problems of SHAPE at E."""
        if isinstance(shape, MapShape):
            return self.mapping(shape, e, where, guards, depth)
        if isinstance(shape, KeyedListShape):
            return self.keyed(shape, e, where, guards, depth)
        if isinstance(shape, ListShape):
            # a fixed list of objects (a downwardAPI volume's items): each checked in place
            nested = [
                p
                for i, sub in enumerate(shape.head)
                if isinstance(sub, MapShape | KeyedListShape | ListShape)
                for p in self.problems(
                    sub,
                    f"{e}[{i}]",
                    f"{where}[{i}]",
                    (*guards, self.sized(shape, e), f"size({e}) > {i}"),
                    depth,
                )
            ]
            return [self.listing(shape, e, where, guards), *nested]
        return [f"[{self.guarded(guards, *self.leaf(shape, e, where))}]"]

    @staticmethod
    def guarded(guards: tuple[str, ...], cond: str, message: str) -> str:
        if message.startswith(LET):  # a check that computes its own message ('' when it holds)
            item = message[len(LET) :]
            return f"({balanced('&&', list(guards), 'true')}) ? {item} : ''" if guards else item
        if not guards:
            return check(cond, message)
        # a ternary, not `!guard || cond`: CEL absorbs an error on either side of `||`, but
        # not every implementation does inside a macro; a ternary never evaluates the branch
        # it does not take
        return check(f"({balanced('&&', list(guards), 'true')}) ? ({cond}) : true", message)

    def _required(self, shape: MapShape, e: str, where: str) -> list[tuple[str, str]]:
        """(key, presence test) of the keys E must have."""
        return [
            (key, child(e, key, shape.typed)[1])
            for key in shape.keys
            if key not in shape.optional and not (where == "metadata" and key == "namespace")
        ]

    def _extra(self, shape: MapShape, e: str, where: str) -> list[tuple[str, str]]:
        """(condition, message) that E has no key the render does not produce."""
        server = SERVER_KEYS.get(where, ())
        if server is None:
            return []
        allowed, at = [*shape.keys, *server], lit((where + ".") if where else "")
        if not shape.typed:
            names = ", ".join(lit(k) for k in allowed)
            only = lit(": not allowed: the preset renders only " + ", ".join(shape.keys) + self.tag)
            return [
                (
                    f"{rng(e)}.all(k, k in [{names}])",
                    f"{at} + {rng(e)}.filter(k, !(k in [{names}]))[0] + {only}",
                )
            ]
        props = [p for p in shape.properties if p not in allowed and p not in RESERVED - ESCAPED]
        if not props:
            return []
        # the names of the keys set, listed once: the condition is that none is
        named = ", ".join(f"{child(e, p, True)[1]} ? {lit(p)} : ''" for p in props)
        none = lit(": not allowed: the preset's render has none" + self.tag)
        said = let(f"[{named}].filter(p, p != '')", "b", f"size(b) == 0 ? '' : {at} + b[0] + {none}")
        return [(f"[{named}].all(p, p == '')", LET + said)]

    def missing(self, rows: list[tuple[str, str]], where: str, close: str = "") -> str:
        """The messages `WHERE name CLOSE: missing...` of the ROWS (name, presence test) that are
        absent: one table, not one check (and one message) each."""
        table = ", ".join(f"[{lit(name)}, {present}]" for name, present in rows)
        return f"[{table}].filter(t, !t[1]).map(t, {lit(where)} + t[0] + {lit(close + MISSING + self.tag)})"

    @staticmethod
    def under(guards: tuple[str, ...], body: str) -> str:
        """BODY (a list), or [] where one of GUARDS does not hold: the guards written once."""
        return f"(({balanced('&&', list(guards), 'true')}) ? {body} : [])" if guards else body

    def mapping(self, shape: MapShape, e: str, where: str, guards: tuple[str, ...], depth: int) -> list[str]:
        own = [self.guarded((), c, m) for c, m in self._extra(shape, e, where)]
        required = self._required(shape, e, where)
        subs: list[str] = []
        pinned: list[str] = []
        for key, sub in shape.keys.items():
            if where == "metadata" and key == "namespace":
                continue  # the request's own: the project is the namespace's (variables.project)
            if key in ("template", "command") and id(shape) in self.skip:
                continue
            ce, present = child(e, key, shape.typed)
            path = f"{where}.{key}" if where else key
            if isinstance(sub, MapShape | KeyedListShape | ListShape):
                subs += self.problems(sub, ce, path, (*guards, present), depth)
            elif isinstance(sub, Pin):
                pinned.append(f"[{lit(key)}, {present} ? [{ce}] : [], {PIN_VALUE.format(self.pin(sub))}]")
            else:
                own.append(self.guarded((present,), *self.leaf(sub, ce, path)))
        prefix = where + "." if where else ""
        heads = [f"[{', '.join(own)}]"] if own else []
        heads += [self.missing(required, prefix)] if required else []
        heads += [self.table(pinned, prefix, "", "")] if pinned else []
        return [self.under(guards, balanced("+", heads, "[]")) if heads else "[]", *subs]

    def pin(self, leaf: Pin) -> int:
        """The index of LEAF's value among the pins (its placeholder's)."""
        value = leaf.value
        self.pins.append("true" if value is True else "false" if value is False else str(value))
        return len(self.pins) - 1

    @staticmethod
    def table(rows: list[str], where: str, open_: str, close: str) -> str:
        """The messages of the ROWS `[place, [value] or [], wanted]` whose value is not the
        wanted text, each `WHERE OPEN_ place CLOSE: must be 'wanted'`."""
        must = lit(close + ": must be '")
        return (
            f"[{', '.join(rows)}].filter(t, t[1].exists(s, {text('s')} != t[2]))"
            f'.map(t, {lit(where + open_)} + t[0] + {must} + t[2] + "\'")'
        )

    def listing(self, shape: ListShape, e: str, where: str, guards: tuple[str, ...]) -> str:
        """The problems of a list of scalars (a list expression): its length, its pinned items
        as one table, its other items each."""
        if shape.tail:
            return f"[{self.command(shape, e, where, guards)}]"
        if repeat.has_run(shape.head):  # a smoke job's mpirun line: the run, then fixed items
            return self.under(
                guards, repeat.variant(self, shape.head, [], e, where, ARG_INDEXES, shape.optional_tail)
            )
        n, k = len(shape.head), shape.optional_tail
        c = e  # read in place: a binding would be levels of a parser's recursion
        rows: list[str] = []  # [position, the pinned text]
        others: list[str] = []
        for i, leaf in enumerate(shape.head):
            if isinstance(leaf, MapShape | KeyedListShape | ListShape):
                continue  # problems() checks it in place
            if isinstance(leaf, Pin):
                rows.append(f"[{i}, {PIN_VALUE.format(self.pin(leaf))}]")
                continue
            cond, message = self.leaf(leaf, f"{c}[{i}]", f"{where}[{i}]")
            others.append(check(f"size({c}) > {i} ? ({cond}) : true", message))
        body = [self.positions(rows, where, c, f"t[0] < size({c}) && ")] if rows else []
        body += [f"[{', '.join(others)}]"] if others else []
        size_msg = msg(where, f"must have {n} items" + (f" (or {n - k})" if k else "") + self.tag)
        listed = f"(({self.sized(shape, c)}) ? {balanced('+', body, '[]')} : [{size_msg}])"
        return self.under(guards, listed)

    @staticmethod
    def positions(rows: list[str], where: str, c: str = "c", guard: str = "") -> str:
        """The messages of the ROWS `[position, wanted]` of the list C whose item is not the
        wanted text (GUARD: a condition on the row first)."""
        return (
            f"[{', '.join(rows)}].filter(t, {guard}{text(f'{c}[t[0]]')} != t[1])"
            f'.map(t, {lit(where + "[")} + string(t[0]) + "]: must be \'" + t[1] + "\'")'
        )

    @staticmethod
    def sized(shape: ListShape, e: str) -> str:
        """E has the length of SHAPE (or of its head without the optional tail)."""
        n, k = len(shape.head), shape.optional_tail
        return f"size({e}) == {n}" if not k else f"(size({e}) == {n} || size({e}) == {n - k})"

    def command(self, shape: ListShape, e: str, where: str, guards: tuple[str, ...]) -> str:
        """The container command: one of the launcher heads, an entry point of that head's
        kind, then arguments. Each head's problems are listed once; the command passes when
        one head has none, and a denial names the first problem of the closest head. The
        positions of the items that are no argument are listed once (`b`), and every head
        reads those after its own length."""
        c = e  # a short selection (v1.command): read in place, not bound by one more level
        variants = []
        for head, entry in shape.variants:
            if repeat.has_run(head):  # mpirun's -x NAME, one a variable of the profile
                variants.append(repeat.variant(self, head, entry, e, where, ARG_INDEXES))
                continue
            n, k = len(head), len(head) + len(entry)
            sized = f"size({c}) >= {k} && size({c}) <= {k + MAX_ARGS}"
            rows: list[str] = []  # [position, the pinned text]
            parts: list[tuple[str, str]] = []
            for i, h in enumerate(head):
                if isinstance(h, Pin):
                    rows.append(f"[{i}, {PIN_VALUE.format(self.pin(h))}]")
                else:
                    parts.append(self.leaf(h, f"{c}[{i}]", f"{where}[{i}]"))
            for j, rule in enumerate(entry):
                if rule.startswith("="):
                    rows.append(f"[{n + j}, {lit(rule[1:])}]")
                else:
                    parts.append(
                        (
                            RULES[rule].cel(f"{c}[{n + j}]", self.ctx),
                            msg(
                                f"{where}[{n + j}]", f"the entry point must be {RULES[rule].what}" + self.tag
                            ),
                        )
                    )
            pinned = self.positions(rows, where, c) if rows else "[]"
            args = (
                f"b.exists(i, i >= {k}) ? {lit(where + '[')} + string(b.filter(i, i >= {k})[0]) + "
                f"{lit(']: must be ' + RULES['arg'].what + self.tag)} : ''"
            )
            size_msg = msg(
                where,
                f"must be the preset's launcher ({n} items), an entry point "
                f"and at most {MAX_ARGS} arguments" + self.tag,
            )
            listed = [*(check(cond, m) for cond, m in parts), args]
            body = balanced("+", [p for p in (pinned, f"[{', '.join(listed)}]") if p != "[]"], "[]")
            variants.append(f"(({sized}) ? {body} : [{size_msg}])")
        closest = (
            "ls.exists(l, size(l) == 0) ? '' : (ls.filter(l, size(l) == 1) + "
            "ls.filter(l, size(l) == 2) + ls)[0][0]"
        )
        lists = f"[{', '.join(variants)}].map(l, l.filter(m, m != ''))"
        body = let(self.bad_args(c, where), "b", f"[{lists}].map(ls, {closest})[0]")
        if not guards:
            return body
        return f"!{balanced('&&', list(guards), 'true')} ? '' : {body}"

    def keyed(
        self, shape: KeyedListShape, e: str, where: str, guards: tuple[str, ...], depth: int
    ) -> list[str]:
        fixed = ", ".join(lit(n) for n in shape.fixed)
        matches = [f"(has(x.name) ? x.name in [{fixed}] : false)"]
        matches += [f"({self.class_ok(c, 'x')})" for c in shape.classes]
        every = balanced("||", matches, "false")
        allowed = ", ".join(shape.fixed) or "none"
        classes = "; ".join(self.class_what(c) for c in shape.classes)
        extra = f" or the profile may add ({classes})" if classes else ""
        most = len(shape.fixed) + MAX_LISTED
        # the entries of no class: a role's variables, where the profile may add some
        unknown = f"{rng(e)}.filter(x, !({every}))"
        if shape.classes:
            unknown = self.per_role(
                "env",
                where,
                unknown,
                rng(e),
                lambda listed: [
                    f"[{rng(listed)}].map(l, size(l) <= {most} ? l.filter(x, !({every})) : [])[0]"
                ],
            )
        bad = (
            f"[{unknown}].map(bad, size(bad) == 0 ? '' : "
            f"{lit(where + ': ')} + (has(bad[0].name) ? {text('bad[0].name')} : '(no name)') + "
            + lit(f": not an entry the preset renders ({allowed}){extra}{self.tag}")
            + ")[0]"
        )
        own = [
            bad,
            check(
                f"{rng(e)}.all(x, has(x.name) ? {rng(e)}.filter(y, has(y.name) "
                f"? y.name == x.name : false).size() == 1 : true)",
                msg(where, "each name at most once" + self.tag),
            ),
        ]
        required: list[tuple[str, str]] = []
        subs: list[str] = []
        for name, sub in shape.fixed.items():
            ie, present = item(e, name)
            if name not in shape.optional:
                required.append((name, present))
            var = f"v{depth}"
            cond = balanced("&&", [*guards, present], "true")
            parts = self.mapping(sub, var, f"{where}[{name}]", (), depth + 1)
            if name == CONTAINER:
                relations = [
                    check(c, msg(f"{where}[{name}]", what + self.tag)) for c, what in container_relations(var)
                ]
                parts.insert(0, "[" + ", ".join(relations) + "]")
            # each group of parts binds the entry once; the groups can go to different variables
            for group in groups(parts, GROUP_LIMIT):
                subs.append(f"({cond} ? {let(ie, var, balanced('+', group, '[]'))} : [])")
        heads = [f"[{', '.join(own)}]"]
        if shape.classes:  # the profile's entries too: counted before each is read
            many = msg(where, f"must have at most {most} entries (the preset's and the profile's)" + self.tag)
            heads = [f"(size({rng(e)}) <= {most} ? {heads[0]} : [{many}])"]
        if required:
            heads.append(self.missing(required, where + "[", "]"))
        return [self.under(guards, balanced("+", heads, "[]")), *subs]

    # -- conditions (for the entries a profile may repeat) -------------------------------
    def ok(self, shape: Shape, e: str, guards: tuple[str, ...] = ()) -> list[str]:
        """The conditions of SHAPE at E."""
        g = balanced("&&", list(guards), "true")

        def under(cond: str) -> str:
            return f"(({g}) ? ({cond}) : true)" if guards else f"({cond})"

        if isinstance(shape, MapShape):
            keys = [c for c, _ in self._extra(shape, e, "\0")] + [
                p for _, p in self._required(shape, e, "\0")
            ]
            out = [under(c) for c in keys]
            for key, sub in shape.keys.items():
                ce, present = child(e, key, shape.typed)
                out += self.ok(sub, ce, (*guards, present))
            return out
        if isinstance(shape, ListShape):
            n = len(shape.head)
            return [
                under(f"size({e}) == {n}"),
                *(
                    under(f"size({e}) == {n} ? ({self.leaf(h, f'{e}[{i}]', '')[0]}) : true")
                    for i, h in enumerate(shape.head)
                ),
            ]
        if isinstance(shape, KeyedListShape):
            raise ValueError("a list of named entries inside a repeated entry")
        return [under(self.leaf(shape, e, "")[0])]

    def class_ok(self, cls: ItemClass, x: str) -> str:
        """X is an item of class CLS: its name, and every check of the class's shape (a list's
        all(): two levels for a parser however many checks, where `&&` adds one per halving;
        each check is guarded, so none raises where a conjunction would have absorbed it)."""
        return f"(has({x}.name) ? [{', '.join(self.ok(cls.shape, x))}].all(b, b) : false)"

    @staticmethod
    def class_what(cls: ItemClass) -> str:
        if cls.indexed:
            return f"{cls.name.value}<n>" if isinstance(cls.name, Pin) else "indexed"
        keys = "/".join(k for k in cls.shape.keys if k != "name")
        return f"a variable of your own ({keys})" if keys else "an entry of your own"


__all__ = ["ARG_INDEXES", "PIN_SHOWN", "PIN_VALUE", "Emitter"]
