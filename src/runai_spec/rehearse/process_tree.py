"""Processes in /proc: a PID namespace per pod, the processes below a pod, and when they are gone."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

# A container's first process is PID 1 of a PID namespace of its own (the container runtime's
# doing). The kernel gives PID 1 no default action for a signal: SIGTERM from outside reaches
# it only if it installed a handler (pid_namespaces(7)), so `python train.py` without one
# runs on until the grace period's SIGKILL, while torchrun handles it and forwards it. The
# rehearsal starts each pod's command the same way where it can: util-linux `unshare` (its
# `--fork` parent waits, blocking SIGTERM; `--kill-child` ends the namespace with it), with a
# /proc of the namespace so that the ranks' own lookups by PID hold.
PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--")


@functools.cache
def can_pid_namespace() -> bool:
    """Root, `unshare`, and a PID namespace with its own /proc that can be made here."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run([*PID_NAMESPACE, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def namespace_init(pid: int) -> int | None:
    """The first process at or below PID that is PID 1 of a PID namespace below this one
    (its NSpid line in /proc lists more than one PID, the last 1); None if there is none."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(entry.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.parent.name))
    todo = [pid]
    while todo:
        current = todo.pop(0)
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        ids = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if len(ids) > 1 and ids[-1] == "1":
            return current
        todo += children.get(current, [])
    return None


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc (Linux); empty where /proc is absent."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
            ppid = int(text.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def gone(pids: Sequence[int]) -> bool:
    """True when none of these processes is alive any more (a zombie counts as gone)."""
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            return False
    return True


def wait_gone(pids: Sequence[int], grace: float) -> None:
    """Wait (at most grace seconds) until none of these processes is alive."""
    deadline = time.monotonic() + grace
    while not gone(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
