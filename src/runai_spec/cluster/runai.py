"""Run:ai workloads: a render submitted, read and deleted through the Workloads V2 API (issues 27, 43)."""

# What the published API allows decides what each command does here (facts/runai_api.py names
# the documents): a dry run goes through Run:ai only where the cluster's version documents
# dryRun; an update (PUT) changes the manifest, priority and category and nothing else; a
# delete is accepted (202) and the workload stays in phase Deleting until it is gone; every
# phase maps to settle, fail or wait from one table.

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..errors import ClusterError
from ..facts.kubeflow import CONTAINER
from ..facts.runai_api import (
    DELETING,
    DRY_RUN_VERSIONS,
    FIXED_METADATA,
    PHASES,
    UPDATABLE_METADATA,
    documents_dry_run,
    outcome_of,
)
from ..render.manifests import Manifest
from .objects import managed_by_us, same_render
from .runai_api import (
    WORKLOADS_V1_PATH,
    WORKLOADS_V2_PATH,
    Found,
    Project,
    RunaiSession,
    RunaiTarget,
    cluster_version,
    find_project,
    find_workload,
    refused,
    resolve_cluster,
    runai_session_for,
)
from .session import Uncertain, clean
from .status import PodState, StatusResult
from .submit import ObjectOutcome, SubmitResult

PREEMPTIBLE, NON_PREEMPTIBLE = "preemptible", "non-preemptible"  # Preemptibility's enum
RECREATE_HINT = "`runai-spec delete PROFILE --wait --yes` (waits until it is gone), then submit again"


@dataclass(frozen=True)
class WorkloadMetadata:
    """What Run:ai schedules by, beside the manifest: from the plan and the preset."""

    name: str
    project: str
    priority: str
    preemptible: bool


@dataclass(frozen=True)
class Wait:
    """delete --wait: poll every INTERVAL seconds, at most TIMEOUT seconds in all."""

    timeout: float
    interval: float


# -- checks before anything is sent ------------------------------------------------------


def verify_dry_run(session: RunaiSession, cluster_id: str, what: str) -> None:
    """Refuse a dry run through Run:ai unless the cluster's version documents dryRun: one that
    ignores it would create the workload (facts.runai_api.DRY_RUN_VERSIONS)."""
    name, version = cluster_version(session, cluster_id)
    if documents_dry_run(version):
        return
    raise ClusterError(
        f"{what} through Run:ai: cluster {name} reports version {version or 'none'}, and Run:ai "
        f"documents dryRun on POST /api/v2/workloads for {' and '.join(DRY_RUN_VERSIONS)} only; "
        "a control plane that ignores it creates the workload, so nothing was sent",
        file="runai",
        hint="the Kubernetes path's dry run stores nothing (the API server's dryRun=All): "
        "`runai-spec submit PROFILE --dry-run server --via kubernetes`; "
        "`runai-spec render PROFILE` shows the manifests",
    )


def check_namespace(
    manifest: Manifest, project: str, found: Project, progress: Callable[[str], None] | None
) -> None:
    """The manifest's metadata.namespace against the project's namespace as Run:ai reports it
    (Project.status.namespace): a different one is refused; where Run:ai reports none, the
    render's is sent as it is, and said (Run:ai's docs do not say whether it is used)."""
    rendered = (manifest.get("metadata") or {}).get("namespace")
    if found.namespace is None:
        if progress is not None:
            progress(
                f"note: Run:ai reports no namespace for project {project}: the manifest's "
                f"namespace {clean(rendered, 80)} is sent as rendered"
            )
        return
    if rendered != found.namespace:
        raise ClusterError(
            f"runai workload {project}: the render's namespace {clean(rendered, 80)!r} is not the "
            f"namespace Run:ai runs project {project} in ({found.namespace!r})",
            file="runai",
            hint="site.yaml's namespace pattern must map the project to its Run:ai namespace: "
            "ask the AI Engineers",
        )


# -- submit -------------------------------------------------------------------------------


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
    update: manifest, priority, category). A dry run goes only where dryRun is documented."""
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project = find_project(session, meta.project, cluster_id)
        check_namespace(manifest, meta.project, project, session.target.progress)
        where = f"runai workload {meta.project}/{meta.name}"
        ref = f"{where} (project id {project.id}, cluster id {cluster_id})"
        metadata = _metadata(meta, project.id, cluster_id, session.target)
        found = find_workload(session, meta.name, project.id)
        if found is not None:
            return _existing(session, found, manifest, metadata, where, ref, dry_run, replace)
        return _create(session, manifest, metadata, project.id, where, ref, dry_run)


def _create(
    session: RunaiSession,
    manifest: Manifest,
    metadata: dict[str, Any],
    project_id: str,
    where: str,
    ref: str,
    dry_run: bool,
) -> SubmitResult:
    name = str(metadata["name"])
    if dry_run:  # the only request of a dry run that could store something
        verify_dry_run(session, str(metadata["clusterId"]), "submit --dry-run server")
    body = {"metadata": metadata, "manifest": manifest}
    query = [("dryRun", "true")] if dry_run else []
    try:
        status, data = session.call("POST", WORKLOADS_V2_PATH, query, body, write=not dry_run)
        retried = session.attempts > 1
    except Uncertain as exc:  # it may have been stored: read back, never post twice
        again = find_workload(session, name, project_id)
        if again is not None and again.raw is not None and same_render(manifest, again.raw):
            return SubmitResult((ObjectOutcome(ref, "created", manifest),), False)
        raise ClusterError(
            f"{where}: {exc}; not stored when read back right after, but it may still appear",
            file="runai",
            hint="`runai-spec status PROFILE` shows whether it did; "
            "submitting again is safe (an identical render is unchanged)",
        ) from None
    if status == 409 and not dry_run:
        # A create the control plane stored and answered 429/503 is retried and meets itself:
        # looked up by name and our annotations, it is ours (created), not a conflict.
        again = find_workload(session, name, project_id)
        if again is not None and again.raw is not None and same_render(manifest, again.raw):
            action = "created" if retried else "unchanged"
            return SubmitResult((ObjectOutcome(ref, action, again.raw),), False)
    if status not in (200, 201, 202):
        raise refused(status, data, where, "create")
    if dry_run:
        stored_anyway(session, name, project_id, where)
    action = "would create" if dry_run else "created"
    return SubmitResult((ObjectOutcome(ref, action, _raw(data, manifest)),), dry_run)


def stored_anyway(session: RunaiSession, name: str, project_id: str, where: str) -> None:
    """Defence in depth after a dryRun=true create: a control plane whose version documents
    dryRun and stored the workload all the same is said, never reported as a dry run."""
    if find_workload(session, name, project_id) is not None:
        raise ClusterError(
            f"{where}: the control plane stored the workload although the request said dryRun=true",
            file="runai",
            hint="delete it (`runai-spec delete PROFILE --yes`) and tell the Run:ai administrators",
        )


def _existing(
    session: RunaiSession,
    found: Found,
    manifest: Manifest,
    metadata: dict[str, Any],
    where: str,
    ref: str,
    dry_run: bool,
    replace: bool,
) -> SubmitResult:
    """A workload of that name exists: unchanged, refused, or updated as the PUT allows."""
    if found.raw is None or not managed_by_us(found.raw):
        raise ClusterError(
            f"{where}: exists and was not submitted by runai-spec; not touched",
            file="runai",
            hint="choose another `name` in the profile, or ask its owner to delete it",
        )
    if found.phase == DELETING:
        raise ClusterError(
            f"{where}: is being deleted (Run:ai phase {DELETING}); not submitted",
            file="runai",
            hint="submit again once it is gone: `runai-spec delete PROFILE --wait --yes` waits for that",
        )
    fixed = _changed(metadata, found.metadata, FIXED_METADATA)
    updatable = _changed(metadata, found.metadata, UPDATABLE_METADATA)
    if same_render(manifest, found.raw) and not updatable and not fixed:  # Run:ai may add defaults
        return SubmitResult((ObjectOutcome(ref, "unchanged", found.raw),), dry_run)
    if fixed:
        raise ClusterError(
            f"{where}: exists with {', '.join(fixed)}; Run:ai's update call changes only the "
            f"manifest, {' and '.join(UPDATABLE_METADATA)}",
            file="runai",
            hint=RECREATE_HINT,
        )
    if not replace:
        what = f"a different render{''.join(f', {c}' for c in updatable)}"
        raise ClusterError(
            f"{where}: exists with {what}",
            file="runai",
            hint="submit with --replace to update it with Run:ai's update call (the manifest, "
            "priority and category; its pods restart: save logs first)",
        )
    if dry_run:  # Run:ai documents no dry run of its update call
        return SubmitResult((ObjectOutcome(ref, "would replace", manifest),), True)
    return _update(session, found, manifest, metadata, where, ref)


def _changed(metadata: Mapping[str, Any], stored: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The KEYS this submit sends whose stored value (where Run:ai answered one) differs; a
    key it leaves to Run:ai's default (a null category) is no difference."""
    return [
        f"{k} {clean(stored[k], 40)} (this render: {clean(metadata[k], 40)})"
        for k in keys
        if k in metadata and stored.get(k) is not None and stored[k] != metadata[k]
    ]


def _update(
    session: RunaiSession,
    found: Found,
    manifest: Manifest,
    metadata: dict[str, Any],
    where: str,
    ref: str,
) -> SubmitResult:
    """PUT what the update call takes, then read it back: a manifest the control plane did
    not apply is said, never reported as replaced."""
    update = {"metadata": {k: metadata[k] for k in UPDATABLE_METADATA if k in metadata}, "manifest": manifest}
    path = f"{WORKLOADS_V2_PATH}/{quote(found.id, safe='')}"
    status, data = session.call("PUT", path, body=update, write=True)
    if status not in (200, 202):
        raise refused(status, data, where, "update")
    again = find_workload(session, str(metadata["name"]), str(metadata["projectId"]))
    if again is None or again.raw is None or not same_render(manifest, again.raw):
        raise ClusterError(
            f"{where}: Run:ai accepted the update (HTTP {status}) but does not hold this render "
            "when read back: the manifest was not applied",
            file="runai",
            hint=RECREATE_HINT,
        )
    return SubmitResult((ObjectOutcome(ref, "replaced", again.raw),), False)


def live_workloads(
    renders: Iterable[tuple[WorkloadMetadata, Manifest]], target: RunaiTarget
) -> list[tuple[Manifest | None, Manifest]]:
    """diff --live through Run:ai, one session: per render, (what Run:ai holds, None when
    absent; what submitting would store). An absent workload's is the answer of a
    `dryRun=true` create, asked only where the cluster's version documents dryRun; an
    existing one's is the render (the update call stores the manifest as sent), or what it
    holds when that is the same render (fields the control plane added are no change)."""
    out: list[tuple[Manifest | None, Manifest]] = []
    with RunaiSession(target) as session:
        cluster_id = resolve_cluster(session)
        projects: dict[str, Project] = {}
        verified = False
        for meta, manifest in renders:
            if meta.project not in projects:
                projects[meta.project] = find_project(session, meta.project, cluster_id)
            project = projects[meta.project]
            found = find_workload(session, meta.name, project.id)
            if found is not None:
                same = found.raw is not None and same_render(manifest, found.raw)
                out.append((found.raw, found.raw if same and found.raw else manifest))
                continue
            if not verified:
                verify_dry_run(session, cluster_id, "diff --live")
                verified = True
            body = {"metadata": _metadata(meta, project.id, cluster_id, target), "manifest": manifest}
            where = f"runai workload {meta.project}/{meta.name}"
            status, data = session.call("POST", WORKLOADS_V2_PATH, [("dryRun", "true")], body)
            if status not in (200, 201, 202):
                raise refused(status, data, where, "create")
            stored_anyway(session, meta.name, project.id, where)
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


# -- status -------------------------------------------------------------------------------


def workload_status(
    name: str, project: str, namespace: str, target: RunaiTarget | RunaiSession
) -> StatusResult:
    """The workload's phase as Run:ai reports it (what --watch does with it: PHASES), and its
    pods (GET .../pods)."""
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project_id = find_project(session, project, cluster_id).id
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
    phase = found.phase or "Unknown"
    outcome = outcome_of(phase)
    message = found.message or (PHASES[phase][1] if phase in PHASES and outcome != "settle" else None)
    reasons = (found.message,) if found.message and phase == "Pending" else ()
    settles = {"settle": _settled(phase), "fail": "Failed", "wait": ""}[outcome]
    return StatusResult(name, namespace, _settled(phase), message, tuple(pods), reasons, settles)


def _pod_state(pod: Manifest, job: str) -> PodState:
    """One pod as get_workload_pods reports it: the name (<job>-<role>-<index>, the
    operator's), k8sPhase, nodeName and the training container's startedAt (Container1).
    Run:ai reports no restart count: unknown, never 0."""
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
        None,
        clean(node, 120) if node else None,
        None,
    )


def _settled(phase: str) -> str:
    """Run:ai's Completed is the Kubernetes path's Succeeded."""
    return "Succeeded" if phase == "Completed" else phase


# -- delete -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeleteResult:
    """What delete did: gone (deleted and, with --wait, no longer listed), or still Deleting."""

    gone: tuple[str, ...] = ()
    deleting: tuple[str, ...] = ()


def delete_workload(
    name: str,
    project: str,
    target: RunaiTarget | RunaiSession,
    confirm: Callable[[list[str]], bool] | None = None,
    wait: Wait | None = None,
) -> DeleteResult | None:
    """DELETE the workload runai-spec submitted (checked first; one already Deleting is not
    asked again); None when confirm says no. Run:ai answers 202 and the workload stays in
    phase Deleting until it is gone: WAIT polls until then."""
    where = f"runai workload {project}/{name}"
    with runai_session_for(target) as session:
        cluster_id = resolve_cluster(session)
        project_id = find_project(session, project, cluster_id).id
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
        if found.phase != DELETING:
            if confirm is not None and not confirm([where]):
                return None
            if _send_delete(session, found, name, where, project_id):
                return DeleteResult(gone=(where,))
        if wait is None:
            return DeleteResult(deleting=(where,))
        _wait_gone(session, name, project_id, where, wait)
        return DeleteResult(gone=(where,))


def _send_delete(session: RunaiSession, found: Found, name: str, where: str, project_id: str) -> bool:
    """DELETE; True when the workload is already gone (a lost answer read back, or 404)."""
    try:
        status, data = session.call("DELETE", f"{WORKLOADS_V2_PATH}/{quote(found.id, safe='')}", write=True)
    except Uncertain:
        again = find_workload(session, name, project_id)
        if again is None:
            return True
        if again.phase == DELETING:
            return False
        raise ClusterError(
            f"{where}: the delete request got no answer and the workload is still there",
            file="runai",
            hint="run delete again",
        ) from None
    if status == 404:
        return True
    if status not in (200, 202, 204):
        raise refused(status, data, where, "delete")
    return False


def _wait_gone(session: RunaiSession, name: str, project_id: str, where: str, wait: Wait) -> None:
    """Poll the workload list until NAME is no longer there (bounded by wait.timeout)."""
    waited = 0.0
    while True:
        found = find_workload(session, name, project_id)
        if found is None:
            return
        if waited + wait.interval > wait.timeout:
            raise ClusterError(
                f"{where}: still {found.phase or 'listed'} after {waited:g} s",
                file="runai",
                hint="wait longer with --watch-timeout SECONDS; `runai-spec status` shows its phase",
            )
        session.target.sleep(wait.interval)
        waited += wait.interval


__all__ = [
    "DeleteResult",
    "Wait",
    "WorkloadMetadata",
    "delete_workload",
    "live_workloads",
    "submit_workload",
    "workload_status",
]
