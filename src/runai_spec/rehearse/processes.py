"""The job's pods as processes here: each pod's process and log, one run of them all, a status line."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..pipeline.checklist import PREFLIGHT_LINE, parse_lines
from .argv import PodPlan
from .process_tree import descendants, namespace_init, wait_gone
from .spec import Progress

SCRIPTS_ENDED = "every rank's script ended"  # PodOutcome.stopped_after: stopped in teardown
# A pod outlives no rehearsal, even one SIGKILLed (issue 42 item 7): util-linux `setpriv` sets
# the kernel's parent-death signal (PR_SET_PDEATHSIG) and execs the pod's command, which keeps
# it through the wrappers' execs (nsenter, unshare, sh's exec) down to the container's first
# process; where that is PID 1 of a PID namespace (`unshare --kill-child`), the namespace and
# every process in it end with it. Torchrun's workers outside one: the audit layer's (ranks).
PARENT_DEATH = ("setpriv", "--pdeathsig", "KILL", "--") if shutil.which("setpriv") else ()


@dataclass(frozen=True)
class PodOutcome:
    name: str
    rank: int
    exit_code: int | None
    timed_out: bool
    killed: bool
    log: Path
    attempt: int
    rank_logs: Path | None = None  # torchrun's folder of this launch: <attempt>/<local rank>/
    stopped_after: str | None = None  # stopped because this other pod had crashed, not timed out
    settle_s: float | None = None  # how long it was given to end after that crash


class Pod:
    """A running pod: its process group, a log file, and the PREFLIGHT lines seen so far."""

    def __init__(self, plan: PodPlan, attempt: int) -> None:
        self.plan = plan
        self.attempt = attempt
        self.log = plan.log_dir / ("pod.log" if attempt == 0 else f"pod.attempt{attempt}.log")
        self.killed = False
        self.timed_out = False
        self.stopped_after: str | None = None
        self.settle_s: float | None = None
        self.records: list[dict[str, Any]] = []
        self._progress: list[dict[str, Any]] = []  # what last_checks read of the rank files
        self._read_to: dict[Path, int] = {}
        self._rank_root = plan.rank_logs
        # torchrun names each launch's folder at random: the ones already there are older runs
        self._earlier = (
            set(self._rank_root.iterdir())
            if self._rank_root is not None and self._rank_root.is_dir()
            else set()
        )
        self._fh = self.log.open("w", encoding="utf-8")
        self._fh.write(f"# argv: {json.dumps(list(plan.argv))}\n# cwd: {plan.cwd}\n")
        self._fh.flush()
        self.proc = subprocess.Popen(
            [*PARENT_DEATH, *plan.wrapper, *plan.argv],
            env=dict(plan.env),
            cwd=plan.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )  # its own process group, so that kill reaches torchrun's
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:  # this thread's alone: closed once the pod's output ends
            for line in self.proc.stdout:
                self._fh.write(line)
                self._fh.flush()
                if PREFLIGHT_LINE in line:
                    self.records.extend(parse_lines(line))

    def signal(self, sig: int) -> None:
        # torchrun starts each worker in a session of its own: the process group of the pod's
        # launcher does not reach them, so walk the tree of the processes this pod started
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self, grace: float = 10.0) -> None:
        """A node lost: SIGKILL to the launcher and every rank, no goodbye; returns once all of
        them are gone, so that the survivors' next collective meets closed connections."""
        tree = [self.proc.pid, *descendants(self.proc.pid)]
        self.killed = True
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        wait_gone(tree, grace)

    def term(self) -> list[int]:
        """The pod deleted: SIGTERM to the container's main process only, as the runtime
        sends it (torchrun forwards it to its workers): PID 1 of the pod's PID namespace,
        where it has one; returns the processes of the container now, for `reap` once the
        grace period is over."""
        tree = [self.proc.pid, *descendants(self.proc.pid)]
        main = (namespace_init(self.proc.pid) if self.plan.pid_namespace else None) or self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(main, signal.SIGTERM)
        return tree

    def reap(self, tree: Sequence[int], grace: float = 5.0) -> None:
        """The container is gone: every process it had still running gets SIGKILL."""
        for pid in [*tree, *descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        wait_gone(tree, grace)

    def stop(self, grace: float = 5.0) -> None:
        orphans = descendants(self.proc.pid)
        tree = [self.proc.pid, *orphans]
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(grace)
        # torchrun's workers may outlive their agent: the whole tree goes
        self.signal(signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # "stopped" must mean gone: a rank that outlives the rehearsal keeps its port and GPU
        wait_gone(tree, grace)

    def _runs(self) -> list[Path]:
        """torchrun's folders of this launch under its --log-dir (older launches left out)."""
        if self._rank_root is None or not self._rank_root.is_dir():
            return []
        return sorted(d for d in self._rank_root.iterdir() if d not in self._earlier)

    def finish(self) -> PodOutcome:
        self._reader.join(10)
        if self.timed_out:
            # the launcher's SignalException traceback just above reads like a crash
            why = (
                f"{self.settle_s:g} s after {self.stopped_after} crashed"
                if self.stopped_after
                else "at the deadline (--timeout)"
            )
            self._fh.write(
                f"# runai-spec: still running {why}: stopped (SIGTERM, then "
                "SIGKILL); a SignalException above comes from that stop\n"
            )
        self._fh.close()
        runs = self._runs()
        return PodOutcome(
            self.plan.name,
            self.plan.rank,
            self.proc.returncode,
            self.timed_out,
            self.killed,
            self.log,
            self.attempt,
            runs[-1] if runs else None,
            self.stopped_after,
            self.settle_s,
        )

    def last_checks(self) -> dict[int, str]:
        """The last check each rank of this pod reported so far. Read on from where the last
        call stopped in each rank's stdout file: a script's log may grow large."""
        files = sorted(f for d in self._runs() for f in d.glob("attempt_*/*/stdout.log"))
        for f in files:
            start = self._read_to.get(f, 0)
            with contextlib.suppress(OSError), f.open("rb") as fh:
                fh.seek(start)
                chunk = fh.read()
                whole = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
                self._read_to[f] = start + len(whole)
                self._progress.extend(parse_lines(whole.decode(errors="replace")))
        last: dict[int, str] = {}
        for rec in self._progress if files else self.records:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                last[int(rec["rank"])] = str(rec["check"])
        return last

    def lines(self) -> list[dict[str, Any]]:
        """This attempt's PREFLIGHT records, in each rank's order. Taken from the ranks' own
        log files where torchrun wrote them: the launcher's copy on stdout (its --tee tails each
        rank's file now and then) lags behind, and what it had not copied yet is lost when
        the launcher is killed."""
        files = sorted(f for d in self._runs() for f in d.glob("attempt_*/*/stdout.log"))
        # which start of the workers each record comes from: the container's attempt, then
        # torchrun's restart of its workers (the attempt_<k> folder)
        records = (
            [
                {**r, "_start": (self.attempt, _agent_attempt(f))}
                for f in files
                for r in parse_lines(f.read_text(errors="replace"))
            ]
            if files
            else [{**r, "_start": (self.attempt, 0)} for r in self.records]
        )
        return [{**r, "_pod": self.plan.name} for r in records]


def _agent_attempt(stdout_log: Path) -> int:
    """k of torchrun's <log-dir>/<run>/attempt_<k>/<local rank>/stdout.log."""
    return int(stdout_log.parent.parent.name.removeprefix("attempt_") or 0)


@dataclass(frozen=True)
class Attempt:
    """One run of the whole job: how each pod ended, and the ranks' records."""

    outcomes: list[PodOutcome]
    lines: list[dict[str, Any]]


def held(hold_dir: Path | None) -> dict[int, int]:
    """{rank: step} of the ranks that hold after their first checkpoint (preflight.py's
    --hold-after-checkpoint DIR)."""
    out: dict[int, int] = {}
    if hold_dir is None or not hold_dir.is_dir():
        return out
    for marker in hold_dir.glob("holding.*"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(marker.read_text())
            out[int(record["rank"])] = int(record["step"])
    return out


PROGRESS_EVERY_S = 1.0


def progress_line(pods: Sequence[Pod], total: int, elapsed_s: float, timeout_s: float) -> str:
    """One status line: pods up of all, the last check each rank reported (preflight.py's
    PREFLIGHT records; a script of one's own reports none), elapsed against --timeout."""
    up = sum(p.proc.poll() is None for p in pods)
    last: dict[int, str] = {}
    for p in pods:
        last.update(p.last_checks())
    steps = " ".join(f"r{r}:{c}" for r, c in sorted(last.items()))
    return f"pods up {up}/{total}" + (f" | {steps}" if steps else "") + f" | {elapsed_s:.0f}/{timeout_s:g} s"


class Ticker:
    """Calls `progress` with a fresh status line about once a second (never without one)."""

    def __init__(self, progress: Progress | None, total: int, timeout_s: float) -> None:
        self.progress, self.total, self.timeout_s = progress, total, timeout_s
        self.start = time.monotonic()
        self._next = self.start

    def tick(self, pods: Sequence[Pod]) -> None:
        now = time.monotonic()
        if self.progress is None or now < self._next:
            return
        self._next = now + PROGRESS_EVERY_S
        self.progress(progress_line(pods, self.total, now - self.start, self.timeout_s))


def run_attempt(
    plans: Sequence[PodPlan],
    attempt: int,
    timeout_s: float,
    *,
    skip: Sequence[str] = (),
    after_crash_s: float | None = None,
    progress: Progress | None = None,
    watch: Callable[[], str | None] | None = None,
) -> Attempt:
    """Start every pod, wait for all of them (bounded), return outcomes and PREFLIGHT lines.

    With `after_crash_s`, once one pod exits non-zero the others get that long to end too.
    With `progress`, a status line (`progress_line`) goes to it about once a second. With
    `watch` (teardown.TeardownWatch): once it says every rank's script ended ("") the pods get
    `after_crash_s` to exit, and once it names a crash after that they are stopped at once."""
    pods = [Pod(p, attempt) for p in plans if p.name not in skip]
    deadline = time.monotonic() + timeout_s
    ticker = Ticker(progress, len(plans), timeout_s)
    first_crash: str | None = None
    settle = after_crash_s
    ended = False
    try:
        while time.monotonic() < deadline and any(p.proc.poll() is None for p in pods):
            if after_crash_s is not None and first_crash is None:
                first_crash = next((p.plan.name for p in pods if p.proc.poll() not in (None, 0)), None)
                if first_crash is not None:
                    deadline = min(deadline, time.monotonic() + after_crash_s)
            state = watch() if watch is not None and first_crash is None else None
            if state is not None and not ended:
                ended = True
                deadline = min(deadline, time.monotonic() + (after_crash_s or 0))
            if state:
                first_crash, settle, deadline = state, 0.0, time.monotonic()
            ticker.tick(pods)
            time.sleep(0.05)
    finally:
        for p in pods:
            if p.proc.poll() is None:
                p.timed_out = True
                p.stopped_after = first_crash or (SCRIPTS_ENDED if ended else None)
                p.settle_s = settle if p.stopped_after else None
            p.stop()
    outcomes = [p.finish() for p in pods]
    for name in skip:
        plan = next(pl for pl in plans if pl.name == name)
        outcomes.append(PodOutcome(name, plan.rank, None, False, False, plan.log_dir / "pod.log", attempt))
    lines = [r for p in pods for r in p.lines()]
    return Attempt(outcomes, lines)
