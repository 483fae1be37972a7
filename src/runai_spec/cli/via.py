"""--via: submit, status and delete through the Kubernetes API or Run:ai's Workloads V2 API.

site.yaml's `submit.via` chooses, a command's --via overrides it; this module holds the Run:ai path."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import EXIT_OK, ClusterError, InputError
from . import common
from .cluster_options import Via
from .common import TextJson, err, progress_line

if TYPE_CHECKING:
    from ..cluster.runai import WorkloadMetadata
    from ..cluster.runai_api import RunaiSession, RunaiTarget
    from ..load.site import Site
    from ..outputs.diff import ProfileDiff
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest
    from .cluster_options import DeleteOptions, StatusOptions, SubmitOptions


def chosen(site: Site, via: Via | None) -> Via:
    """The path of this call: --via, else the site's; `runai` needs the site's control plane."""
    path = Via(via or site.submit.via)
    if path is Via.runai and site.submit.runai is None:
        raise InputError(
            "--via runai needs the site's Run:ai control plane",
            field="--via",
            hint="the AI Engineers set submit.runai (url, cluster) in site.yaml; "
            "until then submit with --via kubernetes",
        )
    return path


def runai_target(site: Site, debug: bool, request_timeout: float | None) -> RunaiTarget:
    from .. import cluster
    from ..cluster.runai_api import RunaiTarget

    if debug:
        cluster.enable_debug()
    plane = site.submit.runai
    assert plane is not None  # chosen() checked it
    target = RunaiTarget(
        url=plane.url, cluster=plane.cluster, category=plane.category, progress=progress_line
    )
    if request_timeout is not None:
        target = dataclasses.replace(
            target, timeout=(min(target.timeout[0], request_timeout), request_timeout)
        )
    return target


def runai_session(site: Site, debug: bool, request_timeout: float | None) -> RunaiSession:
    """The command's one session with the control plane: one token for all its requests."""
    from ..cluster.runai_api import RunaiSession

    return RunaiSession(runai_target(site, debug, request_timeout))


def metadata_of(workload: Workload) -> WorkloadMetadata:
    """What Run:ai schedules the workload by: its name and project, the preset's priority."""
    from ..cluster.runai import WorkloadMetadata

    preset = workload.approved.preset
    return WorkloadMetadata(
        name=workload.plan.name,
        project=workload.plan.project,
        priority=preset.priority,
        preemptible=preset.preemptible,
    )


def job_of(workload: Workload) -> Manifest:
    from ..facts.kubeflow import KIND

    (job,) = [dict(m) for m in workload.manifests if m.get("kind") == KIND]
    return job


def diff_via(
    workloads: list[Workload], debug: bool, request_timeout: float | None
) -> list[ProfileDiff] | None:
    """diff --live's dispatch: through Run:ai when site.yaml's submit.via says so (the
    workloads as Run:ai holds them, against what submitting would store), else None."""
    from ..cluster.runai import live_workloads
    from ..load.registry import PresetRegistry
    from ..outputs import diff as drift

    site = PresetRegistry().site()
    if not workloads or chosen(site, None) is not Via.runai:
        return None
    from ..cluster import managed_by_us

    pairs = live_workloads(
        [(metadata_of(w), job_of(w)) for w in workloads], runai_target(site, debug, request_timeout)
    )
    err(
        f"note: runai workload {w.plan.project}/{w.plan.name}: exists and was not submitted by "
        "runai-spec; submit will not touch it"
        for w, (live, _) in zip(workloads, pairs, strict=True)
        if live is not None and not managed_by_us(live)
    )
    return [drift.diff_live(w.path, [job_of(w)], [pair]) for w, pair in zip(workloads, pairs, strict=True)]


def submit_runai(
    profile: Path, workload: Workload, session: RunaiSession, *, dry_run: bool, replace: bool
) -> None:
    """submit --via runai: the rendered PyTorchJob, unchanged, as a Run:ai workload."""
    from ..cluster.runai import submit_workload
    from ..outputs import report

    result = submit_workload(
        job_of(workload), metadata_of(workload), session, dry_run=dry_run, replace=replace
    )
    err(report.submit_lines(result))
    if result.dry_run:
        sys.stdout.write(report.dry_run_text(result))


def submit_via(o: SubmitOptions, workload: Workload) -> bool:
    """submit's dispatch: True when it went through Run:ai (False: the Kubernetes path's
    turn). The smoke test (a ConfigMap and a job) always takes the Kubernetes path."""
    if chosen(workload.site, o.via) is not Via.runai:
        return False
    if o.smoke:
        err(
            [
                "note: the smoke test goes through the Kubernetes client (its ConfigMap is no "
                "Run:ai workload); the workload itself goes through Run:ai"
            ]
        )
        return False
    with runai_session(workload.site, o.debug, o.request_timeout) as session:
        submit_runai(o.profile, workload, session, dry_run=o.dry_run is not None, replace=o.replace)
        phase = (
            watch_runai(
                workload.plan.name,
                workload.plan.project,
                workload.plan.namespace,
                session,
                TextJson.text,
                True,
                o.interval,
                o.watch_timeout,
            )
            if o.wait
            else None
        )
    if phase == "Failed":
        raise ClusterError(
            f"runai workload {workload.plan.project}/{workload.plan.name}: "
            "Failed (the status above says why)",
            file="runai",
            hint=f"`runai-spec logs {o.profile} --out -` shows its logs",
        )
    return True


def resolved(
    job: str, project: str | None, via: Via | None, smoke: bool
) -> tuple[str, str, str, Site] | None:
    """status/delete's dispatch: (name, project, namespace, site) when this call goes through
    Run:ai, None for the Kubernetes path (always for --smoke)."""
    from ..load.registry import PresetRegistry
    from ..pipeline.stream import resolve_job

    site = PresetRegistry().site()  # the one every workload's render uses too
    if smoke or chosen(site, via) is not Via.runai:
        return None
    name, namespace, workload = resolve_job(job, project)
    return name, (workload.plan.project if workload is not None else str(project)), namespace, site


def status_via(o: StatusOptions) -> None:
    """status's dispatch: through Run:ai, the command ends here (typer.Exit)."""
    found = resolved(o.job, o.project, o.via, o.smoke)
    if found is None:
        return
    name, runai_project, namespace, site = found
    with runai_session(site, o.debug, o.request_timeout) as session:
        watch_runai(name, runai_project, namespace, session, o.fmt, o.watch, o.interval, o.watch_timeout)
    raise typer.Exit(EXIT_OK)


def delete_via(o: DeleteOptions) -> None:
    """delete's dispatch: through Run:ai, the command ends here (typer.Exit)."""
    found = resolved(o.job, o.project, o.via, o.smoke)
    if found is None:
        return
    name, runai_project, _, site = found
    raise typer.Exit(delete_runai(name, runai_project, runai_target(site, o.debug, o.request_timeout), o.yes))


def watch_runai(
    name: str,
    project: str,
    namespace: str,
    session: RunaiSession,
    fmt: TextJson,
    watch: bool,
    interval: float,
    watch_timeout: float,
) -> str:
    """status --via runai (and submit --wait): the phase Run:ai reports, polled as the
    Kubernetes path's status --watch polls."""
    from ..cluster.runai import workload_status
    from .common import watch_status

    return watch_status(
        lambda: workload_status(name, project, namespace, session),
        f"runai workload {project}/{name}",
        "runai",
        fmt,
        watch,
        interval,
        watch_timeout,
    )


def delete_runai(name: str, project: str, target: RunaiTarget, yes: bool) -> int:
    """delete --via runai: the workload runai-spec submitted (asks first)."""
    from ..cluster.runai import delete_workload

    ask = common.asks_first(yes)
    deleted = delete_workload(name, project, target, confirm=_confirmed if ask else None)
    if not deleted:
        err(["aborted: nothing deleted"])
        return EXIT_OK
    err(f"deleted: {where}" for where in deleted)
    return EXIT_OK


def _confirmed(where: list[str]) -> bool:
    return typer.confirm(f"delete {', '.join(where)} and its pods (save logs first with `runai-spec logs`)?")
