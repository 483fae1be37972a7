"""`render --explain`: where every field of the rendered manifests came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InternalError
from .loading import load_mapping_lines, read_text
from .manifests import Manifest, dump, parse_rendered
from .plan import MANAGED_BY, Plan
from .presets import LEDGER_FILE, SITE_FILE, PresetRegistry
from .render import render_text
from .workload import Workload

_MARK = "@@runai-spec-origin:"


@dataclass(frozen=True)
class Origin:
    """One source of a value: the profile, the preset, the site file, a rule or the template."""

    kind: str  # profile | preset | site | ledger | derived | template
    field: str = ""  # the field in that file, or what the rule is
    file: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.kind in ("derived", "template"):
            return f"{self.kind}: {self.field}"
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.kind} {where} {self.field}".rstrip()


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
    return {k: v for k, v in dataclasses.asdict(origin).items() if v not in ("", None)}


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


class _Files:
    """Line numbers of fields in the profile, the preset and the site file."""

    def __init__(self, workload: Workload, presets_dir: Path) -> None:
        self.workload = workload
        self.profile_lines = workload.loaded.lines
        # Shown as presets/<file>, the name reviewers know, wherever the folder is installed.
        preset = f"{workload.approved.name}.yaml"
        self.preset_file, self.site_file, self.ledger_file = (
            f"presets/{preset}", f"presets/{SITE_FILE}", f"presets/{LEDGER_FILE}")
        self.preset_lines = self._lines(presets_dir / preset)
        self.site_lines = self._lines(presets_dir / SITE_FILE)

    @staticmethod
    def _lines(path: Path) -> dict[str, int]:
        return load_mapping_lines(read_text(path), str(path))[1]

    def profile(self, field: str) -> Origin:
        return Origin("profile", field, self.workload.path, self.profile_lines.get(field))

    def preset(self, field: str) -> Origin:
        line = self.preset_lines.get(field)
        return Origin("preset", field if line else f"{field} (default)", self.preset_file, line)

    def site(self, field: str) -> Origin:
        line = self.site_lines.get(field)
        return Origin("site", field if line else f"{field} (default)", self.site_file, line)


def _pairs(prefix: str, pairs: tuple[tuple[Any, ...], ...], key_origin: Any,
           value_origin: Any) -> dict[str, Origin]:
    out: dict[str, Origin] = {}
    for i, (key, *_rest) in enumerate(pairs):
        out[f"{prefix}[{i}][0]"] = key_origin(key)
        for j in range(1, len(pairs[i])):
            out[f"{prefix}[{i}][{j}]"] = value_origin(key)
    return out


def plan_origins(workload: Workload, presets_dir: Path) -> dict[str, Origin]:
    """Where each leaf of the Plan (`env[3][1]`, `volumes[0].claim`) came from.

    Mirrors plan_workload(); a test renders every example and fails on any output value
    whose plan leaf has no entry here, so the two cannot drift apart silently."""
    files = _Files(workload, presets_dir)
    plan, profile, preset, site = (workload.plan, workload.loaded.profile,
                                   workload.approved.preset, workload.site)
    o: dict[str, Origin] = {
        "name": files.profile("name"),
        "namespace": (files.site(f"namespaces.{profile.project}")
                      if profile.project in site.namespaces else files.site("namespace_pattern")),
        "project": files.profile("project"),
        "procs_per_pod": files.preset("gpus_per_pod"),
        "image": files.profile("image"),
        "working_dir": files.profile("working_dir"),
        "scheduler_name": files.site("scheduler_name"),
        "master_port": files.preset("master_port"),
        "restart_policy": files.preset("run_policy.restart_policy"),
        "elastic.min_pods": files.preset("elastic.min"),
        "elastic.max_pods": files.preset("elastic.max"),
        "elastic.max_restarts": files.preset("elastic.max_restarts"),
    }
    for i, replica in enumerate(plan.replicas):
        o[f"replicas[{i}].role"] = Origin("derived", "Master trains; Workers join it"
                                          if not plan.elastic else "elastic: Worker-only job")
        o[f"replicas[{i}].replicas"] = (
            Origin("derived", "exactly one Master") if replica.role == "Master"
            else files.preset("nodes") if plan.elastic
            else Origin("derived", f"preset nodes ({plan.pods}) - 1 Master"))
    for i, arg in enumerate(plan.launcher):
        o[f"launcher[{i}]"] = (files.preset("gpus_per_pod") if arg.startswith("--nproc-per-node")
                               else Origin("derived", f"launcher for the {plan.layout} layout "
                                           "(site guide)"))
    for i in range(len(plan.entrypoint)):
        o[f"entrypoint[{i}]"] = files.profile(f"command[{i}]")

    def env_origin(key: str) -> Origin:
        if key in preset.network.env:
            return files.preset(f"network.env.{key}")
        if key == "NCCL_DEBUG" and "nccl-debug" in plan.diagnostics:
            return files.profile("diagnostics.nccl_debug")
        if key == "LOCAL_RANK" and plan.layout == "single-gpu" and key not in profile.env:
            return Origin("derived", "single GPU: bare python sets no LOCAL_RANK")
        return files.profile(f"env.{key}")

    o.update(_pairs("env", plan.env, env_origin, env_origin))
    o.update(_pairs("secret_env", plan.secret_env, lambda k: files.profile(f"secret_env.{k}"),
                    lambda k: files.profile(f"secret_env.{k}")))

    compute = {"nvidia.com/gpu": "gpus_per_pod", "cpu": "cpu", "memory": "memory"}

    def resource(key: str) -> Origin:
        return files.preset(compute.get(key, f"network.resources.{key}"))

    for prefix in ("limits", "requests"):
        o.update(_pairs(prefix, getattr(plan, prefix), resource, resource))
    for i in range(len(plan.capabilities)):
        o[f"capabilities[{i}]"] = files.preset(f"network.capabilities[{i}]")

    for i, volume in enumerate(plan.volumes):
        v = f"volumes[{i}]"
        o[f"{v}.name"] = Origin("derived", "volume name")
        if volume.name == "checkpoint":
            ckpt = "checkpoint.pvc" if profile.checkpoint.pvc else "checkpoint.source"
            o |= {f"{v}.mount_path": files.profile("checkpoint.dir"),
                  f"{v}.claim": files.profile(ckpt),
                  f"{v}.read_only": Origin("derived", "checkpoints are written")}
        elif volume.name == "dshm":
            o |= {f"{v}.mount_path": Origin("derived", "large shared memory at /dev/shm"),
                  f"{v}.memory_size": files.preset("shared_memory"),
                  f"{v}.read_only": Origin("derived", "shared memory is written")}
        else:
            d = f"data[{volume.name.removeprefix('data-')}]"
            source = f"{d}.pvc" if f"{d}.pvc" in files.profile_lines else f"{d}.source"
            read_only = files.profile(f"{d}.read_only")
            o |= {f"{v}.mount_path": files.profile(f"{d}.path"),
                  f"{v}.claim": files.profile(source),
                  f"{v}.read_only": read_only if read_only.line else
                  Origin("derived", "data is read-only unless the profile says otherwise")}

    label_values = {
        site.queue_label: files.profile("project"), "project": files.profile("project"),
        site.priority_label: files.preset("priority"),
        site.preemptibility_label: files.preset("preemptible"),
        "app.kubernetes.io/managed-by": Origin("derived", f"{MANAGED_BY} marks what it created"),
        "app.kubernetes.io/name": files.profile("name"),
        site.node_pool_label: files.preset("node_pool"),
    }
    label_keys = {site.queue_label: files.site("queue_label"),
                  site.priority_label: files.site("priority_label"),
                  site.preemptibility_label: files.site("preemptibility_label"),
                  site.node_pool_label: files.site("node_pool_label")}

    def label_key(key: str) -> Origin:
        return label_keys.get(key) or Origin("derived", "label key fixed by runai-spec")

    for prefix in ("labels", "pod_labels"):
        o.update(_pairs(prefix, getattr(plan, prefix), label_key, label_values.__getitem__))
    annotation_values = {
        "runai-spec/version": Origin("derived", "runai-spec version"),
        "runai-spec/preset": files.profile("preset"),
        "runai-spec/preset-sha256": Origin("ledger", f"approvals.{workload.approved.name}.yaml"
                                           ".sha256", files.ledger_file),
        "runai-spec/profile-sha256": Origin("derived", f"sha256 of {workload.path}"),
        "runai-spec/site-sha256": Origin("ledger", "approvals.site.yaml.sha256",
                                         files.ledger_file),
        "runai-spec/diagnostics": files.profile("diagnostics"),
    }
    o.update(_pairs("annotations", plan.annotations,
                    lambda k: Origin("derived", "annotation key fixed by runai-spec"),
                    annotation_values.__getitem__))
    o.update(_pairs("pod_annotations", plan.pod_annotations,
                    lambda k: files.preset(f"network.annotations.{k}"),
                    lambda k: files.preset(f"network.annotations.{k}")))
    run_policy = {"cleanPodPolicy": "clean_pod_policy", "backoffLimit": "backoff_limit",
                  "ttlSecondsAfterFinished": "ttl_seconds_after_finished",
                  "activeDeadlineSeconds": "active_deadline_seconds"}
    o.update(_pairs("run_policy", plan.run_policy,
                    lambda k: Origin("derived", "Kubeflow runPolicy field"),
                    lambda k: files.preset(f"run_policy.{run_policy[k]}")))
    return o


def _marked(value: Any, path: str) -> Any:
    """The same plan with every non-empty scalar replaced by a marker naming its plan path.
    None, empty strings and empty tuples stay, so the template takes the same branches."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _marked(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
                   for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_marked(item, f"{path}[{i}]") for i, item in enumerate(value))
    if value is None or value == "":
        return value
    return f"{_MARK}{path}"


def _walk(real: Any, marked: Any, path: str, out: list[tuple[str, Any, str | None, str | None]],
          key_mark: str | None = None) -> None:
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


def explain_workload(workload: Workload, registry: PresetRegistry | None = None) -> ExplainResult:
    """Every leaf of the rendered manifests with its origin."""
    presets_dir = (registry or PresetRegistry()).root
    origins = plan_origins(workload, presets_dir)
    marked_plan: Plan = _marked(workload.plan, "")
    marked = parse_rendered(render_text(marked_plan, workload.site.family))
    (job,) = [m for m in workload.manifests if m.get("kind") == "PyTorchJob"]
    leaves: list[tuple[str, Any, str | None, str | None]] = []
    _walk(job, marked, "", leaves)
    fields = []
    for path, value, mark, key_mark in leaves:
        if mark is None:
            origin = Origin("template", "fixed by runai-spec's template")
        else:
            plan_path = mark[len(_MARK):]
            if plan_path not in origins:
                raise InternalError(f"explain: no origin recorded for plan field {plan_path}")
            origin = origins[plan_path]
        key_origin = origins.get(key_mark[len(_MARK):]) if key_mark else None
        fields.append(FieldOrigin(path, value, origin, key_origin))
    return ExplainResult(workload.path, workload.manifests, tuple(fields))
