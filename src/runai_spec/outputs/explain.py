"""`render --explain`: where each rendered value came from (the planner records it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InternalError
from ..pipeline.workload import Workload
from ..plan.origins import Origin
from ..plan.plan import Plan
from ..render import render_text
from ..render.manifests import Manifest, dump, parse_rendered

_MARK = "@@runai-spec-origin:"


@dataclass(frozen=True)
class FieldOrigin:
    path: str  # e.g. spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image
    value: Any
    origin: Origin
    key_origin: Origin | None = None  # when the key itself came from a file (labels, env)

    def as_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "value": self.value, **_origin_dict(self.origin)}
        if self.key_origin is not None:
            out["key_from"] = _origin_dict(self.key_origin)
        return out


def _origin_dict(origin: Origin) -> dict[str, Any]:
    return {k: v for k, v in origin._asdict().items() if v not in ("", None)}


@dataclass(frozen=True)
class ExplainResult:
    profile: str
    manifests: tuple[Manifest, ...]
    fields: tuple[FieldOrigin, ...]

    def annotated(self) -> str:
        """The manifests as `render` prints them, each value followed by `# <origin>`."""
        comments = {}
        for f in self.fields:
            text = str(f.origin)
            if f.key_origin is not None and f.key_origin != f.origin:
                text += f"  (key: {f.key_origin})"
            comments[f.path] = text
        return dump(list(self.manifests), comments=comments)


def _marked(value: Any, path: str) -> Any:
    """The same plan with every non-empty scalar replaced by a marker naming its plan path.
    None, empty strings and empty tuples stay, so the template takes the same branches.
    The plan's own record of origins and its workload kind (which template renders it) are no
    values of the manifests: they stay as they are."""
    fields: tuple[str, ...] | None = getattr(type(value), "_fields", None)
    if fields is not None:  # one of the plan's records (NamedTuples)
        changes = {
            name: _marked(getattr(value, name), f"{path}.{name}" if path else name)
            for name in fields
            if name not in ("origins", "workload")
        }
        return value._replace(**changes)
    if isinstance(value, tuple):
        return tuple(_marked(item, f"{path}[{i}]") for i, item in enumerate(value))
    if value is None or value == "":
        return value
    return f"{_MARK}{path}"


def _walk(
    real: Any,
    marked: Any,
    path: str,
    out: list[tuple[str, Any, str | None, str | None]],
    key_mark: str | None = None,
) -> None:
    if isinstance(real, dict):
        if not isinstance(marked, dict) or len(marked) != len(real):
            raise InternalError(f"explain: the marked render differs in shape at {path or '.'}")
        for (key, value), (mkey, mvalue) in zip(real.items(), marked.items(), strict=True):
            child = f"{path}.{key}" if path else key
            _walk(value, mvalue, child, out, mkey if mkey.startswith(_MARK) else None)
    elif isinstance(real, list):
        if not isinstance(marked, list) or len(marked) != len(real):
            raise InternalError(f"explain: the marked render differs in shape at {path}")
        for i, (value, mvalue) in enumerate(zip(real, marked, strict=True)):
            _walk(value, mvalue, f"{path}[{i}]", out)
    else:
        mark = marked if isinstance(marked, str) and marked.startswith(_MARK) else None
        out.append((path, real, mark, key_mark))


def explain_workload(workload: Workload) -> ExplainResult:
    """Every leaf of the rendered manifests with the origin the planner recorded for it."""
    origins = workload.plan.origins
    marked_plan: Plan = _marked(workload.plan, "")
    marked = parse_rendered(render_text(marked_plan, workload.site.family))
    (job,) = [m for m in workload.manifests if m.get("kind") == workload.plan.workload.kind]
    leaves: list[tuple[str, Any, str | None, str | None]] = []
    _walk(job, marked, "", leaves)
    fields = []
    for path, value, mark, key_mark in leaves:
        if mark is None:
            origin = Origin("template", "fixed by runai-spec's template")
        else:
            plan_path = mark[len(_MARK) :]
            if plan_path not in origins:
                raise InternalError(f"explain: no origin recorded for plan field {plan_path}")
            origin = origins[plan_path]
        key_origin = origins.get(key_mark[len(_MARK) :]) if key_mark else None
        fields.append(FieldOrigin(path, value, origin, key_origin))
    return ExplainResult(workload.path, workload.manifests, tuple(fields))
