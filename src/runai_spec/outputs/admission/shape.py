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

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ...check.identity import name_room
from ...errors import InternalError, RunaiSpecError
from ...load.registry import ApprovedPreset, PresetRegistry
from ...load.site import Site
from ...render.manifests import Manifest

Scalar = str | int | float | bool | None

# -- probe profiles -----------------------------------------------------------------------
# Each value a profile can set, as two distinct texts (probe A, probe B) and the rule that
# admits it. The texts are unlike anything a preset or template writes, so that finding one
# in a rendered leaf says where the leaf came from.


@dataclass(frozen=True)
class Token:
    a: Any
    b: Any
    rule: str


def _tokens(minimal: bool) -> dict[str, Token]:
    t = {
        "name": Token("qzjoba", "qzjobb", "name"),
        "project": Token("qzproja", "qzprojb", "project"),
        "image": Token("{registry}/qzimga/train:qztaga@sha256:" + "a" * 64,
                       "{registry}/qzimgb/train:qztagb@sha256:" + "b" * 64, "image"),
        "checkpoint.dir": Token("/qzckpta", "/qzckptb", "mount"),
        "checkpoint.pvc": Token("qzpvca", "qzpvcb", "claim"),
        "checkpoint.resume": Token("qzresumea", "qzresumeb", "text"),
        "checkpoint.format": Token("dcp", "safetensors", "checkpoint-format"),
        "batch.local": Token("3", "5", "count"),
        "batch.grad_accum": Token("2", "7", "count"),
    }
    if minimal:
        return t
    t.update({
        "working_dir": Token("/qzwda", "/qzwdb", "working-dir"),
        "arg1": Token("qzarg1a", "qzarg1b", "arg"),
        "arg2": Token("qzarg2a", "qzarg2b", "arg"),
        "env1": Token("QZENV1A", "QZENV1B", "env-name"),
        "env1.value": Token("qzval1a", "qzval1b", "env-value"),
        "env2": Token("QZENV2A", "QZENV2B", "env-name"),
        "env2.value": Token("qzval2a", "qzval2b", "env-value"),
        "secret1": Token("QZSEC1A", "QZSEC1B", "env-name"),
        "secret1.secret": Token("qzsecreta1", "qzsecretb1", "secret"),
        "secret1.key": Token("qzkeya1", "qzkeyb1", "secret-key"),
        "secret2": Token("QZSEC2A", "QZSEC2B", "env-name"),
        "secret2.secret": Token("qzsecreta2", "qzsecretb2", "secret"),
        "secret2.key": Token("qzkeya2", "qzkeyb2", "secret-key"),
        "data0.path": Token("/qzdata0a", "/qzdata0b", "mount"),
        "data0.pvc": Token("qzclaim0a", "qzclaim0b", "claim"),
        "data1.path": Token("/qzdata1a", "/qzdata1b", "mount"),
        "data1.pvc": Token("qzclaim1a", "qzclaim1b", "claim"),
        "data.read_only": Token(True, False, "bool"),
        "reason": Token("qzreasona", "qzreasonb", "text"),
    })
    return t


ENTRY_KINDS = {  # entry point kind -> (probe A's command head, probe B's, rule of its items)
    "python": (["qzentrya.py"], ["qzentryb.py"], ["entry-python"]),
    "executable": (["./qzentrya.sh"], ["./qzentryb.sh"], ["entry-executable"]),
    "shell": (["bash", "./qzentrya.sh"], ["bash", "./qzentryb.sh"], ["shell", "script"]),
    "module": (["-m", "qzmodulea"], ["-m", "qzmoduleb"], ["pin", "module"]),
}


def _probe(approved: ApprovedPreset, site: Site, side: str, *, minimal: bool,
           entry: str = "python", world: int = 1) -> dict[str, Any]:
    tokens = _tokens(minimal)

    def v(key: str) -> Any:
        value = getattr(tokens[key], side)
        return value.replace("{registry}", site.registries[0]) if isinstance(value, str) else value

    head = ENTRY_KINDS[entry][0 if side == "a" else 1]
    preset = approved.preset
    profile: dict[str, Any] = {
        "name": v("name"), "project": v("project"), "preset": approved.name,
        "image": v("image"), "command": list(head),
        "batch": {"local": int(v("batch.local")), "grad_accum": int(v("batch.grad_accum")),
                  "global": world * int(v("batch.local")) * int(v("batch.grad_accum"))},
        "strategy": preset.strategies[0],
        "checkpoint": {"dir": v("checkpoint.dir"), "pvc": v("checkpoint.pvc"),
                       "resume": v("checkpoint.resume"), "format": v("checkpoint.format")},
        "metrics": {"writer": "rank0"},
    }
    if preset.strategies[0] == "deepspeed":
        profile["zero_stage"] = 0
    if minimal:
        return profile
    profile["command"] += [v("arg1"), v("arg2")]
    profile["working_dir"] = v("working_dir")
    profile["env"] = {v("env1"): v("env1.value"), v("env2"): v("env2.value")}
    profile["secret_env"] = {v(f"secret{i}"): {"secret": v(f"secret{i}.secret"),
                                                "key": v(f"secret{i}.key")} for i in (1, 2)}
    profile["data"] = [{"pvc": v(f"data{i}.pvc"), "path": v(f"data{i}.path"),
                        "read_only": v("data.read_only")} for i in (0, 1)]
    profile["diagnostics"] = {"nccl_debug": True, "reason": v("reason")}
    profile["checkpoint"]["on_sigterm"] = True
    return profile


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


Shape = MapShape | ListShape | KeyedListShape | Leaf


# -- schema properties --------------------------------------------------------------------
FIELDS_FILE = "pytorchjob-fields.json"


def crd_fields(crd: dict[str, Any]) -> dict[str, list[str]]:
    """Every object of the CRD's v1 schema -> its properties, by schema path (`*` a map's
    value, `[]` a list's item): what a typed object may hold after the API server's pruning."""
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    out: dict[str, list[str]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            out[path] = sorted(node["properties"])
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(version["schema"]["openAPIV3Schema"], "")
    return dict(sorted(out.items()))


def shipped_fields() -> dict[str, list[str]]:
    """The training-operator 1.9 CRD's objects and properties (generated by crd_fields from
    kubeflow/training-operator release-1.9 `kubeflow.org_pytorchjobs.yaml`; the tests compare
    it with that file)."""
    data = resources.files(__package__ or "").joinpath(FIELDS_FILE).read_text(encoding="utf-8")
    loaded: dict[str, list[str]] = json.loads(data)
    return loaded


# -- derivation ----------------------------------------------------------------------------


class ShapeError(InternalError):
    """The renders of a preset disagree in a way the derivation cannot express."""


@dataclass
class _Ctx:
    tokens: dict[str, Token]
    fields: dict[str, list[str]]
    registry: str

    def with_world(self, world: int) -> _Ctx:
        """The tokens with the global batch of a job of WORLD processes (the probes')."""
        a, b = (int(self.tokens[f"batch.{k}"].a) for k in ("local", "grad_accum")), \
            (int(self.tokens[f"batch.{k}"].b) for k in ("local", "grad_accum"))
        ga, gb = world, world
        for x in a:
            ga *= x
        for x in b:
            gb *= x
        tokens = {**self.tokens, "batch.global": Token(str(ga), str(gb), "count")}
        return _Ctx(tokens, self.fields, self.registry)


def _match(a: Scalar, b: Scalar, ctx: _Ctx) -> Leaf | None:
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
            prefix, suffix = a[:at], a[at + len(ta):]
            if b == prefix + tb + suffix:
                return Slot(tok.rule, prefix, suffix, key)
    if isinstance(a, str) and isinstance(b, str) and all(
            re.fullmatch("[0-9a-f]{64}", x) for x in (a, b)):
        return Slot("digest")  # a sha256 of the whole profile
    return None


def _schema_child(path: str, key: str, fields: dict[str, list[str]]) -> str:
    child = f"{path}.{key}" if path else key
    if path in fields and key in fields[path]:
        return child
    return f"{path}.*"


def derive(a: Any, b: Any, m: Any, where: str, spath: str, ctx: _Ctx) -> Shape:
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
            raise ShapeError(f"{where}: the minimal probe has keys the full one lacks: "
                             f"{sorted(set(m) - set(a))}")
        optional = set(a) - set(m) if isinstance(m, dict) else set()
        return MapShape(keys, optional, typed, tuple(ctx.fields.get(spath, ())) if typed else ())
    if isinstance(a, list):
        if not isinstance(b, list):
            raise ShapeError(f"{where}: a list in one probe only")
        if a and all(isinstance(x, dict) and "name" in x for x in a):
            return _keyed(a, b, m, where, spath, ctx)
        if len(a) != len(b):
            raise ShapeError(f"{where}: the probes' lists differ in length")
        items = [derive(x, y, None, f"{where}[{i}]", f"{spath}[]", ctx)
                 for i, (x, y) in enumerate(zip(a, b, strict=True))]
        return ListShape(items)
    leaf = _match(a, b, ctx)
    if leaf is None:
        raise ShapeError(f"{where}: {a!r} / {b!r}: a value that differs between the probes "
                         "but carries no profile value")
    return leaf


def _keyed(a: list[Any], b: list[Any], m: Any, where: str, spath: str,
           ctx: _Ctx) -> KeyedListShape:
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
            if not any(_same_shape(c.shape, shape) for c in classes):
                assert isinstance(name, Slot | Same | Named)
                classes.append(ItemClass(name, shape))
    for stem, items in stems.items():
        first = items[0][1]
        if len(items) < 2 or not all(_same_shape(first, s) for _, s in items[1:]):
            raise ShapeError(f"{where}: items {[n for n, _ in items]} look indexed but are not "
                             "alike")
        first.keys["name"] = Named(stem)
        classes.append(ItemClass(Pin(stem), first, indexed=True))
    return KeyedListShape(fixed, optional, classes)


def _same_shape(x: Shape, y: Shape) -> bool:
    """Alike but for the names and tokens of profile values (two env entries, two data
    volumes)."""
    if isinstance(x, MapShape) and isinstance(y, MapShape):
        return (list(x.keys) == list(y.keys) and x.optional == y.optional
                and all(k == "name" or _same_shape(x.keys[k], y.keys[k]) for k in x.keys))
    if isinstance(x, Slot) and isinstance(y, Slot):
        return (x.rule, x.prefix, x.suffix) == (y.rule, y.prefix, y.suffix)
    if isinstance(x, ListShape) and isinstance(y, ListShape):
        return len(x.head) == len(y.head) and all(
            _same_shape(p, q) for p, q in zip(x.head, y.head, strict=True))
    return x == y


# -- commands -------------------------------------------------------------------------------


def _command_shape(renders: dict[str, tuple[list[str], list[str]]], ctx: _Ctx,
                   where: str) -> ListShape:
    """The container command of each entry kind: the launcher head (derived like any leaf),
    then the entry point's items, then (full probes) the arguments."""
    out: ListShape | None = None
    for kind, (ca, cb) in renders.items():
        head_a, head_b, rules = ENTRY_KINDS[kind]
        n = len(ca) - len(head_a) - 2  # the full probes' two arguments
        if n < 0 or len(cb) != len(ca) or ca[n:n + len(head_a)] != head_a:
            raise ShapeError(f"{where}: the entry point is not where the probe put it")
        head = [derive(x, y, None, f"{where}[{i}]", "", ctx)
                for i, (x, y) in enumerate(zip(ca[:n], cb[:n], strict=True))]
        entry_rules = [f"={x}" if r == "pin" else r for x, r in zip(head_a, rules, strict=True)]
        if out is None:
            out = ListShape(head, [(head, entry_rules)], tail=True)
        else:
            out.variants.append((head, entry_rules))
    assert out is not None
    return out


# -- one preset ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PresetShape:
    """What one approved preset's job (and smoke test) may look like."""

    name: str
    job: MapShape
    smoke: MapShape
    name_max: int
    reserved_mounts: tuple[str, ...]


def _prepare(registry: PresetRegistry, profile: dict[str, Any], name: str) -> Any:
    from ...pipeline.workload import prepare_workload

    text = json.dumps(profile)
    try:
        return prepare_workload(Path(f"<probe {name}>"), registry, text=text)
    except RunaiSpecError as exc:
        raise ShapeError(f"preset {profile['preset']}: its probe profile does not render: "
                         f"{exc}") from None


def _job(manifests: tuple[Manifest, ...] | list[Manifest]) -> dict[str, Any]:
    from ...facts.kubeflow import KIND

    (job,) = [m for m in manifests if m.get("kind") == KIND]
    return dict(job)


def _renders(registry: PresetRegistry, approved: ApprovedPreset, site: Site, *, minimal: bool,
             entry: str = "python") -> tuple[Any, Any]:

    out = []
    for side in ("a", "b"):
        first = _prepare(registry, _probe(approved, site, side, minimal=minimal, entry=entry),
                         side)
        world = first.plan.world_size
        workload = _prepare(registry, _probe(approved, site, side, minimal=minimal, entry=entry,
                                             world=world), side)
        errors = [f for f in workload.errors if f.rule != "preset-not-granted"]
        if errors:
            raise ShapeError(f"preset {approved.name}: its probe profile has findings: "
                             + "; ".join(f"{f.rule}: {f.message}" for f in errors))
        out.append(workload)
    return out[0], out[1]


def preset_shape(registry: PresetRegistry, name: str) -> PresetShape:
    """Render preset NAME's probes and derive the shape of its job and smoke test."""
    approved = registry.get(name)
    site = registry.site()
    fields = shipped_fields()
    kinds = ["python", "executable", "shell"] + (["module"] if site.allow_module_entrypoint else [])
    full = {k: _renders(registry, approved, site, minimal=False, entry=k) for k in kinds}
    small = _renders(registry, approved, site, minimal=True)
    shapes = [_kind_shape(full, small, smoke, fields, site.registries[0])
              for smoke in (False, True)]
    plan = full["python"][0].plan
    name_max = name_room(plan)
    reserved = tuple(v.mount_path for v in plan.volumes
                     if v.name != "checkpoint" and not v.name.startswith("data-"))
    from ...facts.kubeflow import SMOKE_MOUNT

    return PresetShape(name, shapes[0], shapes[1], name_max, (*reserved, SMOKE_MOUNT))


def _kind_shape(full: dict[str, tuple[Any, Any]], small: tuple[Any, Any], smoke: bool,
                fields: dict[str, list[str]], registry: str) -> MapShape:
    """The shape of the job (or of its smoke test) from the probes' renders."""
    from ...pipeline.smoke import smoke_workload

    def doc(w: Any) -> dict[str, Any]:
        return _job(smoke_workload(w) if smoke else w.manifests)

    a, b = (doc(w) for w in full["python"])
    m = doc(small[0])
    ctx = _Ctx(_tokens(False), fields, registry).with_world(full["python"][0].plan.world_size)
    shape = derive(_strip_commands(a), _strip_commands(b), _strip_commands(m), "", "", ctx)
    assert isinstance(shape, MapShape)
    # the minimal probes must differ only where the full ones do (a check of the probes)
    derive(_strip_commands(m), _strip_commands(doc(small[1])), None, "", "",
           _Ctx(_tokens(True), fields, registry).with_world(small[0].plan.world_size))
    for role, spec in _pods(shape):
        where = f"spec.pytorchReplicaSpecs.{role}.template.spec.containers[pytorch].command"
        if smoke:
            ca, cb, cm = _command(a, role), _command(b, role), _command(m, role)
            command = derive(ca, cb, None, where, "", ctx)
            assert isinstance(command, ListShape)
            # flags that only some profiles give (--checkpoint-on-sigterm) end the list
            extra = len(ca) - len(cm)
            if extra < 0 or ca[:len(cm)][:1] != cm[:1]:
                raise ShapeError(f"{where}: the minimal probe's command is not a head of the "
                                 "full one's")
            command.optional_tail = extra
            _container(spec).keys["command"] = command
            continue
        renders = {k: (_command(doc(w[0]), role), _command(doc(w[1]), role))
                   for k, w in full.items()}
        _container(spec).keys["command"] = _command_shape(renders, ctx, where)
    _anchor(shape)
    return shape


def _strip_commands(job: dict[str, Any]) -> dict[str, Any]:
    """JOB with each container command replaced by a marker (derived on its own)."""
    out = json.loads(json.dumps(job))
    for spec in out.get("spec", {}).get("pytorchReplicaSpecs", {}).values():
        for c in spec["template"]["spec"]["containers"]:
            c["command"] = []
    return out  # type: ignore[no-any-return]


def _command(job: dict[str, Any], role: str) -> list[str]:
    spec = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
    return list(spec["containers"][0]["command"])


def _pods(shape: MapShape) -> Iterator[tuple[str, MapShape]]:
    specs = shape.keys["spec"]
    assert isinstance(specs, MapShape)
    replicas = specs.keys["pytorchReplicaSpecs"]
    assert isinstance(replicas, MapShape)
    for role, spec in replicas.keys.items():
        assert isinstance(spec, MapShape)
        template = spec.keys["template"]
        assert isinstance(template, MapShape)
        pod = template.keys["spec"]
        assert isinstance(pod, MapShape)
        yield role, pod


def _container(pod: MapShape) -> MapShape:
    containers = pod.keys["containers"]
    assert isinstance(containers, KeyedListShape)
    (container,) = containers.fixed.values()
    return container


def _anchor(shape: MapShape) -> None:
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
        elif isinstance(node, ListShape):
            for i, v in enumerate(node.head):
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
            node.variants = [([rewrite(v, (*path, i)) for i, v in enumerate(h)], r)
                             for h, r in node.variants]
        elif isinstance(node, Slot) and node.token in canonical:
            where, best = canonical[node.token]
            if where != path and (node.prefix.endswith(best.prefix)
                                  and node.suffix.startswith(best.suffix)):
                return Same(where, node.prefix[:len(node.prefix) - len(best.prefix)],
                            node.suffix[len(best.suffix):])
        return node

    rewrite(shape, ())


def registry_shapes(registry: PresetRegistry, names: list[str]) -> list[PresetShape]:
    return [preset_shape(registry, n) for n in names]
