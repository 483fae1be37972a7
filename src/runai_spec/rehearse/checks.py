"""The checks over all ranks: one result per check, and how each pod ended, in plain words."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..facts import accelerate, torchrun
from ..facts.kubeflow import MASTER_ADDR_ENVS, MASTER_PORT_ENVS
from ..facts.torchrun import (
    ACCELERATE_MODULE,
    SIGTERM_BEFORE_RENDEZVOUS,
    STANDALONE_FLAG,
    split_command,
    split_flag,
)
from ..pipeline.checklist import GUIDE_CHECKS, PREFLIGHT_ONLY_CHECKS
from ..text import one_line
from .argv import PodPlan
from .filesystem import AUDIT_ENV
from .network import NetPlan
from .process_tree import can_pid_namespace
from .processes import SCRIPTS_ENDED, PodOutcome

TAIL_LINES = 3  # of a crashed rank's stderr in the pods row: where a traceback ends

# The preflight's checks in the order a table shows them: the guide's, with preflight.py's own
# checks before the last (the run stops cleanly).
CHECK_ORDER = (*GUIDE_CHECKS[:-1], *PREFLIGHT_ONLY_CHECKS, GUIDE_CHECKS[-1])


@dataclass(frozen=True)
class CheckResult:
    """One checklist item over all ranks: pass, fail, skip, or not run.

    `attempt` says which run of the job it comes from when the rehearsal restarted it
    (0: the run a pod was killed in, 1: the restarted run; None: the restart itself, or a
    rehearsal without a restart)."""

    check: str
    status: str
    message: str
    ranks: tuple[int, ...] = ()
    failed_ranks: tuple[int, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    attempt: int | None = None

    @property
    def ok(self) -> bool:
        # "note": what this machine does differently from the cluster, not a check
        return self.status in ("pass", "skip", "note")


@dataclass(frozen=True)
class RehearseResult:
    """What the rehearsal found: per-check results, per-pod outcomes, where the logs are."""

    ok: bool
    checks: tuple[CheckResult, ...]
    pods: tuple[PodOutcome, ...]
    logs_dir: Path
    world_size: int
    backend: str
    own_script: bool
    mpirun_log: Path | None = None  # an MPIJob's: mpirun's output, every rank's, each attempt's

    def check(self, name: str, attempt: int | None = None) -> CheckResult | None:
        """The result of one check: from the given attempt, else from the last one to report
        it (after a restart, the restarted run's)."""
        found = [c for c in self.checks if c.check == name and (attempt is None or c.attempt == attempt)]
        return found[-1] if found else None

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.check for c in self.checks if c.status == "fail")


def aggregate(
    lines: Sequence[Mapping[str, Any]],
    world: int,
    outcomes: Sequence[PodOutcome],
    timeout_s: float,
    own_script: bool,
    attempt: int | None = None,
) -> list[CheckResult]:
    """One result per check over all ranks, plus the rehearsal's own `pods` check, each
    marked with `attempt`."""
    results: list[CheckResult] = []
    if not own_script:
        by_check: dict[str, list[Mapping[str, Any]]] = {}
        for rec in lines:
            if "check" in rec:
                by_check.setdefault(str(rec["check"]), []).append(rec)
        reported = sorted({int(r["rank"]) for r in lines if "rank" in r})
        silent = [r for r in range(world) if r not in reported]
        for name in list(CHECK_ORDER) + sorted(set(by_check) - set(CHECK_ORDER)):
            recs = by_check.get(name, [])
            if not recs:
                if name == "ranks":
                    results.append(
                        CheckResult(
                            "ranks",
                            "fail",
                            _silent_message(silent, world, outcomes, timeout_s),
                            failed_ranks=tuple(silent),
                        )
                    )
                elif name not in ("training",):
                    results.append(CheckResult(name, "not run", "no rank reached this check"))
                continue
            ranks = tuple(sorted({int(r["rank"]) for r in recs}))
            failed = tuple(sorted({int(r["rank"]) for r in recs if r.get("status") == "fail"}))
            statuses = {r.get("status") for r in recs}
            status = "fail" if failed else "skip" if statuses == {"skip"} else "pass"
            lead = next((r for r in recs if r.get("status") == "fail"), None) or next(
                (r for r in recs if r.get("rank") == 0), recs[0]
            )
            message = str(lead.get("message", ""))
            details = {
                k: v
                for k, v in lead.items()  # "_pod", "_start": the rehearsal's
                if k not in ("check", "status", "ok", "rank", "message") and not k.startswith("_")
            }
            if name == "ranks" and status == "pass" and silent:
                status, message = "fail", _silent_message(silent, world, outcomes, timeout_s)
                failed = tuple(silent)
            elif status != "fail" and len(ranks) < world and name != "ranks":
                missing = [r for r in range(world) if r not in ranks]
                message += f" (no report from rank(s) {', '.join(map(str, missing))})"
            results.append(CheckResult(name, status, message, ranks, failed, details))
    results.append(_pods_check(outcomes, timeout_s, own_script))
    return [replace(c, attempt=attempt) for c in results]


def _pods_check(outcomes: Sequence[PodOutcome], timeout_s: float, own_script: bool) -> CheckResult:
    """The rehearsal's own `pods` check: how each pod ended, with where its logs are."""
    # the profile's own script may train for hours: still running at the deadline is healthy
    bad = [o for o in outcomes if o.exit_code != 0 and not o.killed and not (own_script and o.timed_out)]
    details = {
        "logs": {o.name: str(o.log) for o in outcomes},
        "rank_logs": {o.name: str(o.rank_logs) for o in outcomes if o.rank_logs},
    }
    if bad:
        # with the profile's own script this row is the whole story: the other pods too
        shown = bad + [o for o in outcomes if o not in bad and own_script]
        return CheckResult(
            "pods",
            "fail",
            "; ".join(f"{o.name}: {_pod_story(o, timeout_s, own_script)}" for o in shown),
            details=details,
        )
    if own_script:
        by_story: dict[str, list[str]] = {}
        for o in outcomes:
            by_story.setdefault(_pod_story(o, timeout_s, own_script), []).append(o.name)
        return CheckResult(
            "pods",
            "pass",
            "; ".join(f"{', '.join(names)}: {story}" for story, names in by_story.items()),
            details=details,
        )
    return CheckResult("pods", "pass", f"{len(outcomes)} pod(s) exited 0", details=details)


def _pod_story(o: PodOutcome, timeout_s: float, own_script: bool) -> str:
    """How one pod ended, in plain words, with where to read why when it failed."""
    if o.exit_code is None and not o.timed_out:
        return "not started"
    if o.timed_out and o.stopped_after == SCRIPTS_ENDED:
        return f"still running {o.settle_s:g} s after {SCRIPTS_ENDED} (in teardown), stopped there"
    if o.timed_out and o.stopped_after and o.settle_s == 0:
        return f"stopped once {o.stopped_after} (see the shutdown row), not waiting for --timeout"
    if o.timed_out and o.stopped_after:
        return (
            f"still running {o.settle_s:g} s after {o.stopped_after} crashed (waiting for it?), stopped there"
        )
    if o.timed_out and own_script:
        return (
            f"ran {timeout_s:g} s without failing: still running at the deadline (--timeout), stopped there"
        )
    if o.timed_out:
        return f"timed out after {timeout_s:g} s"
    if o.exit_code == 0:
        return "started, ran and exited 0" if own_script else "exited 0"
    code = exit_status(o.exit_code)
    signal_note = f" (signal {-(o.exit_code or 0)})" if (o.exit_code or 0) < 0 else ""
    where = f"see {o.log}"
    if o.rank_logs is not None:
        where += f" and {o.rank_logs}/attempt_0/<local rank>/stderr.log"
    tail = error_tail(o)
    said = f"; last lines: {' | '.join(tail)}" if tail else ""
    # preflight.py exits 1 on a failed check: only a script of one's own "crashes"
    return f"{'crashed with exit' if own_script else 'exit'} {code}{signal_note}: {where}{said}"


def error_tail(o: PodOutcome, count: int = TAIL_LINES) -> list[str]:
    """The last `count` non-empty lines of the first rank's stderr that has any (torchrun's
    per-rank files), else of the pod's log; each escaped to one line."""
    files = sorted(o.rank_logs.glob("attempt_*/*/stderr.log")) if o.rank_logs is not None else []
    for path in [*files, o.log]:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        # the pod log's own notes ("# argv:", "# runai-spec: ...") are not the pod's output
        lines = [ln for ln in text.splitlines() if ln.strip() and not (path == o.log and ln.startswith("# "))]
        if lines:
            return [one_line(ln.rstrip()) for ln in lines[-count:]]
    return []


def _silent_message(
    silent: Sequence[int], world: int, outcomes: Sequence[PodOutcome], timeout_s: float
) -> str:
    not_started = [o.name for o in outcomes if o.exit_code is None and not o.timed_out]
    waited = [o.name for o in outcomes if o.timed_out]
    msg = (
        f"no report from rank(s) {', '.join(map(str, silent))} of {world}"
        if len(silent) < world
        else f"none of the {world} ranks reported"
    )
    if not_started:
        msg += f"; pod(s) {', '.join(not_started)} never started"
    if waited:
        msg += f"; pod(s) {', '.join(waited)} still waiting after {timeout_s:g} s"
    return msg


def exit_status(code: int | None) -> int | None:
    """The container's exit code as Kubernetes reports it (128 + signal when killed)."""
    return None if code is None else 128 - code if code < 0 else code


def result_dict(result: RehearseResult) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "world_size": result.world_size,
        "backend": result.backend,
        "own_script": result.own_script,
        "logs_dir": str(result.logs_dir),
        "checks": [
            {
                "check": c.check,
                "status": c.status,
                "message": c.message,
                "ranks": list(c.ranks),
                "failed_ranks": list(c.failed_ranks),
                "details": dict(c.details),
                "attempt": c.attempt,
            }
            for c in result.checks
        ],
        "pods": [
            {
                "pod": o.name,
                "rank": o.rank,
                "exit_code": o.exit_code,
                "timed_out": o.timed_out,
                "killed": o.killed,
                "log": str(o.log),
                "rank_logs": str(o.rank_logs) if o.rank_logs else None,
                "stopped_after": o.stopped_after,
                "attempt": o.attempt,
            }
            for o in result.pods
        ],
    }


def launcher_of(plans: Sequence[PodPlan], launcher: str | None = None) -> str:
    """The pods' launcher: the plan's (plan.launcher_name) where the rehearsal has the plan,
    else the kind the first pod's command splits into (a manifest rehearsed without its plan)."""
    if launcher is not None or not plans:
        return launcher or "python"
    return split_command(list(plans[0].argv)).kind


# The flags that keep a log per rank, as each launcher spells them
_LOG_FLAGS = {
    "torchrun": f"{torchrun.LOG_DIR_FLAG}/{torchrun.TEE_FLAG}",
    "accelerate": f"{accelerate.LOG_DIR_FLAG}/{accelerate.TEE_FLAG}",
}
# How each launcher runs on this machine (the command row)
_RUN_HERE = {
    "torchrun": "torchrun as this machine's `python -m torch.distributed.run`",
    "accelerate": f"accelerate launch as this machine's `python -m {ACCELERATE_MODULE}`, "
    "torchrun inside its process",
}


def network_note(plans: Sequence[PodPlan], job_name: str, launcher: str | None = None) -> CheckResult:
    """The `network` row: loopback, and who hosts the rendezvous store and why, so that a
    difference from the cluster shows in the table."""
    if not plans:
        return CheckResult("network", "note", "no pod")
    port = plans[0].port
    names = ", ".join(f"{job_name}-{p.name}" for p in plans)
    lead = (
        f"loopback: every pod on 127.0.0.1 of this machine, no network namespace of its "
        f"own; the service names ({names}) stand for 127.0.0.1 and the job's ports for "
        f"{port}; no DNS delay before a pod is Ready"
    )
    stores = [p for p in plans if p.store is not None]
    if not stores:
        host = next((p for p in plans if p.rank == 0), plans[0])
        local = _local_rendezvous(plans, launcher)
        if local is None and len(plans) > 1 and any(MASTER_ADDR_ENVS[0] in p.env for p in plans):
            tail = (
                f"store host: {host.name}, node rank 0 of the static rendezvous "
                "(MASTER_ADDR:MASTER_PORT), as in the cluster"
            )
        else:
            tail = local or "no rendezvous across pods"
        return CheckResult("network", "note", f"{lead}; {tail}")
    first = stores[0].store
    assert first is not None
    hosts = [p.name for p in stores if p.store is not None and p.store.is_host]
    explicit = [p.name for p in stores if p.store is not None and p.store.explicit]
    if explicit:
        how = f"the rendered rdzv conf of {', '.join(explicit)} sets is_host itself"
    else:
        via = sorted({p.store.via for p in stores if p.store is not None})
        how = (
            f"on loopback every agent would take itself for the host of 127.0.0.1, so the "
            f"rehearsal adds is_host=1 to {', '.join(hosts) or 'no pod'}'s and is_host=0 to "
            f"the other pods' {' / '.join(via)} (torch's _matches_machine_hostname picks the "
            "pod whose hostname is the endpoint host in the cluster)"
        )
    who = (
        f"c10d store host: {', '.join(hosts)} (the endpoint {first.endpoint} names it)"
        if hosts
        else f"c10d store host: none of the pods is named {first.host} (the "
        f"endpoint {first.endpoint}), as in the cluster no agent hosts the store"
    )
    details = {
        "port": port,
        "endpoint": first.endpoint,
        "store_hosts": hosts,
        "is_host": {p.name: p.store.is_host for p in stores if p.store is not None},
    }
    return CheckResult("network", "note", f"{lead}; {who}; {how}", details=details)


def pid1_note(plans: Sequence[PodPlan]) -> CheckResult:
    """The `pid-1` row: whether each pod's command ran as PID 1 of its own PID namespace, as
    in the cluster (so a SIGTERM it does not handle is ignored, as there), or why not."""
    if plans and all(p.pid_namespace for p in plans):
        return CheckResult(
            "pid-1",
            "note",
            "each pod's command runs as PID 1 of a PID namespace "
            "of its own, as in the container: SIGTERM reaches it only through a "
            "handler of its own (torchrun forwards it to its ranks once it has started "
            f"them; {SIGTERM_BEFORE_RENDEZVOUS})",
            details={"pid_namespace": True},
        )
    why = (
        "on loopback the pods share one hostname, and torchrun's rendezvous tells agents "
        "apart by hostname and PID, so several pods need --network netns for it"
        if len(plans) > 1 and can_pid_namespace()
        else "that needs root and util-linux `unshare`"
    )
    return CheckResult(
        "pid-1",
        "note",
        "the pods' commands do NOT run as PID 1 of a PID "
        f"namespace of their own ({why}): a script without a SIGTERM handler "
        "ends on SIGTERM here, but in the cluster, as PID 1, it would ignore it "
        f"until the grace period's SIGKILL ({SIGTERM_BEFORE_RENDEZVOUS})",
        details={"pid_namespace": False},
    )


def _bare_python(plans: Sequence[PodPlan]) -> str:
    """With --own-script: which interpreter a bare `python` in the pods' commands runs."""
    if not plans or AUDIT_ENV not in plans[0].env:
        return ""
    found = shutil.which("python", path=plans[0].env.get("PATH"))
    return (
        f"a bare `python` in the pods (a wrapper script's `exec python ...`) runs {found}, "
        "first on PATH as the image's interpreter would be"
        if found
        else "no `python` on the pods' PATH: a wrapper script's `exec python ...` fails here"
    )


def command_note(plans: Sequence[PodPlan], launcher: str | None = None) -> CheckResult | None:
    """The `command` row: the rendered launcher (LAUNCHER, the plan's) as it runs here, what
    the rehearsal adds to it (nothing when the render keeps a log per rank), and where each
    rank's log lands."""
    logged = [p for p in plans if p.rank_logs is not None]
    python = _bare_python(plans)
    if not logged:
        return CheckResult("command", "note", python, details={"python": python}) if python else None
    with_flags = [p for p in logged if p.added_flags]
    name = launcher_of(plans, launcher)
    lead = (
        "each pod runs its rendered command with $(VAR) expanded from the container's env "
        f"as the kubelet does, {_RUN_HERE.get(name, name)}"
    )
    if with_flags:
        shown = " ".join(
            "<logs>/<pod>/ranks" if a.endswith("ranks") and a.startswith("/") else a
            for a in with_flags[0].added_flags
        )
        how = (
            f"the rehearsal adds `{shown}` to {', '.join(p.name for p in with_flags)}: it "
            "reads each rank's records from those files (the render carries no --log-dir "
            "of its own)"
        )
    else:
        how = (
            f"nothing added: the rendered {_LOG_FLAGS.get(name, _LOG_FLAGS['torchrun'])} keep a log "
            "per rank, here in "
            + ", ".join(str(p.rank_logs) for p in logged)
            + " (the checkpoint volume's folder of this rehearsal)"
        )
    nccl = [p for p in plans if p.nccl_debug_file is not None]
    if nccl:
        how += "; NCCL_DEBUG_FILE (diagnostics.nccl_debug) likewise, one file per rank: " + ", ".join(
            str(p.nccl_debug_file) for p in nccl
        )
    if python:
        how += "; " + python
    return CheckResult(
        "command",
        "note",
        f"{lead}; {how}",
        details={
            "added": {p.name: list(p.added_flags) for p in with_flags},
            "rank_logs": {p.name: str(p.rank_logs) for p in logged},
            "nccl_debug_file": {p.name: str(p.nccl_debug_file) for p in nccl},
        },
    )


def _local_rendezvous(plans: Sequence[PodPlan], launcher: str | None = None) -> str | None:
    """What a layout without a rendezvous across pods has instead, or None where it has one
    (issue 42 item 8: the row described a static rendezvous for these): `torchrun
    --standalone` (its own store inside the pod), accelerate launch on one pod (c10d on a
    free local port, or one process it runs itself), or one pod whose command is python."""
    launchers = [split_command(list(p.argv)) for p in plans]  # a tuple is never its -m form
    if launchers and all(
        lc.kind == "torchrun" and any(split_flag(a)[0] == STANDALONE_FLAG for a in lc.head)
        for lc in launchers
    ):
        return f"torchrun {STANDALONE_FLAG}: a rendezvous of its own inside the pod, no store across pods"
    name = launcher_of(plans, launcher)
    if len(plans) == 1 and name == "accelerate":
        return (
            "accelerate launch on one pod: a rendezvous of its own inside the pod (c10d on a free "
            "local port; one process, accelerate runs it itself), no store across pods"
        )
    if len(plans) == 1 and name != "torchrun":
        return "one pod, one process with no launcher: no rendezvous across pods"
    return None


def netns_note(plans: Sequence[PodPlan], net: NetPlan, launcher: str | None = None) -> CheckResult:
    """The `network` row in netns mode: each pod's address and hostname, and which pod hosts
    the c10d store, as torch decided it from the hostnames (the rehearsal adds no is_host)."""
    from .checks import CheckResult

    pods = ", ".join(f"{p.hostname} {p.address}" for p in net.pods)
    lead = (
        f"netns: every pod in a network namespace of its own on {net.subnet} ({pods}), its "
        "hostname its pod name; another pod's service name resolves (/etc/hosts) only "
        "while that pod's container runs, as a headless service publishes only Ready pods; "
        "the job's ports as rendered"
    )
    details: dict[str, object] = {
        "mode": "netns",
        "subnet": net.subnet,
        "addresses": {p.short: p.address for p in net.pods},
    }
    stores = [p for p in plans if p.store is not None]
    if not stores:
        master = next((p for p in plans if p.rank == 0), plans[0])
        addr = master.env.get(MASTER_ADDR_ENVS[0])
        local = _local_rendezvous(plans, launcher)
        tail = (
            local
            if local is not None
            else f"store host: {master.name}, node rank 0 of the static rendezvous at "
            f"{addr}:{master.env.get(MASTER_PORT_ENVS[0])}, as in the cluster"
            if addr
            else "no rendezvous across pods"
        )
        return CheckResult("network", "note", f"{lead}; {tail}", details=details)
    first = stores[0].store
    assert first is not None
    hosts = [p.name for p in stores if p.store is not None and p.store.is_host]
    who = (
        f"c10d store host: {', '.join(hosts)} (the endpoint {first.endpoint} names it; "
        "torch's _matches_machine_hostname decides it here as in the cluster)"
        if hosts
        else f"c10d store host: none of the pods is named {first.host} (the endpoint "
        f"{first.endpoint}), as in the cluster no agent hosts the store"
    )
    details.update(endpoint=first.endpoint, store_hosts=hosts)
    return CheckResult("network", "note", f"{lead}; {who}", details=details)


def cpu_bandwidth(checks: Sequence[CheckResult], minimum: float | None, gpus: int) -> list[CheckResult]:
    """On CPU the preset's bus-bandwidth minimum is not applied (gloo over loopback says nothing
    of the cluster's fabric): the row is a note that says so, not a pass against it."""
    if gpus or minimum is None:
        return list(checks)
    return [
        replace(
            c,
            status="note",
            message=f"{c.message}; the preset's minimum of {minimum:g} GB/s is not applied on CPU "
            "(gloo over loopback says nothing of the cluster's fabric): measure on the GPU machine",
        )
        if c.check == "bus-bandwidth" and c.status == "pass"
        else c
        for c in checks
    ]
