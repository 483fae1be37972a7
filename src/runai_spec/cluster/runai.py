"""Run:ai workloads: a render submitted, read and deleted through the Workloads V2 API (issue 27)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..errors import ClusterError
from ..facts.kubeflow import CONTAINER
from ..render.manifests import Manifest
from .objects import managed_by_us, same_render
from .runai_api import (
    WORKLOADS_V1_PATH,
    WORKLOADS_V2_PATH,
    RunaiSession,
    RunaiTarget,
    find_workload,
    refused,
    resolve_cluster,
    resolve_project,
    runai_session_for,
)
from .session import Uncertain, clean
from .status import PodState, StatusResult
from .submit import ObjectOutcome, SubmitResult

PREEMPTIBLE, NON_PREEMPTIBLE = "preemptible", "non-preemptible"  # Preemptibility's enum


# -- names to ids ------------------------------------------------------------------------


# -- submit, status, delete ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadMetadata:
    """What Run:ai schedules by, beside the manifest: from the plan and the preset."""

    name: str
    project: str
    priority: str
    preemptible: bool


def submit_workload(
    manifest: Manifest,
    meta: WorkloadMetadata,
    target: RunaiTarget | RunaiSession,
    *,
    dry_run: bool = False,
    replace: bool = False,
) -> SubmitResult:
    """POST the rendered manifest, unchanged, with its metadata; an identical earlier submit
    is `unchanged`, a different one is refused without --replace (then PUT, the documented
    update). A dry run (`dryRun=true`) stores nothing."""
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project_id = resolve_project(session, meta.project, cluster_id)
        where = f"runai workload {meta.project}/{meta.name}"
        ref = f"{where} (project id {project_id}, cluster id {cluster_id})"
        found = find_workload(session, meta.name, project_id)
        metadata = _metadata(meta, project_id, cluster_id, session.target)
        if found is not None:
            if found.raw is None or not managed_by_us(found.raw):
                raise ClusterError(
                    f"{where}: exists and was not submitted by runai-spec; not touched",
                    file="runai",
                    hint="choose another `name` in the profile, or ask its owner to delete it",
                )
            if same_render(manifest, found.raw):  # Run:ai may add defaults to what it stores
                return SubmitResult((ObjectOutcome(ref, "unchanged", found.raw),), dry_run)
            if not replace:
                raise ClusterError(
                    f"{where}: exists with a different render",
                    file="runai",
                    hint="submit with --replace to update it (Run:ai's update "
                    "call restarts its pods: save logs first)",
                )
            if dry_run:  # Run:ai documents no dry run of its update call
                return SubmitResult((ObjectOutcome(ref, "would replace", manifest),), True)
            update = {
                "metadata": {k: metadata[k] for k in ("priority", "category") if k in metadata},
                "manifest": manifest,
            }
            status, data = session.call(
                "PUT", f"{WORKLOADS_V2_PATH}/{quote(found.id, safe='')}", body=update, write=True
            )
            if status not in (200, 202):
                raise refused(status, data, where, "update")
            return SubmitResult((ObjectOutcome(ref, "replaced", _raw(data, manifest)),), False)
        body = {"metadata": metadata, "manifest": manifest}
        query = [("dryRun", "true")] if dry_run else []
        try:
            status, data = session.call("POST", WORKLOADS_V2_PATH, query, body, write=not dry_run)
        except Uncertain as exc:  # it may have been stored: read back, never post twice
            again = find_workload(session, meta.name, project_id)
            if again is not None and again.raw is not None and same_render(manifest, again.raw):
                return SubmitResult((ObjectOutcome(ref, "created", manifest),), False)
            raise ClusterError(
                f"{where}: {exc}; not stored when read back right after, but it may still appear",
                file="runai",
                hint="`runai-spec status PROFILE` shows whether it did; "
                "submitting again is safe (an identical render is unchanged)",
            ) from None
        if status not in (200, 201, 202):
            raise refused(status, data, where, "create")
        action = "would create" if dry_run else "created"
        return SubmitResult((ObjectOutcome(ref, action, _raw(data, manifest)),), dry_run)


def live_workloads(
    renders: Iterable[tuple[WorkloadMetadata, Manifest]], target: RunaiTarget
) -> list[tuple[Manifest | None, Manifest]]:
    """diff --live through Run:ai, one session: per render, (what Run:ai holds, None when
    absent; what submitting would store). An absent workload's is the answer of a
    `dryRun=true` create (stores nothing); an existing one's is the render (Run:ai documents
    no dry run of its update call, which stores the manifest as sent), or what it holds when
    that is the same render (fields the control plane added are no change)."""
    out: list[tuple[Manifest | None, Manifest]] = []
    with RunaiSession(target) as session:
        cluster_id = resolve_cluster(session)
        projects: dict[str, str] = {}
        for meta, manifest in renders:
            if meta.project not in projects:
                projects[meta.project] = resolve_project(session, meta.project, cluster_id)
            project_id = projects[meta.project]
            found = find_workload(session, meta.name, project_id)
            if found is not None:
                same = found.raw is not None and same_render(manifest, found.raw)
                out.append((found.raw, found.raw if same and found.raw else manifest))
                continue
            body = {"metadata": _metadata(meta, project_id, cluster_id, target), "manifest": manifest}
            status, data = session.call("POST", WORKLOADS_V2_PATH, [("dryRun", "true")], body)
            if status not in (200, 201, 202):
                raise refused(status, data, f"runai workload {meta.project}/{meta.name}", "create")
            out.append((None, _raw(data, manifest)))
    return out


def _metadata(
    meta: WorkloadMetadata, project_id: str, cluster_id: str, target: RunaiTarget
) -> dict[str, Any]:
    """WorkloadV2MetadataCreateParams for this workload."""
    metadata: dict[str, Any] = {
        "name": meta.name,
        "projectId": project_id,
        "clusterId": cluster_id,
        "priority": meta.priority,
        "preemptibility": PREEMPTIBLE if meta.preemptible else NON_PREEMPTIBLE,
    }
    if target.category:
        metadata["category"] = target.category
    return metadata


def _raw(data: Any, sent: Manifest) -> Manifest:
    raw = data.get("rawManifest") if isinstance(data, dict) else None
    return raw if isinstance(raw, dict) else sent


def workload_status(
    name: str, project: str, namespace: str, target: RunaiTarget | RunaiSession
) -> StatusResult:
    """The workload's phase as Run:ai reports it, and its pods (GET .../pods)."""
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project_id = resolve_project(session, project, cluster_id)
        found = find_workload(session, name, project_id)
        if found is None:
            raise ClusterError(
                f"runai workload {project}/{name}: not found",
                file="runai",
                hint="check the name and the project; `runai workload list` lists what is there",
            )
        status, data = session.call("GET", f"{WORKLOADS_V1_PATH}/{quote(found.id, safe='')}/pods")
        if status != 200:
            raise refused(status, data, f"runai workload {project}/{name}", "read")
        pods = [
            _pod_state(pod, name)
            for pod in (data.get("pods") if isinstance(data, dict) else None) or []
            if isinstance(pod, dict)
        ]
    reasons = (found.message,) if found.message and found.phase == "Pending" else ()
    return StatusResult(
        name, namespace, _settled(found.phase or "Unknown"), found.message, tuple(pods), reasons
    )


def _pod_state(pod: Manifest, job: str) -> PodState:
    """One pod as get_workload_pods reports it: the name (<job>-<role>-<index>, the
    operator's), k8sPhase, nodeName and the training container's startedAt (Container1);
    Run:ai reports no restart count."""
    name = clean(pod.get("name"), 120)
    role, _, index = name.removeprefix(f"{job}-").rpartition("-")
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    mine = next((c for c in containers if c.get("name") == CONTAINER), {})
    started = mine.get("startedAt")
    node = pod.get("nodeName")
    return PodState(
        name,
        clean(role.capitalize() or "?", 40),
        int(index) if index.isdigit() else 0,
        clean(pod.get("k8sPhase") or "Pending", 40),
        f"started {clean(started, 40)}" if started else "not started",
        0,
        clean(node, 120) if node else None,
        None,
    )


def _settled(phase: str) -> str:
    """Run:ai's Completed is the Kubernetes path's Succeeded (what --watch settles on)."""
    return "Succeeded" if phase == "Completed" else phase


def delete_workload(
    name: str,
    project: str,
    target: RunaiTarget | RunaiSession,
    confirm: Callable[[list[str]], bool] | None = None,
) -> tuple[str, ...]:
    """DELETE the workload runai-spec submitted (checked first); () when confirm says no."""
    where = f"runai workload {project}/{name}"
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project_id = resolve_project(session, project, cluster_id)
        found = find_workload(session, name, project_id)
        if found is None:
            raise ClusterError(
                f"{where}: not found",
                file="runai",
                hint="check the name and the project; nothing was deleted",
            )
        if found.raw is None or not managed_by_us(found.raw):
            raise ClusterError(
                f"{where}: was not submitted by runai-spec; not touched",
                file="runai",
                hint="delete it with the tool that created it",
            )
        if confirm is not None and not confirm([where]):
            return ()
        try:
            status, data = session.call(
                "DELETE", f"{WORKLOADS_V2_PATH}/{quote(found.id, safe='')}", write=True
            )
        except Uncertain:
            if find_workload(session, name, project_id) is None:
                return (where,)
            raise ClusterError(
                f"{where}: the delete request got no answer and the workload is still there",
                file="runai",
                hint="run delete again",
            ) from None
        if status not in (200, 202, 204, 404):
            raise refused(status, data, where, "delete")
    return (where,)


__all__ = ["WorkloadMetadata", "delete_workload", "live_workloads", "submit_workload", "workload_status"]
