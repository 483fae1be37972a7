"""torchrun's shutdown window (issue 25 item 1): the render gives the ranks the pod's grace
period to save on SIGTERM (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, read by torch 2.12 and later), and
`plan` says how long they really have per torch version."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, example_job, needs_torch, pytorch_container, pytorch_containers, run
from runai_spec.facts.torchrun import (
    SHUTDOWN_DEFAULT_S,
    SHUTDOWN_MARGIN_S,
    SHUTDOWN_TIMEOUT_ENV,
    shutdown_timeout_s,
    shutdown_window,
    torch_release,
)
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.failure import failure_semantics, save_time
from runai_spec.rehearse.spec import RehearsalSpec

TORCHRUN_EXAMPLES = ("single-node", "multi-node", "elastic")


def _container_env(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for container in pytorch_containers(job) for item in container.get("env", [])]


def _grace(job: dict[str, Any]) -> set[int]:
    return {
        rspec["template"]["spec"]["terminationGracePeriodSeconds"]
        for rspec in job["spec"]["pytorchReplicaSpecs"].values()
    }


@pytest.mark.parametrize(
    ("version", "window"),
    [
        # torch <= 2.11: PContext.close(timeout=30), nothing reads a setting (2.11.0 wheel)
        ("2.5.1", 30),
        ("2.9.0", 30),
        ("2.11.0+cu130", 30),
        # torch 2.12.0 and 2.13.0: LaunchConfig reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT, which the
        # render sets to the grace period less the margin (issue 40 item 4)
        ("2.12.0", 290),
        ("2.13", 290),
        ("2.13.0+cpu", 290),
        (None, None),
        ("nightly", None),
    ],
)
def test_the_window_per_torch_version(version: str | None, window: int | None) -> None:
    assert shutdown_window(version, 300) == window


def test_before_2_12_a_grace_period_under_30_s_is_the_window() -> None:
    assert shutdown_window("2.11.0", 20) == 20 and shutdown_window("2.13.0", 20) == 20 - SHUTDOWN_MARGIN_S
    assert torch_release("2.13.0+cu130") == (2, 13) and torch_release("") is None


@pytest.mark.parametrize("example", TORCHRUN_EXAMPLES)
def test_every_torchrun_render_sets_the_shutdown_timeout_to_the_grace_period_less_a_margin(
    example: str,
) -> None:
    """Issue 40 item 4: a window equal to the grace period races the kubelet's SIGKILL."""
    job = example_job(example)
    [grace] = _grace(job)
    values = {item["value"] for item in _container_env(job) if item["name"] == SHUTDOWN_TIMEOUT_ENV}
    assert values == {str(grace - SHUTDOWN_MARGIN_S)} and SHUTDOWN_MARGIN_S > 0
    # the variable, never the flag: torch <= 2.11 refuses a flag it does not know
    assert not any(a.startswith("--shutdown") for c in pytorch_containers(job) for a in c["command"])


def test_the_one_gpu_render_has_no_torchrun_and_no_shutdown_timeout() -> None:
    job = example_job("single-gpu")
    assert SHUTDOWN_TIMEOUT_ENV not in {item["name"] for item in _container_env(job)}


def test_the_smoke_render_keeps_the_shutdown_timeout() -> None:
    text = (ROOT / "examples" / "elastic" / "smoke.yaml").read_text(encoding="utf-8")
    assert f'name: "{SHUTDOWN_TIMEOUT_ENV}"' in text


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("2.13.0", "290 s to checkpoint"),
        ("2.11.0", f"{SHUTDOWN_DEFAULT_S} s (torch 2.11.0) to checkpoint"),
        (None, "290 s on torch >= 2.12, 30 s before to checkpoint"),
    ],
)
def test_plan_states_the_real_window_per_declared_torch(
    version: str | None, says: str, write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    profile = {**base_profile, "preset": "h200-8gpu"}
    if version is not None:
        profile["torch_version"] = version
    plan = prepare_workload(write_profile(profile)).plan
    [preempt] = [f for f in failure_semantics(plan).faults if f.fault.startswith("preemption")]
    assert says in preempt.outcome
    choices = dict(failure_semantics(plan).choices)
    if version == "2.11.0":
        assert "only holds the GPUs" in choices["time to save on SIGTERM"]
        assert save_time(plan) == "30 s (torch 2.11.0)"


def test_the_profile_may_not_set_the_shutdown_timeout(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    path = write_profile({**base_profile, "env": {SHUTDOWN_TIMEOUT_ENV: "9999"}})
    result = run("validate", str(path))
    assert result.exit_code == 1
    assert f"{SHUTDOWN_TIMEOUT_ENV} is set by the preset" in result.stderr
    assert "[reserved-env]" in result.stderr


def test_a_torch_version_that_is_none_is_bad_input(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    result = run("validate", str(write_profile({**base_profile, "torch_version": "latest"})))
    assert result.exit_code == 2 and "torch_version" in result.stderr


# Needs 45 s to write its checkpoint once SIGTERM comes (a large model), longer than the 30 s
# torchrun gives by default; says when it is ready, saves, then exits 143 as a killed rank.
SLOW_SAVE = """\
import os, signal, sys, time
out = sys.argv[1]
def on_sigterm(signum, frame):
    time.sleep(45)
    with open(os.path.join(out, "saved"), "w") as fh:
        fh.write("step 1")
    os._exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
open(os.path.join(out, "ready"), "w").close()
while True:
    time.sleep(1)
"""


@pytest.mark.long  # a 45 s wait: the derivation's tests above run in CI (issue 37: CI near 5 minutes)
@pytest.mark.slow
@pytest.mark.torch
def test_a_45_s_save_on_sigterm_completes_with_the_render_s_setting_and_is_killed_without(
    tmp_path: Path,
) -> None:
    """torchrun (PID 1 of a torchrun pod) gets SIGTERM as the kubelet sends it; the two
    launches differ only in the rendered variable. Both run at once: ~50 s in all."""
    needs_torch()
    job = example_job("single-node")
    [grace] = _grace(job)
    [rendered] = {item["value"] for item in _container_env(job) if item["name"] == SHUTDOWN_TIMEOUT_ENV}
    assert grace >= 45 + 10
    script = tmp_path / "slow_save.py"
    script.write_text(SLOW_SAVE)
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC", "TORCH_ELASTIC"))
    }
    base["CUDA_VISIBLE_DEVICES"] = ""
    procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for case, extra in (("rendered", {SHUTDOWN_TIMEOUT_ENV: rendered}), ("without", {})):
        out = tmp_path / case
        out.mkdir()
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            "--nproc-per-node=1",
            str(script),
            str(out),
        ]
        procs[case] = (
            subprocess.Popen(
                argv,
                env={**base, **extra},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            ),
            out,
        )
    logs: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 120
        while not all((out / "ready").exists() for _, out in procs.values()):
            assert time.monotonic() < deadline, "the ranks never started"
            assert all(p.poll() is None for p, _ in procs.values())
            time.sleep(0.1)
        for proc, _ in procs.values():
            proc.send_signal(signal.SIGTERM)  # to torchrun only, as the runtime sends it
        for case, (proc, _) in procs.items():
            logs[case], _ = proc.communicate(timeout=grace)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    assert (tmp_path / "rendered" / "saved").read_text() == "step 1", logs["rendered"]
    assert "forcefully exiting" not in logs["rendered"]
    assert not (tmp_path / "without" / "saved").exists()
    # torch's own words (elastic/multiprocessing/api.py): the 30 s were over, SIGKILL
    assert "forcefully exiting via" in logs["without"], logs["without"]


# The same save under the rehearsal's preemption of the rendered single-node job: SIGTERM to
# the pod's PID 1 (torchrun), SIGKILL after the pod's real grace period (300 s, unscaled).
SLOW_SAVE_ON_VOLUME = """\
import os, signal, time
import torch
if os.path.exists("/checkpoints/started"):
    raise SystemExit(0)  # the recreated pod: the job ends
def on_sigterm(signum, frame):
    time.sleep(45)
    with open("/checkpoints/saved-on-sigterm", "w") as fh:
        fh.write("step 1")
    os._exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
open("/checkpoints/started", "w").close()
torch.save({"step": 1}, "/checkpoints/state.pt")  # the first save: the preemption comes now
while True:
    time.sleep(0.2)
"""


def _rehearse_preemption(tmp_path: Path, job: dict[str, Any]) -> tuple[Path, str]:
    from runai_spec.rehearse import rehearse_manifests

    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    (tree / "train.py").write_text(SLOW_SAVE_ON_VOLUME)
    result = rehearse_manifests(
        [job],
        RehearsalSpec(
            own_script=True,
            workdir=tree,
            logs_dir=tmp_path / "logs",
            procs_per_pod=1,
            preempt="checkpoint",
            timeout_s=240,
            device="cpu",
            backoff_scale=0.0,
        ),
    )
    [fault] = [c for c in result.checks if c.check == "fault"]
    [pod] = [r["template"]["spec"] for r in job["spec"]["pytorchReplicaSpecs"].values()]
    [volume] = [m["name"] for m in pytorch_container(job)["volumeMounts"] if m["mountPath"] == "/checkpoints"]
    [claim] = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if v["name"] == volume]
    return tmp_path / "logs" / "volumes" / claim / "saved-on-sigterm", fault.message


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
def test_the_rehearsed_preemption_gives_torchrun_s_ranks_the_rendered_window(tmp_path: Path) -> None:
    needs_torch()
    rendered = example_job("single-node")
    saved, message = _rehearse_preemption(tmp_path / "rendered", rendered)
    assert saved.read_text() == "step 1", message
    without = copy.deepcopy(rendered)
    for container in pytorch_containers(without):
        container["env"] = [e for e in container["env"] if e["name"] != SHUTDOWN_TIMEOUT_ENV]
    saved, message = _rehearse_preemption(tmp_path / "without", without)
    assert not saved.exists(), message


def test_the_timeout_is_at_least_one_second() -> None:
    assert shutdown_timeout_s(5) == 1 and shutdown_timeout_s(300) == 300 - SHUTDOWN_MARGIN_S


def test_plan_says_both_windows(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> None:
    """Issue 40 item 4: the shutdown window (grace less the margin, and why) and the restart
    window (torch's fixed 30 s when torchrun restarts its ranks after a peer's failure)."""
    profile = {**base_profile, "preset": "h200-8gpu", "torch_version": "2.13.0"}
    plan = prepare_workload(write_profile(profile)).plan
    words = dict(failure_semantics(plan).choices)["time to save on SIGTERM"]
    grace = plan.termination_grace_period_seconds
    assert f"gives them {grace - SHUTDOWN_MARGIN_S} s" in words
    assert f"grace period less {SHUTDOWN_MARGIN_S} s" in words and "before the kubelet's" in words
    assert f"fixed {SHUTDOWN_DEFAULT_S} s" in words and "peer's failure" in words
