"""One approved preset's shape: its probe profiles rendered, and the shape derived from them.

admission_shape says how a shape is derived from two renders; here are the renders: the full
probes once per entry-point kind, the minimal ones, the job and its smoke test, each role's
container command (a launcher head, an entry point, the arguments) derived on its own.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...check.identity import name_room
from ...errors import InputError, RunaiSpecError
from ...facts import kubeflow
from ...load.registry import ApprovedPreset, PresetRegistry
from ...load.site import Site
from ...render.manifests import Manifest
from . import repeat
from .fields import FIELDS_FILES, shipped_fields
from .probes import ENTRY_KINDS, probe_accelerate_config, probe_profile, probe_tokens
from .shape import (
    Ctx,
    KeyedListShape,
    LauncherRefused,
    ListShape,
    MapShape,
    PresetShape,
    ShapeError,
    anchor,
    derive,
    replicas_key,
)

# -- commands -------------------------------------------------------------------------------


def _command_shape(
    renders: dict[str, tuple[list[str], list[str]]], ctx: Ctx, where: str, minimal: list[str]
) -> ListShape:
    """The container command of each entry kind: the launcher head (derived like any leaf),
    then the entry point's items, then (full probes) the arguments. MINIMAL: the minimal
    probe's command (python entry, no arguments)."""
    out: ListShape | None = None
    for kind, (ca, cb) in renders.items():
        head_a, head_b, rules = ENTRY_KINDS[kind]
        n = len(ca) - len(head_a) - 2  # the full probes' two arguments
        if n < 0 or len(cb) != len(ca) or ca[n : n + len(head_a)] != head_a:
            raise ShapeError(f"{where}: the entry point is not where the probe put it")
        head = [
            derive(x, y, None, f"{where}[{i}]", "", ctx)
            for i, (x, y) in enumerate(zip(ca[:n], cb[:n], strict=True))
        ]
        small = minimal[: len(minimal) - len(ENTRY_KINDS["python"][0])] if kind == "python" else None
        head = repeat.fold(head, ctx, where, small)
        entry_rules = [f"={x}" if r == "pin" else r for x, r in zip(head_a, rules, strict=True)]
        if out is None:
            out = ListShape(head, [(head, entry_rules)], tail=True)
        else:
            out.variants.append((head, entry_rules))
    assert out is not None
    return out


# -- one preset ---------------------------------------------------------------------------


def _prepare(registry: PresetRegistry, profile: dict[str, Any], name: str) -> Any:
    from ...pipeline.workload import prepare_workload

    text = json.dumps(profile)
    try:
        if "accelerate_config" not in profile:
            return prepare_workload(Path(f"<probe {name}>"), registry, text=text)
        with tempfile.TemporaryDirectory(prefix="runai-spec-probe-") as folder:
            # the profile reads its accelerate config beside it
            (Path(folder) / profile["accelerate_config"]).write_text(
                json.dumps(probe_accelerate_config(name)), encoding="utf-8"
            )
            (Path(folder) / "probe.yaml").write_text(text, encoding="utf-8")
            return prepare_workload(Path(folder) / "probe.yaml", registry)
    except RunaiSpecError as exc:
        raise ShapeError(f"preset {profile['preset']}: its probe profile does not render: {exc}") from None


def _job(manifests: tuple[Manifest, ...] | list[Manifest]) -> dict[str, Any]:
    """The workload among MANIFESTS (a kind of FIELDS_FILES; the smoke test's ConfigMap aside)."""
    (job,) = [m for m in manifests if (m.get("apiVersion"), m.get("kind")) in FIELDS_FILES]
    return dict(job)


def _renders(
    registry: PresetRegistry,
    approved: ApprovedPreset,
    site: Site,
    *,
    minimal: bool,
    entry: str = "python",
    launcher: str | None = None,
    strategy: str | None = None,
) -> tuple[Any, Any]:

    def probe(side: str, world: int = 1) -> dict[str, Any]:
        return probe_profile(
            approved,
            site,
            side,
            minimal=minimal,
            entry=entry,
            world=world,
            launcher=launcher,
            strategy=strategy,
        )

    out = []
    for side in ("a", "b"):
        world = _prepare(registry, probe(side), side).plan.world_size
        workload = _prepare(registry, probe(side, world), side)
        errors = [f for f in workload.errors if f.rule != "preset-not-granted"]
        if launcher is not None and any(f.path == "launcher" for f in errors):
            raise LauncherRefused(f"preset {approved.name}: launcher {launcher} is not allowed")
        kind = workload.plan.workload
        if (kind.api_version, kind.kind) not in FIELDS_FILES:  # never left ungated silently
            raise InputError(
                f"preset {approved.name} allows launcher {launcher} ({kind.kind} {kind.api_version}), "
                "whose CRD fields the admission policy does not have",
                hint=f"leave {launcher} out of the preset's launchers where the policy is enforced",
            )
        if errors:
            raise ShapeError(
                f"preset {approved.name}: its probe profile has findings: "
                + "; ".join(f"{f.rule}: {f.message}" for f in errors)
            )
        out.append(workload)
    return out[0], out[1]


def preset_shape(
    registry: PresetRegistry, name: str, launcher: str | None = None, strategy: str | None = None
) -> PresetShape:
    """Render preset NAME's probes (with LAUNCHER, or the profile's default, and STRATEGY, or
    the preset's first) and derive the shape of its job and smoke test; LauncherRefused where
    validate refuses LAUNCHER for it."""
    from ...pipeline.smoke import refuse_other_kinds

    approved = registry.get(name)
    site = registry.site()
    kinds = ["python", "executable", "shell"] + (["module"] if site.allow_module_entrypoint else [])
    full = {
        k: _renders(registry, approved, site, minimal=False, entry=k, launcher=launcher, strategy=strategy)
        for k in kinds
    }
    small = _renders(registry, approved, site, minimal=True, launcher=launcher, strategy=strategy)
    plan = full["python"][0].plan
    fields = shipped_fields((plan.workload.api_version, plan.workload.kind))
    try:  # a kind with no smoke test (an MPIJob, for now): every smoke job of it is denied
        refuse_other_kinds(plan, None)
        smokes: tuple[bool, ...] = (False, True)
    except InputError:
        smokes = (False,)
    shapes = [_kind_shape(full, small, smoke, fields, site.registries[0]) for smoke in smokes]
    name_max = name_room(plan)
    reserved = tuple(
        v.mount_path for v in plan.volumes if v.name != "checkpoint" and not v.name.startswith("data-")
    )
    job = _job(full["python"][0].manifests)
    return PresetShape(
        name,
        shapes[0],
        shapes[1] if len(shapes) > 1 else None,
        name_max,
        (*reserved, kubeflow.SMOKE_MOUNT),
        replicas_key(job["spec"]),
        plan.workload.kind,
    )


def _kind_shape(
    full: dict[str, tuple[Any, Any]],
    small: tuple[Any, Any],
    smoke: bool,
    fields: dict[str, list[str]],
    registry: str,
) -> MapShape:
    """The shape of the job (or of its smoke test) from the probes' renders."""
    from ...pipeline.smoke import smoke_workload

    def doc(w: Any) -> dict[str, Any]:
        return _job(smoke_workload(w) if smoke else w.manifests)

    a, b = (doc(w) for w in full["python"])
    m = doc(small[0])
    ctx = Ctx(probe_tokens(False), fields, registry).with_world(full["python"][0].plan.world_size)
    shape = derive(_strip_commands(a), _strip_commands(b), _strip_commands(m), "", "", ctx)
    assert isinstance(shape, MapShape)
    # the minimal probes must differ only where the full ones do (a check of the probes)
    derive(
        _strip_commands(m),
        _strip_commands(doc(small[1])),
        None,
        "",
        "",
        Ctx(probe_tokens(True), fields, registry).with_world(small[0].plan.world_size),
    )
    specs = replicas_key(a["spec"])
    for role, spec in _pods(shape):
        where = f"spec.{specs}.{role}.template.spec.containers[{kubeflow.CONTAINER}].command"
        ca, cb, cm = _command(a, role), _command(b, role), _command(m, role)
        if smoke:
            command = derive(ca, cb, None, where, "", ctx)
            assert isinstance(command, ListShape)
            folded = repeat.fold(command.head, ctx, where, None)  # mpirun's -x run, if any
            run = len(command.head) - len(folded) + 1 if len(folded) < len(command.head) else 0
            # flags that only some profiles give (--checkpoint-on-sigterm) end the list
            extra = len(ca) - run - len(cm)
            if extra < 0 or ca[: len(cm)][:1] != cm[:1]:
                raise ShapeError(f"{where}: the minimal probe's command is not a head of the full one's")
            command.head, command.optional_tail = folded, extra
            _container(spec).keys["command"] = repeat.forwarded(command, _container(spec), ca, a, role, where)
            continue
        renders = {k: (_command(doc(w[0]), role), _command(doc(w[1]), role)) for k, w in full.items()}
        if all(x == ca and y == ca for x, y in renders.values()) and cm == ca:
            # no profile value in it (an MPIJob's Workers run the preset's SSH daemon): pinned
            _container(spec).keys["command"] = derive(ca, cb, None, where, "", ctx)
            continue
        command = _command_shape(renders, ctx, where, cm)
        _container(spec).keys["command"] = repeat.forwarded(command, _container(spec), ca, a, role, where)
    anchor(shape)
    return shape


def _strip_commands(job: dict[str, Any]) -> dict[str, Any]:
    """JOB with each container command replaced by a marker (derived on its own)."""
    out = json.loads(json.dumps(job))
    spec = out.get("spec", {})
    for replica in spec.get(replicas_key(spec), {}).values():
        for c in replica["template"]["spec"]["containers"]:
            c["command"] = []
    return out  # type: ignore[no-any-return]


def _command(job: dict[str, Any], role: str) -> list[str]:
    spec = job["spec"][replicas_key(job["spec"])][role]["template"]["spec"]
    return list(spec["containers"][0]["command"])


def _pods(shape: MapShape) -> Iterator[tuple[str, MapShape]]:
    specs = shape.keys["spec"]
    assert isinstance(specs, MapShape)
    replicas = specs.keys[replicas_key(specs.keys)]
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


def registry_shapes(registry: PresetRegistry, names: list[str]) -> list[PresetShape]:
    return [preset_shape(registry, n) for n in names]
