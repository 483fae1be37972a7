"""The checks over all ranks: one result per check, and how each pod ended, in plain words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..launcher import split_command
from .pods import PodOutcome, PodPlan

# The preflight's checks, in the order a table shows them.
CHECK_ORDER = (
    "ranks", "world-size", "device", "global-batch", "resume", "checkpoint", "metrics",
    "bus-bandwidth", "training", "shutdown",
)


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
        return self.status in ("pass", "skip")



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

    def check(self, name: str, attempt: int | None = None) -> CheckResult | None:
        """The result of one check: from the given attempt, else from the last one to report
        it (after a restart, the restarted run's)."""
        found = [c for c in self.checks if c.check == name
                 and (attempt is None or c.attempt == attempt)]
        return found[-1] if found else None

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.check for c in self.checks if c.status == "fail")



def aggregate(lines: Sequence[Mapping[str, Any]], world: int,
              outcomes: Sequence[PodOutcome], timeout_s: float,
              own_script: bool, attempt: int | None = None) -> list[CheckResult]:
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
                    results.append(CheckResult("ranks", "fail", _silent_message(
                        silent, world, outcomes, timeout_s), failed_ranks=tuple(silent)))
                elif name not in ("training",):
                    results.append(CheckResult(name, "not run", "no rank reached this check"))
                continue
            ranks = tuple(sorted({int(r["rank"]) for r in recs}))
            failed = tuple(sorted({int(r["rank"]) for r in recs if r.get("status") == "fail"}))
            statuses = {r.get("status") for r in recs}
            status = "fail" if failed else "skip" if statuses == {"skip"} else "pass"
            lead = next((r for r in recs if r.get("status") == "fail"), None) or next(
                (r for r in recs if r.get("rank") == 0), recs[0])
            message = str(lead.get("message", ""))
            details = {k: v for k, v in lead.items()
                       if k not in ("check", "status", "ok", "rank", "message", "_pod")}
            if name == "ranks" and status == "pass" and silent:
                status, message = "fail", _silent_message(silent, world, outcomes, timeout_s)
                failed = tuple(silent)
            elif status != "fail" and len(ranks) < world and name != "ranks":
                missing = [r for r in range(world) if r not in ranks]
                message += f" (no report from rank(s) {', '.join(map(str, missing))})"
            results.append(CheckResult(name, status, message, ranks, failed, details))
    # the profile's own script may train for hours: still running at the deadline is healthy
    bad = [o for o in outcomes if o.exit_code != 0 and not o.killed
           and not (own_script and o.timed_out)]
    details = {"logs": {o.name: str(o.log) for o in outcomes},
               "rank_logs": {o.name: str(o.rank_logs) for o in outcomes if o.rank_logs}}
    if bad:
        # with the profile's own script this row is the whole story: the other pods too
        shown = bad + [o for o in outcomes if o not in bad and own_script]
        results.append(CheckResult("pods", "fail", "; ".join(
            f"{o.name}: {_pod_story(o, timeout_s, own_script)}" for o in shown),
            details=details))
    elif own_script:
        by_story: dict[str, list[str]] = {}
        for o in outcomes:
            by_story.setdefault(_pod_story(o, timeout_s, own_script), []).append(o.name)
        results.append(CheckResult("pods", "pass", "; ".join(
            f"{', '.join(names)}: {story}" for story, names in by_story.items()),
            details=details))
    else:
        results.append(CheckResult("pods", "pass", f"{len(outcomes)} pod(s) exited 0",
                                   details=details))
    return [replace(c, attempt=attempt) for c in results]


def _pod_story(o: PodOutcome, timeout_s: float, own_script: bool) -> str:
    """How one pod ended, in plain words, with where to read why when it failed."""
    if o.exit_code is None and not o.timed_out:
        return "not started"
    if o.timed_out and o.stopped_after:
        return (f"still running {o.settle_s:g} s after {o.stopped_after} crashed "
                "(waiting for it?), stopped there")
    if o.timed_out and own_script:
        return (f"ran {timeout_s:g} s without failing: still running at the deadline "
                "(--timeout), stopped there")
    if o.timed_out:
        return f"timed out after {timeout_s:g} s"
    if o.exit_code == 0:
        return "started, ran and exited 0" if own_script else "exited 0"
    code = exit_status(o.exit_code)
    signal_note = f" (signal {-(o.exit_code or 0)})" if (o.exit_code or 0) < 0 else ""
    where = f"see {o.log}"
    if o.rank_logs is not None:
        where += f" and {o.rank_logs}/attempt_0/<local rank>/stderr.log"
    # preflight.py exits 1 on a failed check: only a script of one's own "crashes"
    return f"{'crashed with exit' if own_script else 'exit'} {code}{signal_note}: {where}"


def own_script_note(plans: Sequence[PodPlan]) -> CheckResult:
    """The row that says what --own-script did not do: the guide's checklist."""
    entry = " ".join(split_command(list(plans[0].argv)).entry) if plans else "?"
    return CheckResult(
        "checklist", "not run",
        f"--own-script ran your command ({entry}, in {plans[0].cwd if plans else '?'}) in place "
        "of preflight.py: none of the guide's checks (ranks, world size, one device per rank, "
        "global batch, checkpoint and resume, metrics from rank 0, bus bandwidth, clean "
        "shutdown) was run, only whether the pods start, run and exit; rehearse without "
        "--own-script for the checklist")


def _silent_message(silent: Sequence[int], world: int, outcomes: Sequence[PodOutcome],
                    timeout_s: float) -> str:
    not_started = [o.name for o in outcomes if o.exit_code is None and not o.timed_out]
    waited = [o.name for o in outcomes if o.timed_out]
    msg = (f"no report from rank(s) {', '.join(map(str, silent))} of {world}"
           if len(silent) < world else f"none of the {world} ranks reported")
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
        "ok": result.ok, "world_size": result.world_size, "backend": result.backend,
        "own_script": result.own_script, "logs_dir": str(result.logs_dir),
        "checks": [{"check": c.check, "status": c.status, "message": c.message,
                    "ranks": list(c.ranks), "failed_ranks": list(c.failed_ranks),
                    "details": dict(c.details), "attempt": c.attempt}
                   for c in result.checks],
        "pods": [{"pod": o.name, "rank": o.rank, "exit_code": o.exit_code,
                  "timed_out": o.timed_out, "killed": o.killed, "log": str(o.log),
                  "rank_logs": str(o.rank_logs) if o.rank_logs else None,
                  "stopped_after": o.stopped_after,
                  "attempt": o.attempt} for o in result.pods],
    }
