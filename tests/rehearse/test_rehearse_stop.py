"""`rehearse` stopped from outside ends every pod's process tree (issue 42 item 7): SIGINT and
SIGTERM through its own clean-up, SIGKILL through the kernel (the parent-death signal, and the
PID namespace's init where the pod has one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, needs_torch

# every rank says when it is in the group (the audit layer has long been installed by then)
SLEEPS = """\
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
open(f"/checkpoints/ready-{dist.get_rank()}", "w").close()
time.sleep(600)
"""


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries MARK (the rehearsal's, its pods', their ranks')."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark.encode() in environ.read_bytes():
                state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(environ.parent.name))
        except (OSError, IndexError):
            continue
    return found


def _wait(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def _profile(tmp_path: Path, example: str) -> Path:
    profile = yaml.safe_load((ROOT / "examples" / example / "profile.yaml").read_text())
    profile["command"] = ["train.py"]
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    (tmp_path / "train.py").write_text(SLEEPS)
    return path


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "example", "network"),
    [
        pytest.param(signal.SIGTERM, "single-node", "auto", marks=pytest.mark.long),  # CI: SIGKILL's case
        pytest.param(signal.SIGINT, "single-node", "auto", marks=pytest.mark.long),
        # two pods on loopback: no PID namespace, torchrun's workers end through the audit layer
        (signal.SIGKILL, "multi-node", "loopback"),
        pytest.param(signal.SIGKILL, "single-node", "auto", marks=pytest.mark.long),
    ],
    ids=["sigterm", "sigint", "sigkill-loopback", "sigkill-pid-namespace"],
)
def test_a_stopped_rehearsal_leaves_no_process_of_its_pods(
    tmp_path: Path, sig: signal.Signals, example: str, network: str
) -> None:
    needs_torch()
    path = _profile(tmp_path, example)
    mark = f"RUNAI_SPEC_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    command = [
        sys.executable,
        "-m",
        "runai_spec",
        "rehearse",
        str(path),
        "--own-script",
        "--procs-per-pod",
        "2",
    ]
    command += ["--logs", "logs", "--timeout", "300", "--network", network]
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as rehearse:
        try:
            world = 4 if example == "multi-node" else 2
            volumes = tmp_path / "logs" / "volumes"
            assert _wait(lambda: len(list(volumes.glob("*/ready-*"))) >= world, 120), "the ranks never joined"
            rehearse.send_signal(sig)
            rehearse.wait(60)
            assert _wait(lambda: not _marked(mark), 30), f"left running: {_marked(mark)}"
        finally:
            for pid in _marked(mark):  # never leave them to the next test
                os.kill(pid, signal.SIGKILL)
