"""Commands that talk to the cluster: submit, status, logs, delete (and diff --live's part)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK, ClusterError, InputError, RunaiSpecError
from . import common
from .cluster_options import ClusterOptions, DeleteOptions, LogsOptions, StatusOptions, SubmitOptions
from .common import (
    TextJson,
    app,
    err,
    progress_line,
    stop_on_errors,
    watch_status,
    with_options,
)
from .via import delete_via, diff_via, status_via, submit_via

if TYPE_CHECKING:
    from .. import cluster
    from ..findings import Finding
    from ..outputs.diff import ProfileDiff
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest


def cluster_target(
    kubeconfig: Path | None, context: str | None, debug: bool, request_timeout: float | None = None
) -> cluster.Target:
    from .. import cluster

    if debug:
        cluster.enable_debug()
    target = cluster.Target(kubeconfig=kubeconfig, context=context, progress=progress_line)
    if request_timeout is not None:
        target = dataclasses.replace(
            target, timeout=(min(target.timeout[0], request_timeout), request_timeout)
        )
    return target


def cluster_session(o: ClusterOptions) -> cluster.Session:
    """The command's one session: its kubeconfig loaded once, for every request it sends."""
    from .. import cluster

    return cluster.Session(cluster_target(o.kubeconfig, o.context, o.debug, o.request_timeout))


def checked_workload(path: Path) -> Workload:
    """Render and check a profile; an error finding stops here, before any request."""
    from ..pipeline.workload import prepare_workload

    return stop_on_errors(prepare_workload(path), "sent")


def job_refs(job: str, project: str | None, smoke: bool = False) -> list[cluster.Ref]:
    """NAME|PROFILE -> the objects on the cluster (with smoke: the smoke job and its ConfigMap)."""
    from .. import cluster
    from ..pipeline.smoke import smoke_names
    from ..pipeline.stream import resolve_job

    name, namespace, workload = resolve_job(job, project)
    if smoke:
        smoke_job, configmap = smoke_names(name)
        return [cluster.job_ref(smoke_job, namespace), cluster.Ref(cluster.CONFIGMAP, namespace, configmap)]
    if workload is not None:
        return [cluster.ref_of(m) for m in workload.manifests]
    return [cluster.job_ref(name, namespace)]


def diff_live_all(
    profiles: Sequence[Path],
    kubeconfig: Path | None,
    context: str | None,
    debug: bool,
    request_timeout: float | None = None,
) -> tuple[list[ProfileDiff], list[RunaiSpecError | Finding], list[RunaiSpecError]]:
    """diff --live: (results, what stopped it, bad input); nothing is sent if any profile
    fails, and every checked workload is compared in one session."""
    from .. import cluster
    from ..outputs import diff as drift
    from ..pipeline.stream import prepare_all

    workloads, bad = prepare_all(profiles)
    stopped: list[RunaiSpecError | Finding] = [*bad, *(f for w in workloads for f in w.errors)]
    if stopped:
        return [], stopped, list(bad)
    if (runai := diff_via(workloads, debug, request_timeout)) is not None:  # issue 27
        return runai, [], []
    target = cluster_target(kubeconfig, context, debug, request_timeout)
    live = cluster.live_objects_all([w.manifests for w in workloads], target)
    for objects in live:
        err(
            f"note: {o.ref}: exists and was not created by runai-spec; submit will not touch it"
            for o in objects
            if o.live is not None and not cluster.managed_by_us(o.live)
        )
    return (
        [
            drift.diff_live(w.path, w.manifests, [(o.live, o.applied) for o in objects])
            for w, objects in zip(workloads, live, strict=True)
        ],
        [],
        [],
    )


@app.command()
@with_options
def submit(o: SubmitOptions) -> None:
    """Render, check and send a workload with server-side apply (re-submitting changes nothing);
    --smoke sends its smoke test instead (a ConfigMap with preflight.py and job <name>-smoke);
    --wait then polls until it is running or has ended."""
    if o.wait and o.dry_run is not None:
        raise InputError(
            "--wait goes without --dry-run (a dry run starts no job)", field="--wait", hint="drop one of them"
        )
    workload = checked_workload(o.profile)
    if submit_via(o, workload):  # issue 27: through Run:ai
        return
    with cluster_session(o) as session:
        live_checks(workload, session)
        manifests = smoke_manifests(workload) if o.smoke else list(workload.manifests)
        send(o.profile, manifests, session, dry_run=o.dry_run is not None, replace=o.replace, smoke=o.smoke)
        if o.wait:
            wait_until_running(o.profile, manifests, session, o.interval, o.watch_timeout)


def send(
    profile: Path,
    manifests: list[Manifest],
    session: cluster.Session,
    *,
    dry_run: bool,
    replace: bool,
    smoke: bool,
) -> None:
    """Server-side apply of the manifests, and what it did on stderr (a dry run's objects
    on stdout)."""
    from .. import cluster
    from ..outputs import report

    try:
        result = cluster.submit_manifests(manifests, session, dry_run=dry_run, replace=replace)
    except cluster.AdmissionDenied as exc:
        raise exc.for_file(str(profile)) from None
    err(report.submit_lines(result))
    if result.dry_run:
        sys.stdout.write(report.dry_run_text(result))
    elif smoke:
        err([report.smoke_note(str(profile))])


def wait_until_running(
    profile: Path, manifests: list[Manifest], session: cluster.Session, interval: float, watch_timeout: float
) -> None:
    """submit --wait: poll the job until it runs or ends; Failed is a cluster failure."""
    from .. import cluster
    from ..facts.kubeflow import KIND

    ref = next(cluster.ref_of(m) for m in manifests if m.get("kind") == KIND)
    if watch_job(ref, session, TextJson.text, True, interval, watch_timeout) == "Failed":
        raise ClusterError(
            f"{ref}: Failed (the status above says why)",
            file="cluster",
            hint=f"`runai-spec logs {profile} --out -` shows its logs",
        )


def live_checks(workload: Workload, session: cluster.Session) -> None:
    """`validate --live`'s checks (read-only); a live error finding stops before any write."""
    from ..cluster.checks import live_findings

    findings = live_findings(session, workload)
    err(line for finding in findings for line in finding.lines())
    if any(f.severity == "error" for f in findings):
        raise typer.Exit(EXIT_FINDINGS)


def smoke_manifests(workload: Workload) -> list[Manifest]:
    from ..pipeline.smoke import smoke_workload

    return smoke_workload(workload)


@app.command()
@with_options
def status(o: StatusOptions) -> None:
    """The job's phase, each pod's state and, when it is pending, why; --watch polls until it
    is running or has ended (exit 3 when it has not within --watch-timeout)."""
    status_via(o)  # issue 27: through Run:ai, it ends here (typer.Exit)
    ref = job_refs(o.job, o.project, o.smoke)[0]
    with cluster_session(o) as session:
        watch_job(ref, session, o.fmt, o.watch, o.interval, o.watch_timeout)


def watch_job(
    ref: cluster.Ref,
    session: cluster.Session,
    fmt: TextJson,
    watch: bool,
    interval: float,
    watch_timeout: float,
) -> str:
    """Print the job's status (again whenever it changes) until it is running or has ended,
    polling every interval seconds when watching; returns the phase it settled in (exit 3 when
    it has not within watch_timeout)."""
    from .. import cluster

    return watch_status(
        lambda: cluster.job_status(ref.name, ref.namespace, session),
        str(ref),
        "cluster",
        fmt,
        watch,
        interval,
        watch_timeout,
    )


@app.command()
@with_options
def logs(o: LogsOptions) -> None:
    """Save every rank's (pod's) log in its own file, so the logs outlive the pods; `--out -`
    prints them instead (one --pod, the last --tail N lines, --follow until the pods end), as
    kubectl logs does."""
    ref = checked_logs_ref(o)
    with cluster_session(o) as session:
        if o.follow:
            follow_job_logs(ref, session, o)
        elif str(o.out) == "-":
            print_job_logs(ref, session, o.previous, o.pod, o.tail)
        else:
            save_job_logs(ref, session, o.out, o.previous)


def checked_logs_ref(o: LogsOptions) -> cluster.Ref:
    """The job's reference, once the options are known to go together."""
    if o.follow and (str(o.out) != "-" or o.previous):
        raise InputError(
            "--follow goes with --out - and without --previous",
            field="--follow",
            hint="`runai-spec logs JOB --out - --follow` prints the logs as they grow",
        )
    ref = job_refs(o.job, o.project, o.smoke)[0]
    if str(o.out) != "-" and (o.pod is not None or o.tail is not None):
        raise InputError(
            "--pod and --tail go with --out - (printing to stdout)",
            field="--pod",
            hint="saving to a folder keeps every pod's whole log",
        )
    return ref


def print_job_logs(
    ref: cluster.Ref, session: cluster.Session, previous: bool, pod: str | None, tail: int | None
) -> None:
    """logs --out -: the logs on stdout; the pods without one on stderr, and exit 3 when no
    pod had one (as --out DIR does)."""
    from ..cluster.logs import NoLogs, print_logs

    try:
        skipped = print_logs(
            ref.name, ref.namespace, session, sys.stdout.buffer, previous=previous, pod=pod, tail=tail
        )
    except NoLogs as exc:
        err(f"skipped {line}" for line in exc.skipped)
        raise
    err(f"skipped {line}" for line in skipped)


def follow_job_logs(ref: cluster.Ref, session: cluster.Session, o: LogsOptions) -> None:
    """logs --out - --follow: print the logs as they grow, until every pod has ended."""
    from ..cluster.logs import Follow, follow_logs

    followed = follow_logs(
        ref.name,
        ref.namespace,
        session,
        sys.stdout.buffer,
        Follow(
            interval=o.interval, timeout=o.watch_timeout, sleep=common.watch_sleep, pod=o.pod, tail=o.tail
        ),
    )
    err(f"skipped {line}" for line in followed.skipped)
    if not followed.ended:
        what = (
            "has no pods yet"
            if not followed.pods
            else "its pods are still Pending"
            if followed.pending == followed.pods
            else f"{followed.pending} of its {followed.pods} pods are still Pending, the others still run"
            if followed.pending
            else "its pods still run"
        )
        raise ClusterError(
            f"{ref}: {what} after {followed.waited:g} s",
            file="cluster",
            hint="follow longer with --watch-timeout SECONDS",
        )


def save_job_logs(ref: cluster.Ref, session: cluster.Session, out: Path, previous: bool) -> None:
    """logs --out DIR: each pod's whole log, and each of its ranks' lines apart."""
    from .. import cluster
    from ..outputs import report

    result = cluster.save_logs(ref.name, ref.namespace, out, session, previous=previous)
    err(report.saved_log_lines(result))
    if not result.saved:
        raise ClusterError(
            f"{ref}: no pod had a log to save",
            file="cluster",
            hint="`runai-spec status` shows the pods' states",
        )


@app.command()
@with_options
def delete(o: DeleteOptions) -> int:
    """Delete a workload runai-spec created (asks first; its pods and their logs go too);
    --smoke deletes its smoke test, job and ConfigMap (either may already be gone). Declining
    the question deletes nothing and exits 0."""
    from .. import cluster

    delete_via(o)  # issue 27: Run:ai ends it
    refs = job_refs(o.job, o.project, smoke=o.smoke)
    ask = common.asks_first(o.yes)
    # the question comes after the cluster was read: it names what is there to delete
    with cluster_session(o) as session:
        result = cluster.delete_job(refs, session, missing_ok=o.smoke, confirm=confirmed if ask else None)
    if result.declined:
        err(["aborted: nothing deleted"])
        return EXIT_OK
    err(f"deleted: {ref}" for ref in result.deleted)
    err(f"already gone: {ref}" for ref in result.missing)
    return EXIT_OK


def confirmed(refs: list[cluster.Ref]) -> bool:
    return typer.confirm(
        f"delete {', '.join(map(str, refs))} and its pods (save logs first with `runai-spec logs`)?"
    )
