"""Commands that talk to the cluster: submit, status, logs, delete (and diff --live's part)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK, ClusterError, InputError, RunaiSpecError
from . import common
from .common import (
    ContextOpt,
    DebugOpt,
    KubeconfigOpt,
    RequestTimeoutOpt,
    TextJson,
    TextJsonOpt,
    app,
    err,
    progress_line,
    stop_on_errors,
    watch_status,
)
from .via import ViaOpt, delete_via, diff_via, status_via, submit_via

if TYPE_CHECKING:
    from .. import cluster
    from ..findings import Finding
    from ..outputs.diff import ProfileDiff
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest

JobArg = Annotated[str, typer.Argument(help="Workload name, or its profile file.", show_default=False)]
ProjectOpt = Annotated[str | None, typer.Option(
    "--project", "-p", help="Run:ai project of a workload NAME: the site file maps it to the "
    "namespace (`-p` as in Run:ai's own CLI).")]
SmokeOpt = Annotated[bool, typer.Option("--smoke", help="The workload's in-cluster smoke test "
                                        "(`render --smoke`): job <name>-smoke and its ConfigMap.")]


class DryRun(StrEnum):
    server = "server"
    client = "client"  # kubectl's spelling: refused with a pointer to `render`


def no_client_dry_run(value: DryRun | None) -> DryRun | None:
    """`--dry-run=client` (kubectl's habit) is what `render` does: say so instead of a bare
    "not one of"."""
    if value is DryRun.client:
        raise InputError("a client-side dry run is `runai-spec render`: it prints exactly what "
                         "submit would send, and needs no cluster", field="--dry-run",
                         hint="`runai-spec render PROFILE`; `--dry-run server` has the API "
                         "server check it and show what it would store")
    return value


def cluster_target(kubeconfig: Path | None, context: str | None, debug: bool,
                   request_timeout: float | None = None) -> cluster.Target:
    from .. import cluster

    if debug:
        cluster.enable_debug()
    target = cluster.Target(kubeconfig=kubeconfig, context=context, progress=progress_line)
    if request_timeout is not None:
        target = dataclasses.replace(target, timeout=(min(target.timeout[0], request_timeout),
                                                      request_timeout))
    return target


def cluster_session(kubeconfig: Path | None, context: str | None, debug: bool,
                    request_timeout: float | None) -> cluster.Session:
    """The command's one session: its kubeconfig loaded once, for every request it sends."""
    from .. import cluster

    return cluster.Session(cluster_target(kubeconfig, context, debug, request_timeout))


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
        return [cluster.job_ref(smoke_job, namespace),
                cluster.Ref(cluster.CONFIGMAP, namespace, configmap)]
    if workload is not None:
        return [cluster.ref_of(m) for m in workload.manifests]
    return [cluster.job_ref(name, namespace)]


def diff_live_all(profiles: Sequence[Path], kubeconfig: Path | None, context: str | None, debug: bool,
                  request_timeout: float | None = None
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
        err(f"note: {o.ref}: exists and was not created by runai-spec; submit will not touch it"
            for o in objects if o.live is not None and not cluster.managed_by_us(o.live))
    return [drift.diff_live(w.path, w.manifests, [(o.live, o.applied) for o in objects])
            for w, objects in zip(workloads, live, strict=True)], [], []


WatchOpt = Annotated[bool, typer.Option("--watch", "-w", help="Poll until the job is running or "
                                        "has ended, at most --watch-timeout seconds.")]
IntervalOpt = Annotated[float, typer.Option("--interval", metavar="SECONDS", min=0.1,
                                            help="Seconds between polls with --watch.")]
WatchTimeoutOpt = Annotated[float, typer.Option("--watch-timeout", metavar="SECONDS", min=0,
                                                help="How long --watch polls before it gives up.")]


DryRunOpt = Annotated[DryRun | None, typer.Option(
    "--dry-run", callback=no_client_dry_run, help="`server`: the API server checks it and shows "
    "what it would store (`client`: use `runai-spec render`).")]
ReplaceOpt = Annotated[bool, typer.Option("--replace", help="Delete a different earlier render of "
                                          "the same name and create this one.")]


WaitOpt = Annotated[bool, typer.Option("--wait", help="After sending, poll (as `status --watch`) "
                                       "until the job is running or has ended: exit 3 when it "
                                       "failed or is not running within --watch-timeout.")]


@app.command()
def submit(profile: Annotated[Path, typer.Argument(help="Profile file.", show_default=False)],
           dry_run: DryRunOpt = None, replace: ReplaceOpt = False, smoke: SmokeOpt = False,
           wait: WaitOpt = False, interval: IntervalOpt = 5.0,
           watch_timeout: WatchTimeoutOpt = 600.0, kubeconfig: KubeconfigOpt = None,
           context: ContextOpt = None, request_timeout: RequestTimeoutOpt = None,
           debug: DebugOpt = False, via: ViaOpt = None) -> None:
    """Render, check and send a workload with server-side apply (re-submitting changes nothing);
    --smoke sends its smoke test instead (a ConfigMap with preflight.py and job <name>-smoke);
    --wait then polls until it is running or has ended."""
    if wait and dry_run is not None:
        raise InputError("--wait goes without --dry-run (a dry run starts no job)", field="--wait",
                         hint="drop one of them")
    workload = checked_workload(profile)
    if submit_via(profile, workload, via, dry_run=dry_run is not None, replace=replace,
                  smoke=smoke, wait=wait, interval=interval, watch_timeout=watch_timeout,
                  debug=debug, request_timeout=request_timeout):  # issue 27: through Run:ai
        return
    with cluster_session(kubeconfig, context, debug, request_timeout) as session:
        live_checks(workload, session)
        manifests = smoke_manifests(workload) if smoke else list(workload.manifests)
        send(profile, manifests, session, dry_run=dry_run is not None, replace=replace,
             smoke=smoke)
        if wait:
            wait_until_running(profile, manifests, session, interval, watch_timeout)


def send(profile: Path, manifests: list[Manifest], session: cluster.Session, *, dry_run: bool,
         replace: bool, smoke: bool) -> None:
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


def wait_until_running(profile: Path, manifests: list[Manifest], session: cluster.Session,
                       interval: float, watch_timeout: float) -> None:
    """submit --wait: poll the job until it runs or ends; Failed is a cluster failure."""
    from .. import cluster
    from ..facts.kubeflow import KIND

    ref = next(cluster.ref_of(m) for m in manifests if m.get("kind") == KIND)
    if watch_job(ref, session, TextJson.text, True, interval, watch_timeout) == "Failed":
        raise ClusterError(f"{ref}: Failed (the status above says why)", file="cluster",
                           hint=f"`runai-spec logs {profile} --out -` shows its logs")


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
def status(job: JobArg, project: ProjectOpt = None, fmt: TextJsonOpt = TextJson.text,
           smoke: SmokeOpt = False, watch: WatchOpt = False, interval: IntervalOpt = 5.0,
           watch_timeout: WatchTimeoutOpt = 600.0, kubeconfig: KubeconfigOpt = None,
           context: ContextOpt = None, request_timeout: RequestTimeoutOpt = None,
           debug: DebugOpt = False, via: ViaOpt = None) -> None:
    """The job's phase, each pod's state and, when it is pending, why; --watch polls until it
    is running or has ended (exit 3 when it has not within --watch-timeout)."""
    status_via(job, project, via, smoke, fmt, watch, interval, watch_timeout, debug,
               request_timeout)  # issue 27: through Run:ai, it ends here (typer.Exit)
    ref = job_refs(job, project, smoke)[0]
    with cluster_session(kubeconfig, context, debug, request_timeout) as session:
        watch_job(ref, session, fmt, watch, interval, watch_timeout)


def watch_job(ref: cluster.Ref, session: cluster.Session, fmt: TextJson, watch: bool,
              interval: float, watch_timeout: float) -> str:
    """Print the job's status (again whenever it changes) until it is running or has ended,
    polling every interval seconds when watching; returns the phase it settled in (exit 3 when
    it has not within watch_timeout)."""
    from .. import cluster

    return watch_status(lambda: cluster.job_status(ref.name, ref.namespace, session), str(ref),
                        "cluster", fmt, watch, interval, watch_timeout)


LogsOut = Annotated[Path, typer.Option("--out", "-o", help="Folder for one <pod>.log per rank; "
                                       "`-` prints the logs to stdout instead.",
                                       show_default=False)]
PodOpt = Annotated[str | None, typer.Option("--pod", help="Only this pod's log (with --out -).")]
TailOpt = Annotated[int | None, typer.Option("--tail", min=0, help="Only the last N lines of "
                                             "each log (with --out -).")]
FollowOpt = Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new log lines "
                                         "(with --out -) until the pods have ended, at most "
                                         "--watch-timeout seconds, polling every --interval.")]
PreviousOpt = Annotated[bool, typer.Option("--previous", help="The restarted containers' "
                                           "earlier logs.")]


@app.command()
def logs(job: JobArg, out: LogsOut, previous: PreviousOpt = False, project: ProjectOpt = None,
         smoke: SmokeOpt = False, pod: PodOpt = None, tail: TailOpt = None,
         follow: FollowOpt = False, interval: IntervalOpt = 5.0,
         watch_timeout: WatchTimeoutOpt = 600.0, kubeconfig: KubeconfigOpt = None,
         context: ContextOpt = None, request_timeout: RequestTimeoutOpt = None,
         debug: DebugOpt = False) -> None:
    """Save every rank's (pod's) log in its own file, so the logs outlive the pods; `--out -`
    prints them instead (one --pod, the last --tail N lines, --follow until the pods end), as
    kubectl logs does."""
    if follow and (str(out) != "-" or previous):
        raise InputError("--follow goes with --out - and without --previous", field="--follow",
                         hint="`runai-spec logs JOB --out - --follow` prints the logs as they grow")
    ref = job_refs(job, project, smoke)[0]
    if str(out) != "-" and (pod is not None or tail is not None):
        raise InputError("--pod and --tail go with --out - (printing to stdout)", field="--pod",
                         hint="saving to a folder keeps every pod's whole log")
    with cluster_session(kubeconfig, context, debug, request_timeout) as session:
        if follow:
            follow_job_logs(ref, session, pod, tail, interval, watch_timeout)
        elif str(out) == "-":
            print_job_logs(ref, session, previous, pod, tail)
        else:
            save_job_logs(ref, session, out, previous)


def print_job_logs(ref: cluster.Ref, session: cluster.Session, previous: bool, pod: str | None,
                   tail: int | None) -> None:
    """logs --out -: the logs on stdout; the pods without one on stderr, and exit 3 when no
    pod had one (as --out DIR does)."""
    from ..cluster.logs import NoLogs, print_logs

    try:
        skipped = print_logs(ref.name, ref.namespace, session, sys.stdout.buffer,
                             previous=previous, pod=pod, tail=tail)
    except NoLogs as exc:
        err(f"skipped {line}" for line in exc.skipped)
        raise
    err(f"skipped {line}" for line in skipped)


def follow_job_logs(ref: cluster.Ref, session: cluster.Session, pod: str | None, tail: int | None,
                    interval: float, watch_timeout: float) -> None:
    """logs --out - --follow: print the logs as they grow, until every pod has ended."""
    from ..cluster.logs import follow_logs

    followed = follow_logs(ref.name, ref.namespace, session, sys.stdout.buffer, sleep=common.watch_sleep,
                           interval=interval, timeout=watch_timeout, pod=pod, tail=tail)
    err(f"skipped {line}" for line in followed.skipped)
    if not followed.ended:
        what = ("has no pods yet" if not followed.pods else
                "its pods are still Pending" if followed.pending == followed.pods else
                f"{followed.pending} of its {followed.pods} pods are still Pending, the others "
                "still run" if followed.pending else "its pods still run")
        raise ClusterError(f"{ref}: {what} after {followed.waited:g} s", file="cluster",
                           hint="follow longer with --watch-timeout SECONDS")


def save_job_logs(ref: cluster.Ref, session: cluster.Session, out: Path, previous: bool) -> None:
    """logs --out DIR: each pod's whole log, and each of its ranks' lines apart."""
    from .. import cluster
    from ..outputs import report

    result = cluster.save_logs(ref.name, ref.namespace, out, session, previous=previous)
    err(report.saved_log_lines(result))
    if not result.saved:
        raise ClusterError(f"{ref}: no pod had a log to save", file="cluster",
                           hint="`runai-spec status` shows the pods' states")


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (for scripts).")]


@app.command()
def delete(job: JobArg, yes: YesOpt = False, project: ProjectOpt = None, smoke: SmokeOpt = False,
           kubeconfig: KubeconfigOpt = None, context: ContextOpt = None,
           request_timeout: RequestTimeoutOpt = None, debug: DebugOpt = False,
           via: ViaOpt = None) -> int:
    """Delete a workload runai-spec created (asks first; its pods and their logs go too);
    --smoke deletes its smoke test, job and ConfigMap (either may already be gone). Declining
    the question deletes nothing and exits 0."""
    from .. import cluster
    delete_via(job, project, via, smoke, yes, debug, request_timeout)  # issue 27: Run:ai ends it
    refs = job_refs(job, project, smoke=smoke)
    ask = common.asks_first(yes)
    # the question comes after the cluster was read: it names what is there to delete
    with cluster_session(kubeconfig, context, debug, request_timeout) as session:
        result = cluster.delete_job(refs, session, missing_ok=smoke,
                                    confirm=confirmed if ask else None)
    if result.declined:
        err(["aborted: nothing deleted"])
        return EXIT_OK
    err(f"deleted: {ref}" for ref in result.deleted)
    err(f"already gone: {ref}" for ref in result.missing)
    return EXIT_OK


def confirmed(refs: list[cluster.Ref]) -> bool:
    return typer.confirm(f"delete {', '.join(map(str, refs))} and its pods (save logs first "
                         "with `runai-spec logs`)?")
