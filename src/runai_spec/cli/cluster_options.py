"""The options of submit, status, logs and delete: each command's once, as a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..errors import InputError
from .common import ContextOpt, DebugOpt, KubeconfigOpt, RequestTimeoutOpt, TextJson, TextJsonOpt


def registered_via(value: str | None) -> str | None:
    """--via names a registered back-end; a typo is bad input naming the closest one."""
    if value is None:
        return None
    from ..cluster.backend import checked_name

    return checked_name(value)


ViaOpt = Annotated[
    str | None,
    typer.Option(
        "--via",
        metavar="NAME",
        callback=registered_via,
        help="The back-end, by name: `kubernetes`: the Kubernetes API (apply); `runai`: a Run:ai "
        "workload through Run:ai's Workloads V2 API. Default: site.yaml's submit.via.",
        show_default=False,
    ),
]


JobArg = Annotated[str, typer.Argument(help="Workload name, or its profile file.", show_default=False)]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="Run:ai project of a workload NAME: the site file maps it to the "
        "namespace (`-p` as in Run:ai's own CLI).",
    ),
]
SmokeOpt = Annotated[
    bool,
    typer.Option(
        "--smoke",
        help="The workload's in-cluster smoke test (`render --smoke`): job <name>-smoke and its ConfigMap.",
    ),
]


class DryRun(StrEnum):
    server = "server"
    client = "client"  # kubectl's spelling: refused with a pointer to `render`


def no_client_dry_run(value: DryRun | None) -> DryRun | None:
    """`--dry-run=client` (kubectl's habit) is what `render` does: say so instead of a bare
    "not one of"."""
    if value is DryRun.client:
        raise InputError(
            "a client-side dry run is `runai-spec render`: it prints exactly what "
            "submit would send, and needs no cluster",
            field="--dry-run",
            hint="`runai-spec render PROFILE`; `--dry-run server` has the API "
            "server check it and show what it would store",
        )
    return value


WatchOpt = Annotated[
    bool,
    typer.Option(
        "--watch", "-w", help="Poll until the job is running or has ended, at most --watch-timeout seconds."
    ),
]
IntervalOpt = Annotated[
    float, typer.Option("--interval", metavar="SECONDS", min=0.1, help="Seconds between polls with --watch.")
]
WatchTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--watch-timeout", metavar="SECONDS", min=0, help="How long --watch polls before it gives up."
    ),
]


DryRunOpt = Annotated[
    DryRun | None,
    typer.Option(
        "--dry-run",
        callback=no_client_dry_run,
        help="`server`: the API server checks it and shows "
        "what it would store (`client`: use `runai-spec render`). Via Run:ai: only where "
        "the cluster's version documents dryRun (2.24, 3.0), else refused.",
    ),
]
ReplaceOpt = Annotated[
    bool,
    typer.Option(
        "--replace",
        help="Replace a different earlier render of the same name. Via kubernetes: delete it and "
        "create this one. Via runai: Run:ai's update call (PUT), which takes the manifest, "
        "priority and category; anything else (preemptibility) is refused: delete --wait, then submit.",
    ),
]


WaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="After sending, poll (as `status --watch`) "
        "until the job is running or has ended: exit 3 when it "
        "failed or is not running within --watch-timeout.",
    ),
]


LogsOut = Annotated[
    Path,
    typer.Option(
        "--out",
        "-o",
        help="Folder for one <pod>.log per rank; `-` prints the logs to stdout instead.",
        show_default=False,
    ),
]
PodOpt = Annotated[str | None, typer.Option("--pod", help="Only this pod's log (with --out -).")]
TailOpt = Annotated[
    int | None, typer.Option("--tail", min=0, help="Only the last N lines of each log (with --out -).")
]
FollowOpt = Annotated[
    bool,
    typer.Option(
        "--follow",
        "-f",
        help="Keep printing new log lines "
        "(with --out -) until the pods have ended, at most "
        "--watch-timeout seconds, polling every --interval.",
    ),
]
PreviousOpt = Annotated[bool, typer.Option("--previous", help="The restarted containers' earlier logs.")]


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (for scripts).")]
DeleteWaitOpt = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Poll until the workload is gone, at most --watch-timeout seconds (Run:ai keeps it "
        "in phase Deleting a while; the Kubernetes path's delete returns once the API server "
        "deleted the objects).",
    ),
]


@dataclass(frozen=True)
class SubmitOptions:
    profile: Annotated[Path, typer.Argument(help="Profile file.", show_default=False)]
    dry_run: DryRunOpt = None
    replace: ReplaceOpt = False
    smoke: SmokeOpt = False
    wait: WaitOpt = False
    interval: IntervalOpt = 5.0
    watch_timeout: WatchTimeoutOpt = 600.0
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None
    request_timeout: RequestTimeoutOpt = None
    debug: DebugOpt = False
    via: ViaOpt = None


@dataclass(frozen=True)
class StatusOptions:
    job: JobArg
    project: ProjectOpt = None
    fmt: TextJsonOpt = TextJson.text
    smoke: SmokeOpt = False
    watch: WatchOpt = False
    interval: IntervalOpt = 5.0
    watch_timeout: WatchTimeoutOpt = 600.0
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None
    request_timeout: RequestTimeoutOpt = None
    debug: DebugOpt = False
    via: ViaOpt = None


@dataclass(frozen=True)
class LogsOptions:
    job: JobArg
    out: LogsOut
    previous: PreviousOpt = False
    project: ProjectOpt = None
    smoke: SmokeOpt = False
    pod: PodOpt = None
    tail: TailOpt = None
    follow: FollowOpt = False
    interval: IntervalOpt = 5.0
    watch_timeout: WatchTimeoutOpt = 600.0
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None
    request_timeout: RequestTimeoutOpt = None
    debug: DebugOpt = False


@dataclass(frozen=True)
class DeleteOptions:
    job: JobArg
    yes: YesOpt = False
    project: ProjectOpt = None
    smoke: SmokeOpt = False
    wait: DeleteWaitOpt = False
    interval: IntervalOpt = 5.0
    watch_timeout: WatchTimeoutOpt = 600.0
    kubeconfig: KubeconfigOpt = None
    context: ContextOpt = None
    request_timeout: RequestTimeoutOpt = None
    debug: DebugOpt = False
    via: ViaOpt = None


# What reaches a cluster: every command here has the same four options for it.
ClusterOptions = SubmitOptions | StatusOptions | LogsOptions | DeleteOptions
