"""The elastic smoke test passes a healthy job (issue 25 item 3): every rank runs once (no
restarts from the elastic policy) and a world of minReplicas pods is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch
from runai_spec.facts.kubeflow import OPERATOR_VERSIONS, WORKER, operator_env
from runai_spec.facts.operator import past_active_deadline
from runai_spec.pipeline.checklist import parse_lines
from runai_spec.pipeline.smoke import DEFAULT_DEADLINE_S, QUEUE_ALLOWANCE_S, job_deadline_s
from runai_spec.rehearse import free_port
from runai_spec.render.manifests import parse

PREFLIGHT = ROOT / "src" / "runai_spec" / "preflight.py"


def _committed(example: str, name: str) -> list[dict[str, Any]]:
    text = (ROOT / "examples" / example / name).read_text(encoding="utf-8")
    return parse(text, example)


def _job(example: str, name: str) -> dict[str, Any]:
    [job] = [m for m in _committed(example, name) if m["kind"] == "PyTorchJob"]
    return job


def _preflight_args(job: dict[str, Any]) -> list[str]:
    command = job["spec"]["pytorchReplicaSpecs"][WORKER]["template"]["spec"]["containers"][0]["command"]
    return list(command[command.index("/opt/runai-spec/preflight.py") + 1 :])


@pytest.mark.parametrize("version", OPERATOR_VERSIONS)
def test_the_operator_gives_the_elastic_smoke_job_no_torchrun_restarts(version: str) -> None:
    """elastic.go (v1.7.0-v1.9.0): PET_MAX_RESTARTS whenever elasticPolicy.maxRestarts is set,
    0 included; the real job keeps its restarts."""
    smoke, real = _job("elastic", "smoke.yaml"), _job("elastic", "manifest.yaml")
    assert smoke["spec"]["elasticPolicy"]["maxRestarts"] == 0
    for index in range(smoke["spec"]["pytorchReplicaSpecs"][WORKER]["replicas"]):
        assert operator_env(smoke, WORKER, index, version)["PET_MAX_RESTARTS"] == "0"
        assert operator_env(real, WORKER, index, version)["PET_MAX_RESTARTS"] == str(
            real["spec"]["elasticPolicy"]["maxRestarts"]
        )
    command = smoke["spec"]["pytorchReplicaSpecs"][WORKER]["template"]["spec"]["containers"][0]["command"]
    assert not any(a.startswith("--max-restarts") for a in command)


def test_the_elastic_smoke_test_accepts_the_minimum_world() -> None:
    job = _job("elastic", "smoke.yaml")
    policy, nproc = job["spec"]["elasticPolicy"], int(job["spec"]["nprocPerNode"])
    args = _preflight_args(job)
    assert args[args.index("--world-size") + 1] == str(policy["maxReplicas"] * nproc)
    assert args[args.index("--min-world-size") + 1] == str(policy["minReplicas"] * nproc)


@pytest.mark.parametrize("example", ["single-gpu", "single-node", "multi-node"])
def test_a_fixed_size_smoke_test_expects_exactly_its_world(example: str) -> None:
    job = _job(example, "smoke.yaml")
    [rspec] = [s for r, s in job["spec"]["pytorchReplicaSpecs"].items() if r == WORKER] or [
        job["spec"]["pytorchReplicaSpecs"]["Master"]
    ]
    command = rspec["template"]["spec"]["containers"][0]["command"]
    assert "--min-world-size" not in command and "elasticPolicy" not in job["spec"]


def test_a_smoke_test_pending_longer_than_the_preflight_s_deadline_is_not_failed_for_it() -> None:
    """Issue 40 item 2: activeDeadlineSeconds counts from status.startTime, set while the pods
    are Pending (training-operator v1.9 core/job.go PastActiveDeadline): the job's deadline
    covers the queue (QUEUE_ALLOWANCE_S) and the preflight bounds itself from its start in the
    pod (--deadline). A smoke test that queued longer than the preflight's own deadline, then
    ran for that whole deadline, is not past the job's; it was, at 1800 s for everything."""
    job = _job("multi-node", "smoke.yaml")
    deadline = job["spec"]["runPolicy"]["activeDeadlineSeconds"]
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    args = list(command[command.index("/opt/runai-spec/preflight.py") + 1 :])
    assert args[args.index("--deadline") + 1] == str(DEFAULT_DEADLINE_S)
    assert deadline == job_deadline_s(DEFAULT_DEADLINE_S) == QUEUE_ALLOWANCE_S + 600 + DEFAULT_DEADLINE_S
    queued = DEFAULT_DEADLINE_S + 1
    ran = 600 + DEFAULT_DEADLINE_S  # the longest rendezvous, then the preflight's whole deadline
    assert not past_active_deadline(deadline, 0.0, queued + ran)
    assert past_active_deadline(deadline, 0.0, QUEUE_ALLOWANCE_S + ran)  # a day queued: stale
    readme = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert f"`activeDeadlineSeconds: {deadline}`" in readme and f"`--deadline {DEFAULT_DEADLINE_S}`" in readme


@pytest.mark.torch
def test_the_preflight_bounds_itself_where_it_hangs(tmp_path: Path) -> None:
    """Waiting for a rank that never comes (a store wait in C++), the preflight's own deadline
    ends it with a failed check that names the deadline, exit 1."""
    needs_torch()
    args = ["--world-size", "2", "--join-timeout", "300", "--deadline", "3"]
    args += ["--checkpoint-dir", str(tmp_path / "ckpt")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC", "PREFLIGHT_"))}
    env.update(
        RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, str(PREFLIGHT), *args], env=env, capture_output=True, text=True, timeout=120
    )
    [row] = [r for r in parse_lines(done.stdout) if r.get("check") == "training"]
    assert row["ok"] is False and row["deadline_s"] == 3 and "own deadline of 3 s" in row["message"]
    assert done.returncode == 1, done.stderr


@pytest.mark.torch
@pytest.mark.parametrize(("minimum", "passes"), [(True, True), (False, False)])
def test_preflight_with_the_smoke_s_world_arguments_passes_a_smaller_elastic_world(
    tmp_path: Path, minimum: bool, passes: bool
) -> None:
    """One process standing for a round formed with minReplicas pods: the smoke's
    --world-size/--min-world-size pair (the elastic example's 32 and 16, scaled to 2 and 1)
    passes it; --world-size alone, as the smoke render had it, fails a healthy job."""
    needs_torch()
    args = [
        "--world-size",
        "2",
        "--steps",
        "2",
        "--checkpoint-every",
        "2",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--join-timeout",
        "20",
    ]
    if minimum:
        args += ["--min-world-size", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env.update(
        RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, str(PREFLIGHT), *args], env=env, capture_output=True, text=True, timeout=120
    )
    [row] = [r for r in parse_lines(done.stdout) if r.get("check") == "world-size"]
    assert row["ok"] is passes, row
    assert (done.returncode == 0) is passes, done.stderr


@pytest.mark.torch
def test_an_elastic_round_at_its_minimum_passes_the_global_batch_declared_at_the_most(
    tmp_path: Path,
) -> None:
    """Issue 40 item 1: the profile declares its global batch at the most pods (validate's
    global-batch rule); a round formed with minReplicas pods runs a smaller batch per step and
    is healthy. One process stands for that round (the smoke's --world-size 2, --min-world-size
    1, local 2, declared 4): the check passes, names this run's batch, and the smoke's world
    arguments are all it needs (the preflight compared with the world it got and failed)."""
    needs_torch()
    args = ["--world-size", "2", "--min-world-size", "1", "--local-batch", "2", "--global-batch", "4"]
    args += ["--steps", "2", "--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "ckpt")]
    args += ["--join-timeout", "20"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC", "PREFLIGHT_"))}
    env.update(
        RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        CUDA_VISIBLE_DEVICES="",
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, str(PREFLIGHT), *args], env=env, capture_output=True, text=True, timeout=120
    )
    rows = {r.get("check"): r for r in parse_lines(done.stdout)}
    row = rows["global-batch"]
    assert row["ok"] is True, row
    assert row["computed"] == 4 and row["expected_here"] == 2 and row["processes"] == 1
    assert "this run: 1 processes, 2 per step" in row["message"]
    assert done.returncode == 0, done.stderr
    # a declared batch that holds at no world of the policy still fails
    wrong = [*args[: args.index("--global-batch") + 1], "3", *args[args.index("--global-batch") + 2 :]]
    env["MASTER_PORT"] = str(free_port())
    bad = subprocess.run(
        [sys.executable, str(PREFLIGHT), *wrong], env=env, capture_output=True, text=True, timeout=120
    )
    [row] = [r for r in parse_lines(bad.stdout) if r.get("check") == "global-batch"]
    assert row["ok"] is False and bad.returncode != 0
