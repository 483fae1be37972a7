"""The in-cluster smoke test: the same workload, short, every pod running preflight.py."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..checklist import PreflightSettings, preflight_settings, preflight_source
from ..errors import InputError
from .job import _nproc_int, _replicas, find_job
from .launcher import split_command

if TYPE_CHECKING:
    from ..workload import Workload

SMOKE_MOUNT = "/opt/runai-spec"
SMOKE_VOLUME = "runai-spec-preflight"
SMOKE_SUFFIX = "-smoke"
SMOKE_LABEL = "runai-spec/smoke"
PREFLIGHT_SHA_ANNOTATION = "runai-spec/preflight-sha256"


def smoke_names(name: str) -> tuple[str, str]:
    """(PyTorchJob, ConfigMap) names of a workload's smoke test: beside the real job, so a
    smoke test can run (and be deleted) while the real job exists."""
    job = f"{name}{SMOKE_SUFFIX}"
    return job, f"{job}-preflight"


def _longest_pod_name(job: Mapping[str, Any]) -> str:
    """`<job>-<replica type>-<N>` of the last pod, an elastic job at its maximum size."""
    name = job["metadata"]["name"]
    max_workers = (job.get("spec", {}).get("elasticPolicy") or {}).get("maxReplicas")
    names = []
    for rtype, n, _ in _replicas(job):
        if rtype == "Worker" and max_workers:
            n = max(n, int(max_workers))
        names.append(f"{name}-{rtype.lower()}-{max(n, 1) - 1}")
    return max(names, key=len)


def smoke_manifests(manifests: Sequence[Mapping[str, Any]],
                    settings: PreflightSettings | None = None,
                    *, deadline_s: int = 1800) -> list[dict[str, Any]]:
    """The same workload, short: every pod runs preflight.py from a mounted ConfigMap.

    The job is renamed `<name>-smoke` (its pod names must stay DNS labels); the world size,
    batch arithmetic and bandwidth minimum the preflight checks are the real job's."""
    settings = settings or PreflightSettings()
    out: list[dict[str, Any]] = []
    job = copy.deepcopy(dict(find_job(manifests)))
    meta = job["metadata"]
    real = meta["name"]
    name, cm_name = smoke_names(real)
    meta["name"] = name
    longest = _longest_pod_name(job)
    if len(longest) > 63:
        room = 63 - (len(longest) - len(real))
        raise InputError(f"the smoke test's pod name {longest!r} has {len(longest)} characters "
                         "(limit 63)", field="name",
                         hint=f"shorten name to at most {room} characters to run the smoke test")
    source = preflight_source()
    notes = {k: v for k, v in (meta.get("annotations") or {}).items()
             if k.startswith("runai-spec/")}
    notes[SMOKE_LABEL] = "preflight.py checklist in place of the training command"
    # a changed preflight.py is a different render of both objects: resubmit says so
    notes[PREFLIGHT_SHA_ANNOTATION] = hashlib.sha256(source.encode("utf-8")).hexdigest()
    meta.setdefault("labels", {})[SMOKE_LABEL] = "true"
    meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
    # the job's labels carry runai-spec's managed-by label: submit and delete treat the
    # ConfigMap as runai-spec's own, like the job
    configmap: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": meta.get("namespace"),
                     "labels": dict(meta["labels"]), "annotations": dict(notes)},
        "data": {"preflight.py": source},
    }
    if configmap["metadata"]["namespace"] is None:
        del configmap["metadata"]["namespace"]
    spec = job["spec"]
    run_policy = spec.setdefault("runPolicy", {})
    run_policy["backoffLimit"] = 0
    run_policy["activeDeadlineSeconds"] = deadline_s
    world = sum(n for _, n, _ in _replicas(job)) * _nproc_int(job)
    ckpt = settings.checkpoint_dir
    # pods of one job may start minutes apart in a cluster (image pulls): wait for them longer
    settings = PreflightSettings(**{**settings.__dict__,
                                    "join_timeout_s": max(settings.join_timeout_s, 600.0)})
    for rspec in spec["pytorchReplicaSpecs"].values():
        pod_spec = rspec["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c.get("name") == "pytorch")
        launcher = split_command(list(container.get("command") or [])
                                 + list(container.get("args") or []))
        pf_args = settings.args(
            world_size=world,
            checkpoint_dir=f"{ckpt.rstrip('/')}/.runai-spec-preflight" if ckpt else None,
            metrics_file="/tmp/runai-spec-preflight/metrics.jsonl")
        container["command"] = [*launcher.head, f"{SMOKE_MOUNT}/preflight.py", *pf_args]
        container.pop("args", None)
        container.setdefault("volumeMounts", []).append(
            {"name": SMOKE_VOLUME, "mountPath": SMOKE_MOUNT, "readOnly": True})
        pod_spec.setdefault("volumes", []).append(
            {"name": SMOKE_VOLUME, "configMap": {"name": cm_name}})
        rspec["restartPolicy"] = "Never"
    out.append(configmap)
    out.append(job)
    out.extend(copy.deepcopy(dict(m)) for m in manifests if m.get("kind") != "PyTorchJob")
    return out


def smoke_workload(workload: Workload, *, deadline_s: int = 1800) -> list[dict[str, Any]]:
    """`render --smoke`: the workload's smoke test, expecting what the real job declares."""
    try:
        return smoke_manifests(workload.manifests, preflight_settings(workload, in_cluster=True),
                               deadline_s=deadline_s)
    except InputError as exc:
        exc.file = exc.file or workload.path
        raise
