"""A rank that crashes after its script ended (teardown): watched while the pods run, named from the log.

The verdict is due once every rank's script has ended (the audit layer's `end` record): a
crash after that (an atexit handler, a destructor, a C++ thread: `terminate called without
an active exception`) is reported as what it is, without waiting for --timeout while
torchrun's agent restarts the workers and waits in a new rendezvous."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from .script_checks import read_audit
from .script_records import crashed_after_end, ended, generation, stuck, stuck_text

WATCH_EVERY_S = 1.0
# torch 2.13 torch/distributed/elastic/multiprocessing/api.py: the agent's log line for a
# worker that failed, with its exit code (negative: the signal that ended it)
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")


class TeardownWatch:
    """Called while the pods run: None until every rank's script ended; then "" while nothing
    went wrong, or why the run is over (a rank crashed after its end; at any time, a rank
    still alive after its own destroy_process_group). Reads the audit folder at most once
    every WATCH_EVERY_S."""

    def __init__(self, audit_dir: Path, key: str, world: int, logs: Sequence[Path] = ()) -> None:
        self.audit_dir, self.key, self.world, self.logs = audit_dir, key, world, tuple(logs)
        self._next = 0.0
        self._state: str | None = None

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self._next:
            return self._state
        self._next = now + WATCH_EVERY_S
        records = read_audit(self.audit_dir, self.key)
        hung = stuck(records)
        if hung:  # the verdict is due: waiting for --timeout would only hold the pods longer
            self._state = stuck_text(hung)
            return self._state
        if not ended(records, self.world):
            return None
        # an exit record still on its way is no crash: the agent's word on a failed worker, or
        # a new start of the rank, says so
        gone = crashed_after_end(records)
        crash = crash_named(self.logs) if gone else None
        again = [
            k
            for k in gone
            if any(
                r.get("event") == "start" and r.get("rank") == k and generation(r) != (0, 0) for r in records
            )
        ]
        if crash or again:
            self._state = f"rank(s) {', '.join(map(str, gone))} crashed after the script ended"
        else:
            self._state = ""
        return self._state


def crash_named(logs: Sequence[Path]) -> str | None:
    """What torchrun's agent said of the first worker that failed: 'exit code -6 (SIGABRT)'."""
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        found = _FAILED.search(text)
        if found:
            code = int(found.group(1))
            try:
                name = f" ({signal.Signals(-code).name})" if code < 0 else ""
            except ValueError:
                name = ""
            return f"exit code {code}{name}"
    return None
