"""`rehearse`: the rendered workload run here, one process per pod."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK
from ..facts.kai import STALENESS_GRACE_DEFAULT_S
from ..facts.operator import BACKOFF_BASE_S
from .common import ProfileArg, TextJson, TextJsonOpt, app, err, stop_on_errors, with_options

if TYPE_CHECKING:
    from ..pipeline.workload import Workload
    from ..rehearse import RehearseResult
    from ..rehearse.spec import RehearsalSpec

ProcsOpt = Annotated[
    int | None, typer.Option("--procs-per-pod", help="Processes per pod here (scale down on a CPU machine).")
]
OwnScriptOpt = Annotated[
    bool, typer.Option("--own-script", help="Run the profile's own command instead of preflight.py.")
]
RestartOpt = Annotated[
    bool,
    typer.Option(
        "--restart-after-checkpoint",
        help="Shorthand for --kill of the pod whose loss is hardest for the layout "
        "(master-0, or the elastic store host worker-0) @checkpoint.",
    ),
]
LogsOpt = Annotated[
    Path | None,
    typer.Option("--logs", help="Folder for per-pod and per-rank logs (default: a new temporary folder)."),
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="How long the pods may run. Then they are stopped: preflight.py still running has "
        "failed, your own script (--own-script) still running is healthy.",
    ),
]
KillOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--kill",
        metavar="POD[@checkpoint|@SECONDS]",
        help="Kill one pod's container (repeatable); the kubelet and operator model decide what comes back.",
    ),
]
PreemptOpt = Annotated[
    str | None,
    typer.Option(
        "--preempt",
        metavar="checkpoint|SECONDS",
        help="Preempt the job (every pod: SIGTERM, SIGKILL after its terminationGracePeriodSeconds, "
        "recreated by the operator) right after the first checkpoint or SECONDS in.",
    ),
]
EvictOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--evict",
        metavar="POD[@checkpoint|@SECONDS]",
        help="KAI-Scheduler evicts this one pod of an elastic job above its minimum (repeatable): "
        "SIGTERM, its grace period, deleted; the operator creates it anew.",
    ),
]
StaleGangOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--stale-gang",
        metavar="POD[@checkpoint|@SECONDS]",
        help="POD is lost and no room is left for it: the gang below its minimum is evicted whole "
        f"after KAI's staleness grace period ({STALENESS_GRACE_DEFAULT_S:g} s, times --backoff-scale).",
    ),
]
BackoffOpt = Annotated[
    float,
    typer.Option(
        "--backoff-scale", help=f"Scale the kubelet's crash-loop back-off ({BACKOFF_BASE_S:g} s, doubling)."
    ),
]
NetworkOpt = Annotated[
    str,
    typer.Option(
        "--network",
        metavar="auto|netns|loopback",
        help="netns: each pod in its own network namespace, with its address, its pod name as "
        "hostname and the service names in /etc/hosts only while their pod runs (root, "
        "iproute2, unshare); loopback: every pod on 127.0.0.1; auto (default): netns where "
        "possible.",
    ),
]


ArgsOpt = Annotated[
    str | None,
    typer.Option(
        "--args",
        metavar="'ARG ...'",
        help="With --own-script: arguments appended to the script's own in every pod (split as "
        "a shell would, no shell run), e.g. --args '--max-steps 40' for a shorter run; the "
        "profile stays as it is.",
    ),
]
ScalingOpt = Annotated[
    str | None,
    typer.Option(
        "--scaling",
        metavar="K,K,...",
        help="With --own-script: rehearse again with each --procs-per-pod K and report the "
        "throughput per process against the smallest K (this machine's scaling efficiency).",
    ),
]


def _status_line() -> tuple[Callable[[str], None] | None, Callable[[], None]]:
    """On a terminal: a status line on stderr, rewritten in place, and how to clear it."""
    if not sys.stderr.isatty():
        return None, lambda: None
    shown = [False]

    def show(line: str) -> None:
        width = max(20, shutil.get_terminal_size().columns - 1)
        sys.stderr.write("\r\x1b[K" + line[:width])
        sys.stderr.flush()
        shown[0] = True

    def clear() -> None:
        if shown[0]:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    return show, clear


@dataclasses.dataclass(frozen=True)
class RehearseOptions:
    """`rehearse`'s options, declared once (their flags, help and defaults)."""

    profile: ProfileArg
    procs_per_pod: ProcsOpt = None
    own_script: OwnScriptOpt = False
    restart_after_checkpoint: RestartOpt = False
    logs: LogsOpt = None
    timeout: TimeoutOpt = 300.0
    kill: KillOpt = None
    preempt: PreemptOpt = None
    evict: EvictOpt = None
    stale_gang: StaleGangOpt = None
    backoff_scale: BackoffOpt = 1.0
    network: NetworkOpt = "auto"
    scaling: ScalingOpt = None
    args: ArgsOpt = None
    fmt: TextJsonOpt = TextJson.text


@app.command()
@with_options
def rehearse(o: RehearseOptions) -> int:
    """Rehearse the rendered workload here: one process per pod, the operator's environment.
    The checks go to stdout (a table, or --format json); on a terminal a status line on
    stderr shows the pods up, each rank's last check and the time against --timeout."""
    check_options(o.timeout, o.network)
    workload = runnable(o.profile)
    spec = spec_of(o)
    result = run_with_status_line(workload, spec)
    show_result(result, workload, o.fmt, o.backoff_scale if spec.faults_asked else None)
    record_result(result, workload, spec.recorded_options())
    return EXIT_OK if result.ok else EXIT_FINDINGS


def spec_of(o: RehearseOptions) -> RehearsalSpec:
    """What the command's options ask of the rehearsal, as one value."""
    from ..rehearse.scaling import check_scaling, parse_scaling
    from ..rehearse.spec import RehearsalSpec, parse_script_args

    scaling = parse_scaling(o.scaling)  # without --procs-per-pod, the first run is its first K
    spec = RehearsalSpec(
        procs_per_pod=scaling[0] if scaling and o.procs_per_pod is None else o.procs_per_pod,
        own_script=o.own_script,
        restart_after_checkpoint=o.restart_after_checkpoint,
        logs_dir=o.logs,
        timeout_s=o.timeout,
        kills=tuple(o.kill or ()),
        preempt=o.preempt,
        evicts=tuple(o.evict or ()),
        stale_gang=tuple(o.stale_gang or ()),
        backoff_scale=o.backoff_scale,
        network=o.network,
        scaling=scaling,
        script_args=parse_script_args(o.args, own_script=o.own_script),
    )
    check_scaling(spec)
    return spec


def runnable(profile: Path) -> Workload:
    """The workload, its findings printed; exit 1 before anything runs where one is an error:
    what validate refuses never runs here either (issue 23): a reserved variable such as
    LD_PRELOAD would load its library on this machine, a launcher's own module as the entry
    point would start ranks of its own."""
    return stop_on_errors(prepared(profile), "run")


def prepared(profile: Path) -> Workload:
    from ..pipeline.workload import prepare_workload  # its models load only when a command runs

    return prepare_workload(profile)


def check_options(timeout: float, network: str) -> None:
    """Bad --timeout or --network (netns where it cannot be) refused before anything runs."""
    from ..rehearse import check_timeout
    from ..rehearse.network import resolve_mode

    check_timeout(timeout)
    resolve_mode(network)


def run_with_status_line(workload: Workload, spec: RehearsalSpec) -> RehearseResult:
    """The rehearsal of the workload's manifests, with the workload's settings and operator
    and the status line on a terminal."""
    from ..rehearse import preflight_settings, rehearse_manifests
    from ..rehearse.scaling import rehearse_scaling

    show, clear = _status_line()
    try:
        _stop_on_sigterm()
        spec = dataclasses.replace(
            spec,
            settings=preflight_settings(workload),
            progress=show,
            operator_version=workload.plan.operator_version,
            kai_version=workload.site.kai_version,
            plan=workload.plan,
        )
        if spec.scaling:
            return rehearse_scaling(list(workload.manifests), spec)
        return rehearse_manifests(list(workload.manifests), spec)
    finally:
        _restore_sigterm()
        clear()


_SIGTERM_BEFORE: list[Any] = []


def _stop_on_sigterm() -> None:
    """SIGTERM while the pods run ends the rehearsal as Ctrl-C does: its `finally` blocks stop
    every pod's process tree (issue 42 item 7); Python's default would exit at once and leave
    them running. Only the main thread may set a handler (a test's runner may not be it)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
        raise KeyboardInterrupt

    _SIGTERM_BEFORE.append(signal.signal(signal.SIGTERM, stop))


def _restore_sigterm() -> None:
    if _SIGTERM_BEFORE:
        signal.signal(signal.SIGTERM, _SIGTERM_BEFORE.pop())


def show_result(
    result: RehearseResult, workload: Workload, fmt: TextJson, backoff_scale: float | None
) -> None:
    """The table (or JSON) on stdout; the back-off scale of a fault run and the logs' folder
    on stderr."""
    from ..outputs import report
    from ..rehearse import result_dict

    if backoff_scale is not None:
        err([f"back-off scale: {backoff_scale:g}"])
    if fmt == TextJson.json:
        print(json.dumps(result_dict(result), indent=2))
        err([f"logs: {result.logs_dir}"])
    else:
        err(report.print_rehearsal(result, workload.plan.name))


def record_result(result: RehearseResult, workload: Workload, options: list[str]) -> None:
    """The rehearsal's summary kept as the workload's latest, for `plan`'s ticket."""
    from ..rehearse.bottleneck import measures
    from ..rehearse.records import RehearsalRecord, write_record

    record = write_record(
        RehearsalRecord(
            project=workload.plan.project,
            name=workload.plan.name,
            profile=workload.path,
            profile_sha256=workload.loaded.sha256,
            ok=result.ok,
            world_size=result.world_size,
            backend=result.backend,
            options=tuple(options),
            checks=tuple(
                (
                    c.check if c.attempt is None else f"{c.check} (attempt {c.attempt + 1})",
                    c.status,
                    c.message,
                )
                for c in result.checks
            ),
            logs_dir=str(result.logs_dir),
            measures=measures(result.checks),
        )
    )
    if record is not None:
        err([f"recorded for `runai-spec plan`: {record}"])
