"""The shape of an approved preset's jobs, derived from its own renders, leaf by leaf.

The admission policy is not a second description of a preset. For each approved preset the
renderer runs on probe profiles: two that differ in every value a profile can set (same
structure), one that sets nothing optional, one per entry-point kind. A leaf equal in both
full probes comes from the preset, the site, the ledger or the template and is pinned to its
value; a leaf that differs carries a probe's own value and is checked by that value's rule
(admission_rules.RULES, validate's definitions), or is a derivation of another such leaf
(`--rdzv-id=<name>`) and must equal it. Keys and list items absent from the minimal probe are
optional; anything the renders never produce is refused. A new preset field or template line
is enforced without any change here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import InternalError
from .probes import Token

Scalar = str | int | float | bool | None

# -- the shape --------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    value: Scalar


@dataclass(frozen=True)
class Slot:
    """A profile value, checked by RULE, with fixed text around it."""

    rule: str
    prefix: str = ""
    suffix: str = ""
    token: str = ""


@dataclass(frozen=True)
class Same:
    """PREFIX + the value at ANCHOR (a Slot elsewhere) + SUFFIX."""

    anchor: tuple[Any, ...]
    prefix: str
    suffix: str


@dataclass(frozen=True)
class Named:
    """The name of an indexed list item: STEM then digits (`data-0`, `data-1`)."""

    stem: str


Leaf = Pin | Slot | Same | Named


@dataclass(frozen=True)
class Repeat:
    """In a command's launcher head: ITEMS (a window of leaves that carries one entry of a
    profile mapping, mpirun's `-x NAME`) repeated any number of times, none included. Where
    OTHERS is set, the run names the container's variables but those (the preset's and
    runai-spec's), each once: as many windows as there are such variables, each naming one."""

    items: tuple[Leaf, ...]
    others: tuple[str, ...] | None = None


@dataclass
class MapShape:
    keys: dict[str, Shape]
    optional: set[str]
    typed: bool  # an object of the schema (fixed properties) or a map (any key)
    properties: tuple[str, ...] = ()  # the schema's, for a typed object


@dataclass
class ListShape:
    """A list of scalars: a fixed head, then (for the container command) the profile's
    entry point and its arguments."""

    head: list[Shape]
    variants: list[tuple[list[Shape], list[str]]] = field(default_factory=list)
    # (head, entry rules): other entry-point kinds' launcher heads; the command's tail
    tail: bool = False  # items after the entry point are `arg`s
    optional_tail: int = 0  # a fixed list: its last items may be absent (all of them)


@dataclass
class ItemClass:
    """List items (maps with a `name`) that the profile may repeat: their name's rule."""

    name: Leaf  # a Slot (a profile name) or a Pin of a name stem followed by digits
    shape: MapShape
    indexed: bool = False  # name = stem + index


@dataclass
class KeyedListShape:
    fixed: dict[str, MapShape]
    optional: set[str]
    classes: list[ItemClass]


Shape = MapShape | ListShape | KeyedListShape | Leaf | Repeat


# -- derivation ----------------------------------------------------------------------------


class ShapeError(InternalError):
    """The renders of a preset disagree in a way the derivation cannot express."""


class LauncherRefused(ShapeError):
    """validate refuses the launcher for this preset (the site's or the preset's `launchers`,
    or a layout it cannot express): the preset has no jobs of that launcher to admit."""


@dataclass
class Ctx:
    tokens: dict[str, Token]
    fields: dict[str, list[str]]
    registry: str

    def with_world(self, world: int) -> Ctx:
        """The tokens with the global batch of a job of WORLD processes (the probes')."""
        a, b = (
            (int(self.tokens[f"batch.{k}"].a) for k in ("local", "grad_accum")),
            (int(self.tokens[f"batch.{k}"].b) for k in ("local", "grad_accum")),
        )
        ga, gb = world, world
        for x in a:
            ga *= x
        for x in b:
            gb *= x
        tokens = {**self.tokens, "batch.global": Token(str(ga), str(gb), "count", "batch.global")}
        return Ctx(tokens, self.fields, self.registry)


def _match(a: Scalar, b: Scalar, ctx: Ctx) -> Leaf | None:
    if a == b and type(a) is type(b):
        return Pin(a)
    for key, tok in sorted(ctx.tokens.items(), key=lambda kv: -len(str(kv[1].a))):
        ta, tb = tok.a, tok.b
        if isinstance(ta, bool):
            if (a, b) == (ta, tb) and isinstance(a, bool):
                return Slot(tok.rule, token=key)
            continue
        ta, tb = ta.replace("{registry}", ctx.registry), tb.replace("{registry}", ctx.registry)
        if not isinstance(a, str) or not isinstance(b, str):
            continue
        at = a.find(ta)
        if at >= 0:
            prefix, suffix = a[:at], a[at + len(ta) :]
            if b == prefix + tb + suffix:
                return Slot(tok.rule, prefix, suffix, key)
    if isinstance(a, str) and isinstance(b, str) and all(re.fullmatch("[0-9a-f]{64}", x) for x in (a, b)):
        return Slot("digest")  # a sha256 of the whole profile
    return None


def _schema_child(path: str, key: str, fields: dict[str, list[str]]) -> str:
    child = f"{path}.{key}" if path else key
    if path in fields and key in fields[path]:
        return child
    return f"{path}.*"


def derive(a: Any, b: Any, m: Any, where: str, spath: str, ctx: Ctx) -> Shape:
    """The shape of A (probe A's render) given B (same structure, other values) and M (the
    minimal probe's render of the same place, or None where M has none)."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            raise ShapeError(f"{where}: the probes' renders have other keys")
        typed = spath in ctx.fields
        keys = {}
        for key in a:
            child = _schema_child(spath, key, ctx.fields) if typed else f"{spath}.*"
            sub = m.get(key) if isinstance(m, dict) else None
            keys[key] = derive(a[key], b[key], sub, f"{where}.{key}", child, ctx)
        if isinstance(m, dict) and set(m) - set(a):
            raise ShapeError(
                f"{where}: the minimal probe has keys the full one lacks: {sorted(set(m) - set(a))}"
            )
        optional = set(a) - set(m) if isinstance(m, dict) else set()
        return MapShape(keys, optional, typed, tuple(ctx.fields.get(spath, ())) if typed else ())
    if isinstance(a, list):
        if not isinstance(b, list):
            raise ShapeError(f"{where}: a list in one probe only")
        if a and all(isinstance(x, dict) and "name" in x for x in a):
            return _keyed(a, b, m, where, spath, ctx)
        if len(a) != len(b):
            raise ShapeError(f"{where}: the probes' lists differ in length")
        items = [
            derive(x, y, None, f"{where}[{i}]", f"{spath}[]", ctx)
            for i, (x, y) in enumerate(zip(a, b, strict=True))
        ]
        return ListShape(items)
    leaf = _match(a, b, ctx)
    if leaf is None:
        raise ShapeError(
            f"{where}: {a!r} / {b!r}: a value that differs between the probes but carries no profile value"
        )
    return leaf


def _keyed(a: list[Any], b: list[Any], m: Any, where: str, spath: str, ctx: Ctx) -> KeyedListShape:
    if len(a) != len(b):
        raise ShapeError(f"{where}: the probes' lists differ in length")
    in_m = {x.get("name") for x in m} if isinstance(m, list) else set()
    m_by_name = {x.get("name"): x for x in m} if isinstance(m, list) else {}
    fixed: dict[str, MapShape] = {}
    optional: set[str] = set()
    classes: list[ItemClass] = []
    stems: dict[str, list[tuple[str, MapShape]]] = {}
    for x, y in zip(a, b, strict=True):
        shape = derive(x, y, m_by_name.get(x["name"]), f"{where}[{x['name']}]", f"{spath}[]", ctx)
        assert isinstance(shape, MapShape)
        name = shape.keys["name"]
        if isinstance(name, Pin):
            indexed = re.fullmatch(r"(.*?-)([0-9]+)", str(name.value))
            if indexed and name.value not in in_m:
                stems.setdefault(indexed.group(1), []).append((str(name.value), shape))
                continue
            fixed[str(name.value)] = shape
            if name.value not in in_m:
                optional.add(str(name.value))
        else:
            if not any(same_shape(c.shape, shape) for c in classes):
                assert isinstance(name, Slot | Same | Named)
                classes.append(ItemClass(name, shape))
    for stem, items in stems.items():
        first = items[0][1]
        if len(items) < 2 or not all(same_shape(first, s) for _, s in items[1:]):
            raise ShapeError(f"{where}: items {[n for n, _ in items]} look indexed but are not alike")
        first.keys["name"] = Named(stem)
        classes.append(ItemClass(Pin(stem), first, indexed=True))
    return KeyedListShape(fixed, optional, classes)


def same_shape(x: Shape, y: Shape) -> bool:
    """Alike but for the names and tokens of profile values (two env entries, two data
    volumes)."""
    if isinstance(x, MapShape) and isinstance(y, MapShape):
        return (
            list(x.keys) == list(y.keys)
            and x.optional == y.optional
            and all(k == "name" or same_shape(x.keys[k], y.keys[k]) for k in x.keys)
        )
    if isinstance(x, Slot) and isinstance(y, Slot):
        return (x.rule, x.prefix, x.suffix) == (y.rule, y.prefix, y.suffix)
    if isinstance(x, ListShape) and isinstance(y, ListShape):
        return len(x.head) == len(y.head) and all(
            same_shape(p, q) for p, q in zip(x.head, y.head, strict=True)
        )
    return x == y


def alike(x: Shape, y: Shape) -> bool:
    """Equal shapes, but that a derived value (Same) may stand where the other has the
    value's own rule (Slot): the second role's copy of the first's value."""
    if isinstance(x, MapShape) and isinstance(y, MapShape):
        return (
            list(x.keys) == list(y.keys)
            and x.optional == y.optional
            and x.typed == y.typed
            and all(alike(x.keys[k], y.keys[k]) for k in x.keys)
        )
    if isinstance(x, KeyedListShape) and isinstance(y, KeyedListShape):
        return (
            list(x.fixed) == list(y.fixed)
            and x.optional == y.optional
            and all(alike(x.fixed[k], y.fixed[k]) for k in x.fixed)
            and len(x.classes) == len(y.classes)
            and all(alike(a.shape, b.shape) for a, b in zip(x.classes, y.classes, strict=True))
        )
    if isinstance(x, ListShape) and isinstance(y, ListShape):
        return (
            x.tail == y.tail
            and len(x.variants) == len(y.variants)
            and all(
                len(a) == len(b) and all(alike(p, q) for p, q in zip(a, b, strict=True)) and r == t
                for (a, r), (b, t) in zip(x.variants, y.variants, strict=True)
            )
            and len(x.head) == len(y.head)
            and all(alike(p, q) for p, q in zip(x.head, y.head, strict=True))
        )
    if isinstance(x, Slot | Same) and isinstance(y, Slot | Same):
        return True
    return x == y


def role_commands(templates: list[Shape], container: str) -> list[tuple[MapShape, Shape]] | None:
    """Each pod template's CONTAINER and its command, where the templates are alike but for
    those commands (an MPIJob's Launcher runs mpirun, its Workers the SSH daemon); else None."""
    pairs = []
    for t in templates:
        spec = t.keys.get("spec") if isinstance(t, MapShape) else None
        listed = spec.keys.get("containers") if isinstance(spec, MapShape) else None
        found = listed.fixed.get(container) if isinstance(listed, KeyedListShape) else None
        if found is None or "command" not in found.keys:
            return None
        pairs.append((found, found.keys["command"]))
    commands = [command for _, command in pairs]
    if len(pairs) < 2 or all(alike(commands[0], c) for c in commands[1:]):
        return None
    for found, _ in pairs:  # compared with one command in every template
        found.keys["command"] = commands[0]
    try:
        same = all(alike(templates[0], t) for t in templates[1:])
    finally:
        for found, command in pairs:
            found.keys["command"] = command
    return pairs if same else None


# -- one preset ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PresetShape:
    """What one approved preset's job (and smoke test) may look like."""

    name: str
    job: MapShape
    smoke: MapShape | None  # None: the job's kind has no smoke test
    name_max: int
    reserved_mounts: tuple[str, ...]
    replicas: str  # the spec's key of the replica specs
    kind: str  # the job's kind


def replicas_key(spec: Mapping[str, Any]) -> str:
    """The key of a job's spec that holds its replica specs (pytorchReplicaSpecs, mpiReplicaSpecs)."""
    (key,) = [k for k in spec if k.endswith("ReplicaSpecs")]
    return str(key)


def anchor(shape: MapShape) -> None:
    """Turn every Slot of a token that already has a canonical place into a Same of it,
    where it is the canonical value with fixed text around (`--rdzv-id=<name>`)."""
    slots: list[tuple[tuple[Any, ...], Slot]] = []

    def collect(node: Shape, path: tuple[Any, ...]) -> None:
        if isinstance(node, MapShape):
            for k, v in node.keys.items():
                collect(v, (*path, k))
        elif isinstance(node, KeyedListShape):
            for k, v in node.fixed.items():
                collect(v, (*path, ("name", k)))
        elif isinstance(node, ListShape):  # a place by index: up to a Repeat (no index after it)
            for i, v in enumerate(node.head):
                if isinstance(v, Repeat):
                    break
                collect(v, (*path, i))
        elif isinstance(node, Slot) and node.token:
            slots.append((path, node))

    collect(shape, ())
    canonical: dict[str, tuple[tuple[Any, ...], Slot]] = {}
    for path, slot in slots:
        best = canonical.get(slot.token)
        if best is None or (best[1].prefix or best[1].suffix) and not (slot.prefix or slot.suffix):
            canonical[slot.token] = (path, slot)

    def rewrite(node: Shape, path: tuple[Any, ...]) -> Shape:
        if isinstance(node, MapShape):
            for k in list(node.keys):
                node.keys[k] = rewrite(node.keys[k], (*path, k))
        elif isinstance(node, KeyedListShape):
            for k in list(node.fixed):
                new = rewrite(node.fixed[k], (*path, ("name", k)))
                assert isinstance(new, MapShape)
                node.fixed[k] = new
        elif isinstance(node, ListShape):
            node.head = [rewrite(v, (*path, i)) for i, v in enumerate(node.head)]
            node.variants = [([rewrite(v, (*path, i)) for i, v in enumerate(h)], r) for h, r in node.variants]
        elif isinstance(node, Slot) and node.token in canonical:
            where, best = canonical[node.token]
            if where != path and (node.prefix.endswith(best.prefix) and node.suffix.startswith(best.suffix)):
                return Same(
                    where, node.prefix[: len(node.prefix) - len(best.prefix)], node.suffix[len(best.suffix) :]
                )
        return node

    rewrite(shape, ())
