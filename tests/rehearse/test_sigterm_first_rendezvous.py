"""SIGTERM before the first rendezvous (issue 40 item 3), measured: torchrun installs its
SIGTERM handler only when it first starts workers (torch/distributed/elastic/multiprocessing/
api.py PContext.start, called after the rendezvous by agent/server/api.py
_initialize_workers; torch 2.13.0). Run as PID 1 of a PID namespace, as the rehearsal runs a
pod's command and as the container runtime does, a torchrun still waiting for its peers
ignores SIGTERM (the kernel gives PID 1 no default action): the pod holds its GPUs until the
grace period's SIGKILL. Once its workers run, the same SIGTERM ends it. The fault table, the
`pid-1` row and `plan` say so (facts.torchrun.SIGTERM_BEFORE_RENDEZVOUS)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT, needs_torch, run
from runai_spec.facts.torchrun import SIGTERM_BEFORE_RENDEZVOUS
from runai_spec.rehearse import free_port
from runai_spec.rehearse.checks import pid1_note
from runai_spec.rehearse.process_tree import PID_NAMESPACE, can_pid_namespace, namespace_init

needs_pid_ns = pytest.mark.skipif(not can_pid_namespace(), reason="needs root and util-linux unshare")
IGNORED_FOR_S = 5.0  # SIGTERM handled ends torchrun within a second or two; this is a lower bound

WORKER = """\
import os, sys, time
open(sys.argv[1], "w").close()
while True:
    time.sleep(0.1)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC", "MASTER_"))}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return env


def _init_of(proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        init = namespace_init(proc.pid)
        if init is not None:
            return init
        time.sleep(0.05)
    raise AssertionError("no PID namespace init found")


def _until(ready: Callable[[], bool], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.1)
    return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _torchrun(tmp_path: Path, nnodes: int, port: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--node-rank=0"]
    argv += ["--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
    argv += [str(script), str(tmp_path / "started")]
    log = (tmp_path / "torchrun.log").open("wb")
    try:
        return subprocess.Popen(
            [*PID_NAMESPACE, *argv], env=_env(), stdout=log, stderr=log, start_new_session=True
        )
    finally:
        log.close()


@needs_pid_ns
@pytest.mark.torch
def test_torchrun_as_pid_1_ignores_sigterm_in_its_first_rendezvous_and_not_after(tmp_path: Path) -> None:
    needs_torch()
    # a pod of two whose peer never comes: node 0 hosts the static rendezvous's store and waits
    port = free_port()
    waiting_dir = tmp_path / "waiting"
    waiting_dir.mkdir()
    waiting = _torchrun(waiting_dir, 2, port)
    try:
        assert _until(lambda: _listening(port), 120), "torchrun never reached its rendezvous"
        init = _init_of(waiting)
        os.kill(init, signal.SIGTERM)  # the kubelet deleting the pod
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(IGNORED_FOR_S)
        assert not (waiting_dir / "started").exists()
    finally:
        os.killpg(waiting.pid, signal.SIGKILL)  # the grace period's SIGKILL
        waiting.wait(30)
    # the same pod alone (a world of one): its worker starts, and then SIGTERM ends torchrun
    alone_dir = tmp_path / "alone"
    alone_dir.mkdir()
    alone = _torchrun(alone_dir, 1, free_port())
    try:
        assert _until(lambda: (alone_dir / "started").exists(), 120), "the worker never started"
        os.kill(_init_of(alone), signal.SIGTERM)
        assert alone.wait(60) != 0  # handled: the workers stopped and torchrun exited
    finally:
        if alone.poll() is None:
            os.killpg(alone.pid, signal.SIGKILL)
            alone.wait(30)


def test_the_fault_table_the_pid_1_row_and_plan_say_what_the_measurement_shows() -> None:
    faults = (ROOT / "docs" / "faults.md").read_text(encoding="utf-8")
    assert "waits in its first rendezvous" in faults and "it ignores SIGTERM" in faults
    assert SIGTERM_BEFORE_RENDEZVOUS in pid1_note(()).message
    result = run("plan", str(ROOT / "examples" / "multi-node" / "profile.yaml"))
    assert "waits in its first rendezvous" in result.stdout
    assert SIGTERM_BEFORE_RENDEZVOUS in result.stdout
    one_pod = run("plan", str(ROOT / "examples" / "single-node" / "profile.yaml"))
    assert "first rendezvous" not in one_pod.stdout  # --standalone: no peers to wait for
