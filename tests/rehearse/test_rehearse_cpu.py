"""CI rehearses the multi-node example on CPU (2 pods x 2 processes, gloo) and breaks the
setup on purpose for each failure the checklist exists to catch."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import ROOT, example_job, needs_torch
from runai_spec.cli import app
from runai_spec.facts.torchrun import split_command
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse import PreflightSettings, RehearseResult, preflight_settings, rehearse_manifests
from runai_spec.rehearse.spec import RehearsalSpec

pytestmark = [pytest.mark.torch, pytest.mark.slow]
SETTINGS = PreflightSettings(
    local_batch=4, grad_accum=8, global_batch=512, join_timeout_s=20, collective_timeout_s=60
)


@pytest.fixture(autouse=True)
def _torch() -> None:
    needs_torch()


def old_launcher(job: dict[str, Any] | None = None) -> dict[str, Any]:
    """The multi-node example as rendered before issue 11: bare (static) torchrun, without
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE, backoffLimit 3."""
    job = job or example_job("multi-node")
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["command"] = ["torchrun", *split_command(container["command"]).entry]
        container["env"] = [
            e for e in container.get("env", []) if e["name"] != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
        ]
    job["spec"]["runPolicy"]["backoffLimit"] = 3
    return job


def rehearse(tmp_path: Path, job: dict[str, Any] | None = None, **kw: Any) -> RehearseResult:
    kw.setdefault("settings", SETTINGS)
    kw.setdefault("procs_per_pod", 2)
    return rehearse_manifests(
        [job or example_job("multi-node")],
        RehearsalSpec(device="cpu", logs_dir=tmp_path, **{"timeout_s": 90.0, **kw}),
    )


# what a passing rehearsal of a shipped example passes, whatever its layout
PASS_IN_EVERY_LAYOUT = frozenset(
    {"ranks", "world-size", "device", "global-batch", "checkpoint", "metrics", "shutdown", "pods"}
)


def passed(r: RehearseResult) -> set[str]:
    return {c.check for c in r.checks if c.status == "pass"}


# long (issue 29): CI rehearses the multi-node example, 2 pods x 2 processes, in netns mode
# (test_rehearse_network: every row passes, notes or skips) and with a fault
# (test_rehearse_shipped: the kill of worker-0, every rank resumes), and its own scripts
@pytest.mark.long
def test_multi_node_rehearses_on_cpu_and_every_check_passes(tmp_path: Path) -> None:
    r = rehearse(tmp_path)
    assert r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert r.world_size == 4 and r.backend == "gloo"
    assert passed(r) >= {*PASS_IN_EVERY_LAYOUT, "bus-bandwidth"}
    # per-rank logs from the rendered --log-dir, per pod, in the checkpoint volume's folder
    logs = tmp_path / "volumes" / "nlp-lab-checkpoints" / "logs"
    assert len(list(logs.glob("llm-7b-fsdp-*/*/attempt_0/*/stdout.log"))) == 4


def test_single_node_rehearses_on_cpu_and_every_check_passes(tmp_path: Path) -> None:
    # the one-pod layout (issue 29: CI rehearses every layout): torchrun --standalone in
    # master-0 only, the profile's batch settings as `rehearse` derives them
    workload = prepare_workload(ROOT / "examples" / "single-node" / "profile.yaml")
    r = rehearse_manifests(
        list(workload.manifests),
        RehearsalSpec(
            settings=preflight_settings(workload),
            procs_per_pod=2,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=90.0,
        ),
    )
    assert r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert r.world_size == 2 and r.backend == "gloo"
    assert [o.name for o in r.pods] == ["master-0"]
    assert passed(r) >= PASS_IN_EVERY_LAYOUT


ELASTIC_SETTINGS = PreflightSettings(
    local_batch=8, grad_accum=2, global_batch=512, join_timeout_s=30, collective_timeout_s=60
)


def test_the_elastic_example_rehearses_on_cpu_one_process_a_pod(tmp_path: Path) -> None:
    """CI's rehearsal of the elastic layout (issue 29): the example's four worker pods, no
    Master, the c10d store on worker-0, one process each. Its eviction under the fault model
    (test_rehearse_evict, 39 CPU s) and its two processes a pod (below) are `long`."""
    r = rehearse(tmp_path, example_job("elastic"), settings=ELASTIC_SETTINGS, procs_per_pod=1)
    assert r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert r.world_size == 4 and [o.name for o in r.pods] == [f"worker-{i}" for i in range(4)]
    assert passed(r) >= PASS_IN_EVERY_LAYOUT


@pytest.mark.long
def test_elastic_worker_only_job_starts_every_process_of_every_pod(tmp_path: Path) -> None:
    # No Master: the operator injects no PET_NPROC_PER_NODE, so only the launcher's own
    # --nproc-per-node makes torchrun start more than one process per pod.
    job = example_job("elastic")
    r = rehearse(tmp_path, job, settings=ELASTIC_SETTINGS)
    assert r.ok, [(c.check, c.status, c.message) for c in r.checks]
    world = r.check("world-size")
    assert r.world_size == 8 and world is not None and "world of 8" in world.message


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_two_ranks_on_one_device_fail_the_device_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, env={"PREFLIGHT_DEVICE_ID": "cpu:the-same-one"})
    device = r.check("device")
    assert device is not None and device.status == "fail" and "share" in device.message
    assert not r.ok


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_a_missing_pod_fails_the_ranks_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, skip_pods=["worker-0"], timeout_s=30.0)
    ranks = r.check("ranks")
    assert ranks is not None and ranks.status == "fail"
    assert "worker-0 never started" in ranks.message and not r.ok


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_a_pod_with_the_wrong_process_count_fails_world_size(tmp_path: Path) -> None:
    job = copy.deepcopy(example_job("multi-node"))
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["torchrun", "--nproc-per-node=1", *worker["command"][1:]]
    r = rehearse(
        tmp_path,
        job,
        procs_per_pod=None,
        settings=PreflightSettings(**{**SETTINGS.__dict__, "global_batch": None}),
        env={"PET_NPROC_PER_NODE": "2"},
    )
    ws = r.check("world-size")
    assert ws is not None and ws.status == "fail" and "a world of 3" in ws.message


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_a_wrong_global_batch_fails_the_batch_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, settings=PreflightSettings(**{**SETTINGS.__dict__, "global_batch": 256}))
    gb = r.check("global-batch")
    assert gb is not None and gb.status == "fail" and "256" in gb.message


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_a_checkpoint_that_does_not_reload_fails_the_checkpoint_check(tmp_path: Path) -> None:
    r = rehearse(tmp_path, env={"PREFLIGHT_BREAK": "checkpoint"})
    ck = r.check("checkpoint")
    assert ck is not None and ck.status == "fail" and "does not reload" in ck.message


def test_preflight_alone_names_the_rank_that_never_joined(tmp_path: Path) -> None:
    script = ROOT / "src" / "runai_spec" / "preflight.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env.update(
        RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29731", CUDA_VISIBLE_DEVICES=""
    )
    done = subprocess.run(
        [sys.executable, str(script), "--join-timeout", "3", "--checkpoint-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert '"check": "ranks", "status": "fail"' in done.stdout
    assert "rank(s) 1 of 2 did not join" in done.stdout


@pytest.mark.long
def test_a_pod_killed_after_the_first_checkpoint_resumes_but_the_static_rendezvous_fails(
    tmp_path: Path,
) -> None:
    # --restart-after-checkpoint: a --kill of the hardest pod (master-0, the store host) right
    # after the first checkpoint, run under the kubelet/operator model like any --kill
    r = rehearse(tmp_path, old_launcher(), restart_after_checkpoint=True, backoff_scale=0.1)
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.message.startswith("kill master-0 after the first checkpoint"), fault.message
    # the checkpoint and resume work, but the old launcher's static rendezvous cannot be trusted to
    # survive an in-place restart in the cluster: the rehearsal must not say it recovers
    assert fault.status == "fail" and not r.ok, fault.message
    assert "static rendezvous, which never re-admits a restarted pod" in fault.message
    assert r.failed == ("fault",), [(c.check, c.status, c.message) for c in r.checks]
    assert fault.details["phase"] == "Succeeded" and "master-0" in fault.details["restarted"]
    killed = [(o.name, o.attempt) for o in r.pods if o.killed]
    assert killed == [("master-0", 0)]
    step = fault.details["saved_step"]
    assert step == SETTINGS.checkpoint_every
    # the job as it ended resumes from that checkpoint on every rank, then trains on: it
    # writes and reloads a checkpoint and emits metrics from rank 0 itself
    assert fault.details["resumed_ranks"] == [0, 1, 2, 3]
    resume = r.check("resume")
    assert resume is not None and resume.status == "pass" and resume.ranks == (0, 1, 2, 3)
    assert resume.details["resumed_from"] == step > 0 and resume.details["next_step"] == step + 1
    ckpt = r.check("checkpoint")
    assert ckpt is not None and ckpt.status == "pass" and ckpt.details["saved_step"] > step
    metrics = r.check("metrics")
    assert metrics is not None and metrics.status == "pass"
    assert metrics.details["emitters"] == [0] and metrics.details["steps"] >= 1


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_a_restarted_job_that_does_not_resume_fails_the_restart_check(tmp_path: Path) -> None:
    r = rehearse(
        tmp_path, restart_after_checkpoint=True, backoff_scale=0.1, env={"PREFLIGHT_BREAK": "resume"}
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "fail" and not r.ok
    assert "no rank resumed the saved step 2" in fault.message, fault.message
    assert fault.details["resumed_ranks"] == []
    resume = r.check("resume")
    assert resume is not None and resume.status == "skip" and "fresh start" in resume.message


# --own-script: the profile's own command, two pods x one process on gloo, run in tmp_path

ALL_REDUCE = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")  # from torchrun's RANK, WORLD_SIZE, MASTER_ADDR/PORT
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of world {dist.get_world_size()}: sum {t.item():g}", flush=True)
if dist.get_rank() == 0:  # the checkpoint volume of the profile, mounted at its path
    torch.save({"step": 1, "sum": t}, "/checkpoints/state.pt")
dist.barrier()
dist.destroy_process_group()
"""
RANK_1_RAISES = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 breaks on purpose")
print("rank 0 done", flush=True)
dist.destroy_process_group()  # else gloo aborts the exit of rank 0 too
"""
# bounded: 120 s, far longer than the test, in case the rehearsal failed to stop it
RUNS_ON = """\
import os, time
import torch, torch.distributed as dist
from pathlib import Path
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    torch.save({"step": 0}, "/checkpoints/state.pt")
marker = Path(f"alive.{os.environ['RANK']}.{os.getpid()}")
for i in range(600):
    marker.write_text(str(i))
    time.sleep(0.2)
"""


def rehearse_own_script(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    profile: dict[str, Any],
    script: str,
    *args: str,
) -> tuple[Any, dict[str, Any], str]:
    """`rehearse --own-script` of a two-pod profile whose command is `script`, run from
    tmp_path: (CLI result, result.json, the table's pods row)."""
    (tmp_path / "train.py").write_text(script)
    path = write_profile({**profile, "command": ["train.py"]})
    monkeypatch.chdir(tmp_path)  # the pods run the command in the current folder
    monkeypatch.setenv("COLUMNS", "1000")  # one table row, one line
    result = CliRunner().invoke(
        app, ["rehearse", str(path), "--own-script", "--procs-per-pod", "1", "--logs", "logs", *args]
    )
    if not (tmp_path / "logs" / "result.json").exists():
        pytest.fail(f"exit {result.exit_code}, no rehearsal:\n{result.output}")
    report = json.loads((tmp_path / "logs" / "result.json").read_text())
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ pods "))
    return result, report, row


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in report["checks"]}


@pytest.mark.long  # CI passes an own script through the accelerate one (issue 37: CI's time)
def test_own_script_that_all_reduces_and_exits_0_passes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    # the script writes torch.save checkpoints, and says so (the checkpoint row compares)
    profile = {**base_profile, "checkpoint": {**base_profile["checkpoint"], "format": "torch"}}
    result, report, row = rehearse_own_script(tmp_path, monkeypatch, write_profile, profile, ALL_REDUCE)
    assert result.exit_code == 0, result.output
    pods = checks(report)["pods"]
    assert pods["status"] == "pass"
    assert pods["message"] == "master-0, worker-0: started, ran and exited 0"
    # the guide's checklist ran on the script, from what each rank did
    rows = checks(report)
    assert "checklist" not in rows
    for name in ("ranks", "world-size", "checkpoint", "shutdown"):
        assert rows[name]["status"] == "pass", rows[name]
    # no optimizer steps: the global batch is not measured, and the row says so (issue 24)
    assert rows["global-batch"]["status"] == "note", rows["global-batch"]
    assert rows["global-batch"]["message"].startswith("not measured: no rank stepped a torch optimizer")
    assert rows["checkpoint"]["message"].startswith(
        "1 whole checkpoint save(s) under /checkpoints by rank(s) 0"
    )
    assert rows["device"]["status"] == "skip" and "no GPU" in rows["device"]["message"]
    assert rows["resume"]["status"] == "skip" and "--kill" in rows["resume"]["message"]
    assert "started, ran and exited 0" in row
    # and where each rank's own output is: every rank did its all-reduce
    logs = tmp_path.resolve() / "logs"
    assert f"each rank: {logs}/<pod>/ranks/<run id>/attempt_0/<local rank>/" in result.stderr
    outs = sorted(
        (Path(p["rank_logs"]) / "attempt_0" / "0" / "stdout.log").read_text() for p in report["pods"]
    )
    assert [o.strip() for o in outs] == ["rank 0 of world 2: sum 3", "rank 1 of world 2: sum 3"]


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_own_script_that_raises_on_rank_1_fails_and_names_the_pod_and_its_log(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    # The shipped multi-node launcher lets torchrun restart a failed worker group
    # (--max-restarts) and its c10d rendezvous waits up to join_timeout for the pod that gave
    # up: a rank that crashes every time keeps the job running, here as in the cluster. The
    # rehearsal still fails, on the guide's rows, naming the rank and its error.
    result, report, row = rehearse_own_script(
        tmp_path, monkeypatch, write_profile, base_profile, RANK_1_RAISES, "--timeout", "40"
    )
    assert result.exit_code == 1, result.output
    shutdown = checks(report)["shutdown"]
    assert (
        shutdown["status"] == "fail"
        and "rank 1: 1 (RuntimeError: rank 1 breaks on purpose)" in shutdown["message"]
    ), shutdown
    # the rank's own log holds the traceback, in the pod's torchrun log folder (the rendered
    # --log-dir, on the rehearsal's checkpoint volume)
    (folder,) = {p["rank_logs"] for p in report["pods"] if p["pod"] == "worker-0"}
    traces = [
        p
        for p in Path(folder).glob("**/attempt_*/0/stderr.log")
        if "rank 1 breaks on purpose" in p.read_text()
    ]
    assert traces, sorted(map(str, Path(folder).glob("**/*")))


@pytest.mark.long  # CI keeps the representative set under 10 minutes
def test_own_script_still_running_at_the_timeout_is_stopped_and_counted_healthy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    # the script writes torch.save checkpoints, and says so (the checkpoint row compares)
    profile = {**base_profile, "checkpoint": {**base_profile["checkpoint"], "format": "torch"}}
    result, report, row = rehearse_own_script(
        tmp_path, monkeypatch, write_profile, profile, RUNS_ON, "--timeout", "30"
    )
    assert result.exit_code == 0, result.output
    pods = checks(report)["pods"]
    assert pods["status"] == "pass" and pods["message"] in row
    assert pods["message"] == (
        "master-0, worker-0: ran 30 s without failing: still running at "
        "the deadline (--timeout), stopped there"
    )
    assert all(p["timed_out"] for p in report["pods"])
    # both ranks ran, each pod in its own copy of the working tree, and neither is left
    # behind once the rehearsal has returned
    assert not list(tmp_path.glob("alive.*"))
    markers = sorted(tmp_path.glob("logs/*/image/alive.*"), key=lambda m: m.name)
    assert [m.name.split(".")[1] for m in markers] == ["0", "1"]
    running = [m.name for m in markers if _runs_train_py(int(m.name.split(".")[2]))]
    assert running == []


def _runs_train_py(pid: int) -> bool:
    """Whether this pid is still a live (not zombie) process running train.py."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"train.py" in cmdline


# issue 23, item 9: a script that writes records into the audit folder itself (here: a
# `metrics` record from no rank and a second rank 0 that passes everything) fails the rehearsal
FORGES_RECORDS = (
    ALL_REDUCE
    + """\
import json, os
folder = os.environ.get("RUNAI_SPEC_AUDIT_DIR") or "."
with open(os.path.join(folder, f"rank-{os.environ['RANK']}.1.jsonl"), "a") as fh:
    fh.write(json.dumps({"event": "exit", "t": 1e12, "rank": 0, "exit_code": 0}) + "\\n")
"""
)


def test_own_script_that_forges_audit_records_fails_the_rehearsal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    result, report, _ = rehearse_own_script(
        tmp_path, monkeypatch, write_profile, base_profile, FORGES_RECORDS
    )
    assert result.exit_code == 1, result.output
    rows = checks(report)
    assert rows["audit"]["status"] == "fail"
    assert rows["audit"]["message"].startswith(
        "2 record(s) in the audit folder were not written by the audit layer (rank-0.1.jsonl, rank-1.1.jsonl)"
    )
    for name in ("ranks", "world-size", "shutdown"):  # the layer's own records still count
        assert rows[name]["status"] == "pass", rows[name]
