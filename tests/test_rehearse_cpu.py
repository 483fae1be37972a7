"""CI rehearses the multi-node example on CPU (2 pods x 2 processes, gloo) and breaks the
setup on purpose for each failure the checklist exists to catch."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runai_spec.rehearse import PreflightSettings, RehearseResult, rehearse_manifests

pytestmark = [pytest.mark.torch, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
SETTINGS = PreflightSettings(local_batch=4, grad_accum=8, global_batch=512, join_timeout_s=20,
                             collective_timeout_s=60)


@pytest.fixture(autouse=True)
def _torch() -> None:
    pytest.importorskip("torch")


def multi_node() -> dict:
    return yaml.safe_load((ROOT / "examples" / "multi-node" / "manifest.yaml").read_text())


def rehearse(tmp_path: Path, job: dict | None = None, **kw: object) -> RehearseResult:
    kw.setdefault("settings", SETTINGS)
    kw.setdefault("procs_per_pod", 2)
    return rehearse_manifests([job or multi_node()], device="cpu", logs_dir=tmp_path,
                              **{"timeout_s": 90.0, **kw})  # type: ignore[arg-type]


def test_multi_node_rehearses_on_cpu_and_every_check_passes(tmp_path: Path) -> None:
    r = rehearse(tmp_path)
    assert r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert r.world_size == 4 and r.backend == "gloo"
    assert {c.check for c in r.checks if c.status == "pass"} >= {
        "ranks", "world-size", "device", "global-batch", "checkpoint", "metrics",
        "bus-bandwidth", "shutdown", "pods"}
    # per-rank logs from torchrun, per pod
    assert len(list(tmp_path.glob("*/ranks/*/attempt_0/*/stdout.log"))) == 4


def test_two_ranks_on_one_device_fail_the_device_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, env={"PREFLIGHT_DEVICE_ID": "cpu:the-same-one"})
    device = r.check("device")
    assert device is not None and device.status == "fail" and "share" in device.message
    assert not r.ok


def test_a_missing_pod_fails_the_ranks_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, skip_pods=["worker-0"], timeout_s=30.0)
    ranks = r.check("ranks")
    assert ranks is not None and ranks.status == "fail"
    assert "worker-0 never started" in ranks.message and not r.ok


def test_a_pod_with_the_wrong_process_count_fails_world_size(tmp_path: Path) -> None:
    job = copy.deepcopy(multi_node())
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["torchrun", "--nproc-per-node=1", *worker["command"][1:]]
    r = rehearse(tmp_path, job, procs_per_pod=None,
                 settings=PreflightSettings(**{**SETTINGS.__dict__, "global_batch": None}),
                 env={"PET_NPROC_PER_NODE": "2"})
    ws = r.check("world-size")
    assert ws is not None and ws.status == "fail" and "a world of 3" in ws.message


def test_a_wrong_global_batch_fails_the_batch_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, settings=PreflightSettings(**{**SETTINGS.__dict__,
                                                         "global_batch": 256}))
    gb = r.check("global-batch")
    assert gb is not None and gb.status == "fail" and "256" in gb.message


def test_a_checkpoint_that_does_not_reload_fails_the_checkpoint_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, env={"PREFLIGHT_BREAK": "checkpoint"})
    ck = r.check("checkpoint")
    assert ck is not None and ck.status == "fail" and "does not reload" in ck.message


def test_preflight_alone_names_the_rank_that_never_joined(tmp_path: Path) -> None:
    script = ROOT / "src" / "runai_spec" / "preflight.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29731",
               CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(script), "--join-timeout", "3",
                           "--checkpoint-dir", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert '"check": "ranks", "status": "fail"' in done.stdout
    assert "rank(s) 1 of 2 did not join" in done.stdout


def test_a_pod_killed_after_the_first_checkpoint_restarts_and_resumes(tmp_path: Path) -> None:
    r = rehearse(tmp_path, restart_after_checkpoint=True)
    assert r.ok, [(c.attempt, c.check, c.status, c.message) for c in r.checks]
    restart = r.check("restart")
    assert restart is not None and restart.status == "pass", restart
    assert restart.details["killed"] == "worker-0" and restart.details["killed_ranks"] == [2, 3]
    step = restart.details["first_checkpoint_step"]
    # the kill lands right after the first checkpoint: nothing trains past it
    first_ckpt = r.check("checkpoint", attempt=0)
    assert first_ckpt is not None and first_ckpt.status == "pass"
    assert first_ckpt.details["saved_step"] == step == SETTINGS.checkpoint_every
    # the survivor's torchrun gives up on its own once its peer is gone, as in the cluster
    survivor = restart.details["survivors"]["master-0"]
    assert survivor["exit_code"] not in (0, None) and not survivor["timed_out"]
    assert "closed" in survivor["first_failure"].lower()
    killed = [(o.name, o.attempt) for o in r.pods if o.killed]
    assert killed == [("worker-0", 0)]
    # the restarted job resumes from that checkpoint on every rank, then trains on: it
    # writes and reloads a checkpoint and emits metrics from rank 0 itself
    first_resume, resume = r.check("resume", attempt=0), r.check("resume", attempt=1)
    assert first_resume is not None and first_resume.status == "skip"
    assert resume is not None and resume.status == "pass" and resume.ranks == (0, 1, 2, 3)
    assert resume.details["resumed_from"] == step > 0 and resume.details["next_step"] == step + 1
    assert resume.details["digest"] == first_ckpt.details["digest"]
    ckpt = r.check("checkpoint", attempt=1)
    assert ckpt is not None and ckpt.status == "pass" and ckpt.details["saved_step"] > step
    metrics = r.check("metrics", attempt=1)
    assert metrics is not None and metrics.status == "pass"
    assert metrics.details["emitters"] == [0] and metrics.details["steps"] >= 1
    pods = r.check("pods", attempt=1)
    assert pods is not None and pods.status == "pass"


def test_a_restarted_job_that_does_not_resume_fails_the_restart_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, restart_after_checkpoint=True, env={"PREFLIGHT_BREAK": "resume"})
    restart = r.check("restart")
    assert restart is not None and restart.status == "fail"
    assert "did not resume from the checkpoint of step 2" in restart.message
    assert "rank(s) 0, 1, 2 and 3 started over at step 1" in restart.message
    assert restart.failed_ranks == (0, 1, 2, 3)
    assert not r.ok and "restart" in r.failed
