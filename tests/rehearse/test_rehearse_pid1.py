"""Each rehearsed pod's command is PID 1 of a PID namespace of its own (issue 25 item 2), so
that a script that does not handle SIGTERM ignores it as in its container."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import example_job, needs_torch
from runai_spec.rehearse import argv as argv_module
from runai_spec.rehearse import rehearse_manifests
from runai_spec.rehearse.process_tree import PID_NAMESPACE, can_pid_namespace, namespace_init
from runai_spec.rehearse.spec import RehearsalSpec

needs_pid_ns = pytest.mark.skipif(not can_pid_namespace(), reason="needs root and util-linux unshare")

# no SIGTERM handler: as PID 1 it ignores SIGTERM; elsewhere SIGTERM ends it (exit 143). Its
# second start (the recreated pod) ends the job.
NO_HANDLER = """\
import os, time
if os.path.exists("/checkpoints/started"):
    raise SystemExit(0)
open("/checkpoints/started", "w").close()
while True:
    time.sleep(0.2)
"""


@needs_pid_ns
def test_python_as_pid_1_ignores_sigterm_and_the_wrapper_finds_it() -> None:
    proc = subprocess.Popen(
        [*PID_NAMESPACE, sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        init = None
        while init is None and time.monotonic() < deadline:
            init = namespace_init(proc.pid)
            time.sleep(0.05)
        assert init is not None and init != proc.pid
        status = Path(f"/proc/{init}/status").read_text()
        assert [line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:")] == ["1"]
        os.kill(init, signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(3)  # ignored: PID 1 has no default action for SIGTERM
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _one_gpu_job(grace: int) -> dict[str, Any]:
    job = copy.deepcopy(example_job("single-gpu"))
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return job


def _preempted(tmp_path: Path, name: str) -> str:
    (tmp_path / name).mkdir()
    work = tmp_path / name / "tree"
    work.mkdir()
    (work / "train.py").write_text(NO_HANDLER)
    result = rehearse_manifests(
        [_one_gpu_job(6)],
        RehearsalSpec(
            own_script=True,
            workdir=work,
            logs_dir=tmp_path / name / "logs",
            preempt="@3",
            timeout_s=120,
            device="cpu",
            backoff_scale=0.0,
        ),
    )
    [fault] = [c for c in result.checks if c.check == "fault"]
    return str(fault.details["deleted"])


@pytest.mark.torch
@pytest.mark.slow
@needs_pid_ns
def test_a_script_without_a_handler_sits_out_the_grace_period_only_as_pid_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_torch()
    assert "SIGKILL after the grace period of 6 s" in _preempted(tmp_path, "pid1")
    monkeypatch.setattr(argv_module, "can_pid_namespace", lambda: False)
    assert "exited 143" in _preempted(tmp_path, "plain")
