"""Commands that talk to the cluster: submit, status, logs, delete (and diff --live's part)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK, ClusterError, InputError, RunaiSpecError
from . import common
from .cluster_options import ClusterOptions, DeleteOptions, LogsOptions, StatusOptions, SubmitOptions
from .common import TextJson, app, err, progress_line, stop_on_errors, watch_status, with_options

if TYPE_CHECKING:
    from ..cluster.backend import Backend, Connection, Deleted, Job
    from ..findings import Finding
    from ..load.site import Site
    from ..outputs.diff import ProfileDiff
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest


def connection(
    site: Site | None,
    kubeconfig: Path | None,
    context: str | None,
    debug: bool,
    request_timeout: float | None = None,
    delete_wait: tuple[float, float] | None = None,
) -> Connection:
    """How this command reaches its back-end; retries and notes are said on stderr."""
    from ..cluster.backend import Connection

    return Connection(
        site, kubeconfig, context, debug, request_timeout, progress=progress_line, delete_wait=delete_wait
    )


def chosen_backend(o: ClusterOptions, site: Site | None = None) -> Backend:
    """The back-end of this call: --via, else site.yaml's submit.via (logs has no --via)."""
    from ..cluster.backend import open_backend
    from ..load.registry import PresetRegistry

    site = site if site is not None else PresetRegistry().site()  # the one every render uses
    via = None if isinstance(o, LogsOptions) else o.via
    wait = (o.watch_timeout, o.interval) if isinstance(o, DeleteOptions) and o.wait else None
    return open_backend(via, connection(site, o.kubeconfig, o.context, o.debug, o.request_timeout, wait))


def checked_workload(path: Path, wait_dry_run: bool = False) -> Workload:
    """Render and check a profile; an error finding stops here, before any request (as
    submit's --wait with --dry-run does before anything is rendered)."""
    from ..pipeline.workload import prepare_workload

    if wait_dry_run:
        raise InputError(
            "--wait goes without --dry-run (a dry run starts no job)", field="--wait", hint="drop one of them"
        )
    return stop_on_errors(prepare_workload(path), "sent")


def diff_live_all(
    profiles: Sequence[Path],
    kubeconfig: Path | None,
    context: str | None,
    debug: bool,
    request_timeout: float | None = None,
) -> tuple[list[ProfileDiff], list[RunaiSpecError | Finding], list[RunaiSpecError]]:
    """diff --live: (results, what stopped it, bad input); nothing is sent if any profile
    fails, and every checked workload is compared in one session of the site's back-end."""
    from ..cluster.backend import open_backend
    from ..load.registry import PresetRegistry
    from ..outputs import diff as drift
    from ..pipeline.stream import prepare_all

    workloads, bad = prepare_all(profiles)
    stopped: list[RunaiSpecError | Finding] = [*bad, *(f for w in workloads for f in w.errors)]
    if stopped:
        return [], stopped, list(bad)
    site = PresetRegistry().site()
    with open_backend(None, connection(site, kubeconfig, context, debug, request_timeout)) as backend:
        live = backend.live_diff(workloads)
    for one in live:
        err(one.foreign)
    return (
        [
            drift.diff_live(w.path, list(d.manifests), list(d.pairs))
            for w, d in zip(workloads, live, strict=True)
        ],
        [],
        [],
    )


@app.command()
@with_options
def submit(o: SubmitOptions) -> None:
    """Render, check and send a workload (re-submitting changes nothing): via kubernetes with
    server-side apply, via runai as a Run:ai workload (POST /api/v2/workloads); --smoke sends
    its smoke test instead (a ConfigMap with preflight.py and job <name>-smoke);
    --wait then polls until it is running or has ended."""
    workload = checked_workload(o.profile, o.wait and o.dry_run is not None)
    with chosen_backend(o, workload.site) as chosen:
        backend = chosen.smoke_backend(submitting=True) if o.smoke else chosen
        live_checks(workload, backend)
        manifests = smoke_manifests(workload) if o.smoke else list(workload.manifests)
        dry_run = o.dry_run is not None
        send(o.profile, workload, manifests, backend, dry_run=dry_run, replace=o.replace, smoke=o.smoke)
        if o.wait:
            wait_until_running(o.profile, workload, manifests, backend, o.interval, o.watch_timeout)


def send(
    profile: Path,
    workload: Workload,
    manifests: list[Manifest],
    backend: Backend,
    *,
    dry_run: bool,
    replace: bool,
    smoke: bool,
) -> None:
    """The manifests sent, and what it did on stderr (a dry run's objects on stdout)."""
    from ..cluster.backend import AdmissionDenied
    from ..outputs import report

    try:
        result = backend.submit(workload, manifests, dry_run=dry_run, replace=replace)
    except AdmissionDenied as exc:
        raise exc.for_file(str(profile)) from None
    err(report.submit_lines(result))
    if result.dry_run:
        sys.stdout.write(report.dry_run_text(result))
    elif smoke:
        err([report.smoke_note(str(profile))])


def wait_until_running(
    profile: Path,
    workload: Workload,
    manifests: list[Manifest],
    backend: Backend,
    interval: float,
    watch_timeout: float,
) -> None:
    """submit --wait: poll the job until it runs or ends; Failed is a cluster failure."""
    from ..cluster.backend import submitted_job

    job = submitted_job(workload, manifests)
    if watch_job(job, backend, TextJson.text, True, interval, watch_timeout) == "Failed":
        raise ClusterError(
            f"{backend.describe(job)}: Failed (the status above says why)",
            file=backend.error_file,
            hint=f"`runai-spec logs {profile} --out -` shows its logs",
        )


def live_checks(workload: Workload, backend: Backend) -> None:
    """`validate --live`'s checks (read-only); a live error finding stops before any write."""
    findings = backend.live_checks(workload)
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
    from ..cluster.backend import find_job

    chosen = chosen_backend(o)
    job = find_job(o.job, o.project, o.smoke)
    with chosen:
        backend = chosen.smoke_backend() if o.smoke else chosen
        watch_job(job, backend, o.fmt, o.watch, o.interval, o.watch_timeout)


def watch_job(
    job: Job, backend: Backend, fmt: TextJson, watch: bool, interval: float, watch_timeout: float
) -> str:
    """Print the job's status (again whenever it changes) until it is running or has ended,
    polling every interval seconds when watching; returns the phase it settled in (exit 3 when
    it has not within watch_timeout)."""
    return watch_status(
        lambda: backend.status(job),
        backend.describe(job),
        backend.error_file,
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
    job = checked_logs_job(o)
    with chosen_backend(o) as chosen:
        backend = chosen.smoke_backend() if o.smoke else chosen.logs_backend()
        if o.follow:
            follow_job_logs(job, backend, o)
        elif str(o.out) == "-":
            print_job_logs(job, backend, o.previous, o.pod, o.tail)
        else:
            save_job_logs(job, backend, o.out, o.previous)


def checked_logs_job(o: LogsOptions) -> Job:
    """The job, once the options are known to go together."""
    from ..cluster.backend import find_job

    if o.follow and (str(o.out) != "-" or o.previous):
        raise InputError(
            "--follow goes with --out - and without --previous",
            field="--follow",
            hint="`runai-spec logs JOB --out - --follow` prints the logs as they grow",
        )
    job = find_job(o.job, o.project, o.smoke)
    if str(o.out) != "-" and (o.pod is not None or o.tail is not None):
        raise InputError(
            "--pod and --tail go with --out - (printing to stdout)",
            field="--pod",
            hint="saving to a folder keeps every pod's whole log",
        )
    return job


def print_job_logs(job: Job, backend: Backend, previous: bool, pod: str | None, tail: int | None) -> None:
    """logs --out -: the logs on stdout; the pods without one on stderr, and exit 3 when no
    pod had one (as --out DIR does)."""
    from ..cluster.backend import NoLogs

    try:
        skipped = backend.print_logs(job, sys.stdout.buffer, previous, pod, tail)
    except NoLogs as exc:
        err(f"skipped {line}" for line in exc.skipped)
        raise
    err(f"skipped {line}" for line in skipped)


def follow_job_logs(job: Job, backend: Backend, o: LogsOptions) -> None:
    """logs --out - --follow: print the logs as they grow, until every pod has ended."""
    from ..cluster.backend import Follow

    followed = backend.follow_logs(
        job,
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
            f"{backend.describe(job)}: {what} after {followed.waited:g} s",
            file=backend.error_file,
            hint="follow longer with --watch-timeout SECONDS",
        )


def save_job_logs(job: Job, backend: Backend, out: Path, previous: bool) -> None:
    """logs --out DIR: each pod's whole log, and each of its ranks' lines apart."""
    from ..outputs import report

    result = backend.save_logs(job, out, previous)
    err(report.saved_log_lines(result))
    if not result.saved:
        raise ClusterError(
            f"{backend.describe(job)}: no pod had a log to save",
            file=backend.error_file,
            hint="`runai-spec status` shows the pods' states",
        )


@app.command()
@with_options
def delete(o: DeleteOptions) -> int:
    """Delete a workload runai-spec created (asks first; its pods and their logs go too);
    --smoke deletes its smoke test, job and ConfigMap (either may already be gone); --wait
    polls until it is gone (Run:ai keeps it in phase Deleting a while). Declining the question
    deletes nothing and exits 0."""
    from ..cluster.backend import find_job

    chosen = chosen_backend(o)
    job = find_job(o.job, o.project, smoke=o.smoke)
    ask = common.asks_first(o.yes)
    # the question comes after the cluster was read: it names what is there to delete
    with chosen:
        backend = chosen.smoke_backend() if o.smoke else chosen
        result = backend.delete(job, confirmed if ask else None)
    err(deleted_lines(result))
    return EXIT_OK


def deleted_lines(result: Deleted) -> list[str]:
    """What delete did, a line per object."""
    if result.declined:
        return ["aborted: nothing deleted"]
    return [
        *(f"deleted: {where}" for where in result.deleted),
        *(
            f"deleting: {where} (accepted, removed in the background: `delete --wait` waits until it is gone)"
            for where in result.deleting
        ),
        *(f"already gone: {where}" for where in result.missing),
    ]


def confirmed(objects: list[str]) -> bool:
    return typer.confirm(
        f"delete {', '.join(objects)} and its pods (save logs first with `runai-spec logs`)?"
    )
