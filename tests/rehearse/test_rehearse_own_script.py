"""`rehearse --own-script` checks the researcher's script (issue 15): the audit layer changes
nothing the script does, and each guide check fails for the script that breaks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import needs_torch
from runai_spec.cli import app
from runai_spec.pipeline.checklist import PreflightSettings
from runai_spec.rehearse.filesystem import audit_layer_dir, can_mount, pod_filesystem
from runai_spec.rehearse.script_checks import (
    foreign_records,
    foreign_row,
    read_audit,
    script_checks,
)
from runai_spec.rehearse.script_records import LOST, ScriptRun

SETTINGS = PreflightSettings(local_batch=4, grad_accum=2, global_batch=16)
RUN = ScriptRun(
    world=2, plan_world=2, checkpoint_dir="/checkpoints", gpus=0, restarted=False, timed_out=False
)

# a script that computes, prints, checkpoints, loads and ends with its own exit code
SCRIPT = """\
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
loss = model(torch.randn(5, 3)).sum()
os.makedirs("ck", exist_ok=True)
torch.save({"step": 7, "model": model.state_dict()}, "ck/state.pt")
state = torch.load("ck/state.pt")
print("loss", round(float(loss), 6), "step", state["step"], flush=True)
print("to stderr", file=sys.stderr)
dist.destroy_process_group()
if os.environ.get("RAISE"):
    raise ValueError("on purpose")
sys.exit(int(os.environ.get("CODE", "0")))
"""


def _rank_env(tmp_path: Path, audit: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNAI_SPEC")}
    env.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
    )
    if audit is not None:
        env["RUNAI_SPEC_AUDIT_DIR"] = str(audit)
        env["RUNAI_SPEC_AUDIT_KEY"] = KEY
        env["PYTHONPATH"] = str(audit_layer_dir())
    return env


KEY = "k" * 64  # the rehearsal's key for the audit layer (a fresh random one per rehearsal)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, audit: Path | None, **extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "train.py").write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**_rank_env(tmp_path, audit), **extra},
    )


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(  # CI: exit 0's case (issue 37: CI's time)
    "extra",
    [
        {},
        pytest.param({"CODE": "3"}, marks=pytest.mark.long),
        pytest.param({"RAISE": "1"}, marks=pytest.mark.long),
    ],
    ids=["0", "3", "raise"],
)
def test_the_audit_layer_changes_neither_output_nor_exit_code(tmp_path: Path, extra: dict[str, str]) -> None:
    needs_torch()
    plain = _run(tmp_path, None, **extra)
    audited = _run(tmp_path, tmp_path / "audit", **extra)
    assert (audited.returncode, audited.stdout) == (plain.returncode, plain.stdout)
    assert audited.stderr == plain.stderr
    assert "loss" in plain.stdout and plain.returncode == {"CODE": 3, "RAISE": 1}.get(
        next(iter(extra), ""), 0
    )
    records = read_audit(tmp_path / "audit", KEY)
    events = [r["event"] for r in records]
    assert events[:2] == ["start", "init-process-group"] and events[-1] == "exit"
    save = next(r for r in records if r["event"] == "save")
    assert save["path"] == str(tmp_path / "ck" / "state.pt") and save["step"] == 7
    load = next(r for r in records if r["event"] == "load")
    assert load["step"] == 7 and records[-1]["exit_code"] == plain.returncode


@pytest.mark.long  # CI runs the layer unchanged-output case (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_the_audit_layer_fails_open(tmp_path: Path) -> None:
    needs_torch()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the audit folder should be")
    plain = _run(tmp_path, None)
    audited = _run(tmp_path, blocker)
    assert (audited.returncode, audited.stdout, audited.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def _rec(event: str, rank: int, t: float, **kw: Any) -> dict[str, Any]:
    return {
        "event": event,
        "rank": rank,
        "t": t,
        "pid": 100 + rank + 10 * kw.get("attempt", 0),
        "attempt": 0,
        "restart": 0,
        **kw,
    }


def _healthy(world: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(world):
        out += [
            _rec("start", k, 1),
            _rec("init-process-group", k, 2, group_world_size=world, backend="gloo", device="cpu"),
        ]
    out += [_rec("batch", k, 2.5, n=1, loader=8, forward=8) for k in range(world)]  # 4 local x 2 accum
    out.append(_rec("save", 0, 3, path="/checkpoints/s.pt", api="torch.save", step=5, complete=True))
    for k in range(world):
        out += [_rec("destroy-process-group", k, 4), _rec("exit", k, 5, exit_code=0)]
    return out


def _rows(records: list[dict[str, Any]], run: ScriptRun = RUN) -> dict[str, Any]:
    return {r.check: r for r in script_checks(records, run, SETTINGS)}


def test_a_healthy_run_passes_every_row_that_can_be_checked_on_cpu() -> None:
    rows = _rows(_healthy())
    assert {k: r.status for k, r in rows.items()} == {
        "ranks": "pass",
        "world-size": "pass",
        "device": "skip",
        "global-batch": "pass",
        "checkpoint": "pass",
        "metrics": "skip",
        "resume": "skip",
        "shutdown": "pass",
    }


def test_a_rank_started_again_after_its_process_ended_is_torchrun_s_restart_not_a_duplicate() -> None:
    """torch's agent restarts a healthy group for a node joining the rendezvous without spending
    a restart (api.py _invoke_run): rank 0's second process has the same generation. It is a
    duplicate only while the first still runs (two processes claiming one rank)."""
    later = [{**r, "pid": 900, "t": r["t"] + 10} for r in _healthy() if r["rank"] == 0]
    row = _rows(_healthy() + later)["ranks"]
    assert row.status == "pass", row.message
    assert "rank(s) 0 started again after they ended" in row.message
    alongside = [{**r, "pid": 900, "t": r["t"] + 0.5} for r in _healthy() if r["rank"] == 0]
    row = _rows(_healthy() + alongside)["ranks"]
    assert row.status == "fail" and row.failed_ranks == (0,)
    assert "rank(s) 0 started more than once at the same time" in row.message
    assert _rows(_healthy())["ranks"].message == "all 2 rank(s) started once"


def test_a_checkpoint_in_the_working_directory_is_lost_at_restart() -> None:
    records = _healthy()
    records[6] = _rec("save", 0, 3, path="/workspace/snapshot.pt", api="torch.save", step=5)
    row = _rows(records)["checkpoint"]
    assert row.status == "fail" and "/workspace/snapshot.pt" in row.message and LOST in row.message


def test_non_sharded_saves_and_metrics_from_every_rank_fail_dcp_shards_do_not() -> None:
    records = _healthy() + [_rec("save", 1, 3.5, path="/checkpoints/s.pt", api="torch.save")]
    assert _rows(records)["checkpoint"].failed_ranks == (1,)
    shards = _healthy() + [_rec("save", 1, 3.5, path="/checkpoints/dcp", sharded=True)]
    assert _rows(shards)["checkpoint"].status == "pass"
    metrics = _healthy() + [_rec("metrics", k, 2.5, api="wandb.init") for k in (0, 1)]
    row = _rows(metrics)["metrics"]
    assert row.status == "fail" and row.failed_ranks == (1,) and "only rank 0" in row.message


def test_a_restarted_rank_that_saves_before_loading_started_again_from_step_0() -> None:
    run = ScriptRun(**{**RUN.__dict__, "restarted": True})
    records = _healthy()[:7]  # attempt 0: killed after the save of step 5
    for k in range(2):
        records += [
            _rec("start", k, 10, attempt=1),
            _rec("init-process-group", k, 11, attempt=1, group_world_size=2),
        ]
    records.append(_rec("save", 0, 12, attempt=1, path="/checkpoints/s.pt", step=5))
    row = _rows(records, run)["resume"]
    assert row.status == "fail" and "started again from step 0" in row.message
    resumed = (
        records[:-1]
        + [_rec("load", k, 11.5, attempt=1, path="/checkpoints/s.pt", step=5) for k in range(2)]
        + [_rec("save", 0, 12, attempt=1, path="/checkpoints/s.pt", step=6)]
    )
    assert _rows(sorted(resumed, key=lambda r: r["t"]), run)["resume"].status == "pass"


def test_a_script_that_needs_nccl_says_what_could_not_run_on_cpu() -> None:
    records = [_rec("start", k, 1) for k in range(2)] + [
        _rec("init-process-group", k, 2, requested_backend="nccl", failed="RuntimeError: no NCCL")
        for k in range(2)
    ]
    rows = _rows(records)
    assert rows["world-size"].status == "skip"
    assert "asks for nccl" in rows["world-size"].message and "GPU machine" in rows["world-size"].message
    assert rows["ranks"].status == "pass"


def test_the_wrapper_gives_each_container_start_a_fresh_copy_of_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("print('hi')\n")
    pod = tmp_path / "root" / "master-0"
    pod.mkdir(parents=True)
    container = {"volumeMounts": [{"name": "checkpoint", "mountPath": "/checkpoints"}]}
    spec = {"volumes": [{"name": "checkpoint", "persistentVolumeClaim": {"claimName": "c"}}]}
    fs = pod_filesystem(spec, container, tmp_path / "root", pod, tree, isolate=False)
    assert "NOT mounted" in fs.note
    cmd = [*fs.wrapper, "sh", "-c", "ls; echo $RUNAI_SPEC_ATTEMPT; touch left-behind"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path)
    again = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert first.stdout.split() == ["train.py", "0"]
    assert again.stdout.split() == ["train.py", "1"]  # left-behind is gone: a new image copy


# Issue 23, item 9: a script that wrote records into the audit folder itself got every row
# `pass`; only what the audit layer wrote under the rehearsal's key counts.
FORGER = """\
import json, os
folder = os.environ.get("RUNAI_SPEC_AUDIT_DIR")
print("key seen:", os.environ.get("RUNAI_SPEC_AUDIT_KEY"))
for rank in (0, 1):
    with open(os.path.join(folder, f"rank-{rank}.99{rank}.jsonl"), "a") as fh:
        fh.write(json.dumps({"event": "init-process-group", "t": 1.0, "rank": rank,
                             "world_size": 2, "backend": "gloo"}) + "\\n")
        fh.write("0" * 64 + " " + json.dumps({"event": "exit", "t": 2.0, "rank": rank,
                                               "exit_code": 0}) + "\\n")
"""


def test_records_a_script_writes_into_the_audit_folder_do_not_count(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FORGER)
    done = subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_rank_env(tmp_path, tmp_path / "audit"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "key seen: None\n"  # the rank's environment lost the key
    records = read_audit(tmp_path / "audit", KEY)
    assert [r["event"] for r in records] == ["start", "end", "exit"]  # the layer's own, rank 0
    assert {r["pid"] for r in records} != {990, 991}
    foreign = foreign_records(tmp_path / "audit", KEY)
    assert foreign == {"rank-0.990.jsonl": 2, "rank-1.991.jsonl": 2}
    row = foreign_row(foreign)
    assert row is not None and row.status == "fail" and row.check == "audit"
    assert row.message.startswith(
        "4 record(s) in the audit folder were not written by the "
        "audit layer (rank-0.990.jsonl, rank-1.991.jsonl)"
    )
    assert read_audit(tmp_path / "audit", "another key") == []  # another rehearsal's key
    assert foreign_row({}) is None


def test_an_edited_record_of_the_audit_layer_does_not_count(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    env = _rank_env(tmp_path, tmp_path / "audit")
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True, env=env, timeout=60)
    (log,) = (tmp_path / "audit").glob("rank-0.*.jsonl")
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and '"exit_code": 0' in lines[2]  # start, end (of the script), exit
    log.write_text("\n".join([*lines[:2], lines[2].replace('"exit_code": 0', '"exit_code": 1')]) + "\n")
    assert [r["event"] for r in read_audit(tmp_path / "audit", KEY)] == ["start", "end"]
    assert foreign_records(tmp_path / "audit", KEY) == {log.name: 1}


@pytest.mark.skipif(not can_mount(), reason="needs root, unshare and mount namespaces")
def test_the_pod_s_mounts_create_nothing_outside_the_rehearsal_folder(tmp_path: Path) -> None:
    # issue 23, item 11: the wrapper ran `mkdir -p <mountPath>` as root, making /checkpoints
    # (and any profile's mount path) on this machine
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("print('hi')\n")
    top = f"/runai-spec-test-{uuid.uuid4().hex[:12]}"
    beside = tmp_path / "exists"  # a folder of this machine, the mount path below it missing
    beside.mkdir()
    (beside / "kept.txt").write_text("kept\n")
    (tmp_path / "link").symlink_to(beside)  # reached through a link of this machine
    deep = str(tmp_path / "link" / "missing" / "data")
    root, pod = tmp_path / "root", tmp_path / "root" / "master-0"
    pod.mkdir(parents=True)
    container = {
        "volumeMounts": [
            {"name": "checkpoint", "mountPath": f"{top}/ckpt"},
            {"name": "data-0", "mountPath": deep, "readOnly": True},
            {"name": "shm", "mountPath": f"{top}-shm"},
        ]
    }
    spec = {
        "volumes": [
            {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "data-0", "persistentVolumeClaim": {"claimName": "d"}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ]
    }
    (root / "volumes" / "d").mkdir(parents=True)
    (root / "volumes" / "d" / "input.txt").write_text("input\n")
    fs = pod_filesystem(spec, container, root, pod, tree, isolate=True)
    script = (
        f"echo saved > {top}/ckpt/state && cat {deep}/input.txt && echo x > {top}-shm/x "
        f"&& cat {beside}/kept.txt && ls && pwd"
    )
    done = subprocess.run(
        [*fs.wrapper, "sh", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["input", "kept", "train.py", str(pod / "image")]
    assert (root / "volumes" / "c" / "state").read_text() == "saved\n"
    assert not os.path.lexists(top) and not os.path.lexists(f"{top}-shm")
    assert sorted(p.name for p in beside.iterdir()) == ["kept.txt"]  # no `missing` made here
    assert fs.mounted


# the CPU rehearsal: a script breaking two rules of the guide at once
CARELESS = """\
import torch, torch.distributed as dist
import wandb  # a stand-in module in the working tree: the audit layer patches it by name
dist.init_process_group("gloo")
wandb.init()  # every rank, not only rank 0
if dist.get_rank() == 0:
    torch.save({"step": 1}, "snapshot.pt")  # the working directory: the image's file system
dist.barrier()
dist.destroy_process_group()
"""


# long (issue 29): CI keeps the classic mistakes' run, which fails the same checkpoint and
# metrics rows (off the volume, every rank into ./wandb) and the global batch
@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
def test_rehearse_own_script_names_a_checkpoint_off_the_volume_and_metrics_from_every_rank(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    (tmp_path / "train.py").write_text(CARELESS)
    (tmp_path / "wandb.py").write_text("def init(*args, **kwargs):\n    return None\n")
    path = write_profile({**_torch_format(base_profile), "command": ["train.py"]})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    result = CliRunner().invoke(
        app,
        ["rehearse", str(path), "--own-script", "--procs-per-pod", "1", "--logs", "logs", "--timeout", "120"],
    )
    assert result.exit_code == 1, result.output
    rows = {c["check"]: c for c in json.loads((tmp_path / "logs" / "result.json").read_text())["checks"]}
    image = tmp_path.resolve() / "logs" / "master-0" / "image"
    assert rows["checkpoint"]["status"] == "fail"
    assert (
        f"{image}/snapshot.pt is not on the checkpoint volume /checkpoints: {LOST}"
        in rows["checkpoint"]["message"]
    )
    # rank 1 writes metrics too, and both write into ./wandb, the image's file system
    assert rows["metrics"]["status"] == "fail" and rows["metrics"]["failed_ranks"] == [0, 1]
    assert "only rank 0" in rows["metrics"]["message"] and LOST in rows["metrics"]["message"]
    assert rows["pods"]["status"] == "pass" and rows["ranks"]["status"] == "pass"
    assert "│ checkpoint   │ fail" in result.stdout


# a well-behaved script: rank 0 checkpoints on the volume, every rank restores after a restart
RESUMES = """\
import os, time, torch, torch.distributed as dist
CKPT = os.environ.get("CKPT", "/checkpoints/state.pt")
dist.init_process_group("gloo")
step, w = 0, torch.zeros(1)
if os.path.exists(CKPT):
    state = torch.load(CKPT)
    step, w = state["step"], state["w"]
while step < 8:
    step += 1
    t = torch.ones(1)
    dist.all_reduce(t)
    w += t
    if step % 2 == 0 and dist.get_rank() == 0:
        torch.save({"step": step, "w": w}, CKPT)
    dist.barrier()
    time.sleep(0.3)
dist.destroy_process_group()
"""


def _torch_format(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile declaring the format the torch.save scripts write (the checkpoint row compares)."""
    return {**profile, "checkpoint": {**profile["checkpoint"], "format": "torch"}}


def _rehearse_kill(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    profile: dict[str, Any],
    script: str,
    *args: str,
) -> tuple[Any, dict[str, dict[str, Any]]]:
    (tmp_path / "train.py").write_text(script)
    path = write_profile({**profile, "command": ["train.py"]})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    result = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(path),
            "--own-script",
            "--procs-per-pod",
            "1",
            "--logs",
            "logs",
            "--timeout",
            "240",
            "--backoff-scale",
            "0.1",
            *args,
        ],
    )
    report = tmp_path / "logs" / "result.json"
    assert report.exists(), result.output
    return result, {c["check"]: c for c in json.loads(report.read_text())["checks"]}


# long (issue 29): CI keeps the FSDP2 + DCP script's --restart-after-checkpoint, the same
# fault and resume rows on an own script
@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
def test_own_script_restart_after_checkpoint_resumes_on_the_volume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    result, rows = _rehearse_kill(
        tmp_path,
        monkeypatch,
        write_profile,
        _torch_format(base_profile),
        RESUMES,
        "--restart-after-checkpoint",
    )
    assert result.exit_code == 0, result.output
    assert rows["fault"]["status"] == "pass", rows["fault"]
    assert rows["fault"]["message"].startswith("kill master-0 after the first checkpoint")
    assert rows["resume"]["status"] == "pass", rows["resume"]
    assert "loaded the previous attempt's checkpoint" in rows["resume"]["message"]
    for name in ("ranks", "world-size", "checkpoint", "shutdown"):
        assert rows[name]["status"] == "pass", rows[name]


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
def test_a_checkpoint_in_the_working_directory_is_gone_after_the_kill(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    script = RESUMES.replace('os.environ.get("CKPT", "/checkpoints/state.pt")', '"state.pt"')
    result, rows = _rehearse_kill(
        tmp_path, monkeypatch, write_profile, _torch_format(base_profile), script, "--kill", "master-0"
    )
    assert result.exit_code == 1, result.output
    assert rows["checkpoint"]["status"] == "fail" and LOST in rows["checkpoint"]["message"]
    assert rows["resume"]["status"] == "fail"
    assert "started again from step 0" in rows["resume"]["message"], rows["resume"]


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.long
def test_a_script_that_ignores_its_checkpoint_after_a_restart_fails_the_resume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    script = RESUMES.replace("if os.path.exists(CKPT):", "if False:")
    result, rows = _rehearse_kill(
        tmp_path,
        monkeypatch,
        write_profile,
        _torch_format(base_profile),
        script,
        "--kill",
        "master-0@checkpoint",
    )
    assert result.exit_code == 1, result.output
    assert rows["checkpoint"]["status"] == "pass"
    assert rows["resume"]["status"] == "fail"
    assert "started again from step 0" in rows["resume"]["message"], rows["resume"]


def test_the_rehearsal_folder_inside_the_tree_is_not_part_of_the_image(tmp_path: Path) -> None:
    # `--logs logs` run from the working tree: the image copy must leave the logs out, or each
    # container start copies the earlier images (and the one being written) into itself
    (tmp_path / "train.py").write_text("print('hi')\n")
    root = tmp_path / "logs"
    pod = root / "master-0"
    pod.mkdir(parents=True)
    (root / "volumes").mkdir()
    fs = pod_filesystem({}, {}, root, pod, tmp_path, isolate=False)
    for _ in range(2):
        done = subprocess.run(
            [*fs.wrapper, "ls", "-a"], capture_output=True, text=True, check=True, cwd=tmp_path, timeout=30
        )
        assert sorted(done.stdout.split()) == [".", "..", "train.py"]


def test_a_process_the_rank_starts_afresh_records_nothing(tmp_path: Path) -> None:
    # the rank took the key out of its environment: a spawned child has none, and its lines
    # would otherwise read as forged
    (tmp_path / "train.py").write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(1)'], check=True)\n"
    )
    subprocess.run(
        [sys.executable, "train.py"],
        cwd=tmp_path,
        check=True,
        timeout=60,
        env=_rank_env(tmp_path, tmp_path / "audit"),
    )
    assert len(list((tmp_path / "audit").glob("rank-0.*.jsonl"))) == 1  # the rank's own
    assert foreign_records(tmp_path / "audit", KEY) == {}
    assert [r["event"] for r in read_audit(tmp_path / "audit", KEY)] == ["start", "end", "exit"]


def test_dcp_s_own_in_memory_serialisations_are_no_checkpoints() -> None:
    """Issue 24 item 1: DCP serialises with torch.save into memory buffers on every rank; a
    model-only `dcp.save` of a correct script is one sharded checkpoint, not four non-sharded
    ones at path None."""
    from runai_spec.rehearse.script_saves import checkpoint_row as _checkpoint_row

    run = ScriptRun(**{**RUN.__dict__, "world": 4, "plan_world": 4})
    records = [{"event": "save", "api": "torch.save", "path": None, "rank": r} for r in range(4)]
    records += [
        {
            "event": "save",
            "api": "torch.distributed.checkpoint.save",
            "path": "/checkpoints/step-2",
            "sharded": True,
            "rank": r,
        }
        for r in range(4)
    ]
    row = _checkpoint_row(records, run)
    assert row.status == "pass", row.message
    assert "None" not in row.message and "(and in memory)" in row.message
    # only serialisations into memory, no checkpoint: still no checkpoint
    row = _checkpoint_row(records[:4], run)
    assert row.status == "fail" and row.message.startswith("no rank saved a whole checkpoint")


FSDP2_DCP = (Path(__file__).parent.parent / "rehearse_fixtures" / "fsdp2_dcp.py").read_text()


def _fsdp2_dcp_resumes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    profile: dict[str, Any],
    *fault: str,
) -> None:
    """Issue 24: a correct FSDP2 + DCP script (saves every 2 steps, resumes from the latest
    folder with .metadata) passes the fault: the fault lands after a whole checkpoint, never
    mid-save, and the resume row passes."""
    result, rows = _rehearse_kill(tmp_path, monkeypatch, write_profile, profile, FSDP2_DCP, *fault)
    assert result.exit_code == 0, result.output
    assert rows["fault"]["status"] == "pass", rows["fault"]
    assert "mid-save" not in rows["fault"]["message"]
    assert rows["resume"]["status"] == "pass", rows["resume"]
    assert rows["checkpoint"]["status"] == "pass", rows["checkpoint"]
    assert "None" not in rows["checkpoint"]["message"]
    assert rows["global-batch"]["status"] == "pass", rows["global-batch"]


@pytest.mark.long  # CI resumes the accelerate script and a renamed checkpoint (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_an_fsdp2_dcp_script_resumes_after_restart_after_checkpoint(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    pytest.importorskip("numpy")  # DCP pickles through numpy
    _fsdp2_dcp_resumes(tmp_path, monkeypatch, write_profile, base_profile, "--restart-after-checkpoint")


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("fault", [("--restart-after-checkpoint",), ("--preempt", "checkpoint")])
def test_an_fsdp2_dcp_script_resumes_in_repeated_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
    fault: tuple[str, ...],
) -> None:
    """Three runs in a row, any flake fails: the fault's moment is the audit records', not luck."""
    pytest.importorskip("numpy")
    for run in range(3):
        folder = tmp_path / f"run-{run}"
        folder.mkdir()
        _fsdp2_dcp_resumes(folder, monkeypatch, write_profile, base_profile, *fault)


# a script with the classic mistakes: the global batch divided per node, every rank writing
# metrics into the working directory, checkpoints into the working directory
CLASSIC = """\
import os, torch, torch.distributed as dist, wandb
dist.init_process_group("gloo")
GLOBAL = 128
local = GLOBAL // int(os.environ["LOCAL_WORLD_SIZE"])  # per node, not per rank
model = torch.nn.Linear(4, 1)
optim = torch.optim.SGD(model.parameters(), lr=0.1)
wandb.init()  # every rank, into ./wandb
for step in range(1, 4):
    model(torch.randn(local, 4)).sum().backward()
    optim.step()
    optim.zero_grad()
    if dist.get_rank() == 0:
        torch.save({"step": step}, f"ckpt-{step}.pt")
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.torch
@pytest.mark.slow
def test_a_script_with_the_classic_mistakes_fails_a_row_for_each(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    (tmp_path / "wandb.py").write_text("def init(*args, **kwargs):\n    return None\n")
    profile = {**base_profile, "checkpoint": {**base_profile["checkpoint"], "format": "torch"}}
    result, rows = _rehearse_kill(tmp_path, monkeypatch, write_profile, profile, CLASSIC)
    assert result.exit_code == 1, result.output
    batch = rows["global-batch"]
    assert batch["status"] == "fail" and "rank 0: 128, rank 1: 128" in batch["message"], batch
    metrics = rows["metrics"]
    assert metrics["status"] == "fail" and "only rank 0" in metrics["message"], metrics
    assert "/image/wandb" in metrics["message"] and LOST in metrics["message"]
    checkpoint = rows["checkpoint"]
    assert checkpoint["status"] == "fail" and "/image/ckpt-" in checkpoint["message"], checkpoint


# every rank's checks are in, then one rank aborts in teardown (an atexit handler)
ABORTS_AT_EXIT = """\
import atexit, os, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    torch.save({"step": 1}, "/checkpoints/state.pt")
dist.barrier()
dist.destroy_process_group()
if os.environ["RANK"] == "1":
    atexit.register(os.abort)
"""


@pytest.mark.long  # CI fails shutdown on a stuck rank instead (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_a_rank_that_aborts_in_teardown_gives_the_verdict_at_once_with_the_crash_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    profile = {**base_profile, "checkpoint": {**base_profile["checkpoint"], "format": "torch"}}
    result, rows = _rehearse_kill(tmp_path, monkeypatch, write_profile, profile, ABORTS_AT_EXIT)
    assert result.exit_code == 1, result.output
    shutdown = rows["shutdown"]
    assert shutdown["status"] == "fail" and shutdown["failed_ranks"] == [1], shutdown
    assert "crashed in teardown, after the script had ended" in shutdown["message"]
    assert "SIGABRT" in shutdown["message"]
    # stopped when the crash was seen, not at --timeout (240 s): no pod waited for it
    assert "--timeout" not in rows["pods"]["message"] or "not waiting" in rows["pods"]["message"]
    assert rows["ranks"]["status"] == "pass" and rows["checkpoint"]["status"] == "pass"


def test_a_transport_variable_the_script_sets_at_run_time_fails_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\nos.environ.setdefault('NCCL_DEBUG', 'INFO')\n"
        "os.environ['MY_OWN'] = 'x'\n"
    )
    env = _rank_env(tmp_path, tmp_path / "audit")
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True, env=env, timeout=60)
    records = read_audit(tmp_path / "audit", KEY)
    row = _rows(_healthy() + [r for r in records if r["event"] == "env-set"])["transport-env"]
    assert row.status == "fail" and row.failed_ranks == (0,)
    assert "NCCL_IB_DISABLE=1 (" in row.message and "train.py:2)" in row.message
    assert "NCCL_DEBUG=INFO" in row.message and "MY_OWN" not in row.message
    assert "transport-env" not in _rows(_healthy())  # the row shows only when it fails


def test_a_script_that_stops_at_start_up_is_one_failing_row_not_seven() -> None:
    records = [_rec("start", 0, 1), _rec("exit", 0, 2, exit_code=1, exception="ModuleNotFoundError: torch")]
    rows = _rows(records, ScriptRun(**{**RUN.__dict__, "world": 1, "plan_world": 1}))
    assert {k for k, r in rows.items() if r.status == "fail"} == {"shutdown"}
    assert rows["checkpoint"].status == "skip" and "ModuleNotFoundError: torch" in rows["checkpoint"].message
    nothing = _rows([])
    assert {k for k, r in nothing.items() if r.status == "fail"} == {"ranks"}


def test_a_fault_fires_after_the_first_whole_checkpoint_of_every_rank_that_writes_it() -> None:
    from runai_spec.rehearse.script_records import first_checkpoint

    start = [_rec("start", k, 1) for k in range(2)]
    dcp = [
        _rec(
            "save-start",
            k,
            2,
            path="/checkpoints/step-2",
            sharded=True,
            api="torch.distributed.checkpoint.save",
        )
        for k in range(2)
    ]
    rank0 = [_rec("save", 0, 3, path="/checkpoints/step-2", sharded=True, complete=True, api="x")]
    assert first_checkpoint(start + dcp, 2) == {}  # mid-save
    assert first_checkpoint(start + dcp + rank0, 2) == {}  # rank 1 still inside dcp.save
    both = rank0 + [_rec("save", 1, 3.1, path="/checkpoints/step-2", sharded=True, complete=True, api="x")]
    assert first_checkpoint(start + dcp + both, 2) == {}  # not yet past it
    moved = [_rec("moved-on", k, 4) for k in range(2)]
    assert first_checkpoint(start + dcp + both + moved, 2) == {0: 2, 1: 2}
    # or quiet since: a script that saves and then waits (never steps again) is past it
    # SETTLE_S after its save ended, and not before
    assert first_checkpoint(start + dcp + both, 2, now=3.1 + 1.0) == {}
    assert first_checkpoint(start + dcp + both, 2, now=3.1 + 2.5) == {0: 2, 1: 2}
    assert first_checkpoint(start + dcp + rank0, 2, now=100.0) == {}  # rank 1 still inside
    # a save without .metadata is none; a torch.save to a temporary name counts once renamed
    partial = [_rec("save", 0, 3, path="/checkpoints/step-2", sharded=True, complete=False)]
    assert first_checkpoint(start + partial + moved, 2) == {}
    tmp = [
        _rec("save", 0, 3, path="/checkpoints/s.pt.tmp", complete=True, api="torch.save", step=2),
        _rec("rename", 0, 3.5, src="/checkpoints/s.pt.tmp", dst="/checkpoints/s.pt"),
        _rec("moved-on", 0, 4),
    ]
    assert first_checkpoint(start + tmp, 2) == {0: 2}
    # quiet counts from the rename, not from the save under the temporary name
    assert first_checkpoint(start + tmp[:2], 2, now=3.5 + 1.9) == {}
    assert first_checkpoint(start + tmp[:2], 2, now=3.5 + 2.5) == {0: 2}
    row = _rows(_healthy()[:6] + tmp + _healthy()[7:])["checkpoint"]
    assert row.status == "pass", row.message


def test_a_restart_with_no_whole_checkpoint_before_it_is_not_blamed() -> None:
    run = ScriptRun(**{**RUN.__dict__, "restarted": True})
    records = _healthy()[:6] + [_rec("save-start", 0, 3, path="/checkpoints/s.pt", api="torch.save")]
    for k in range(2):  # the fault landed mid-save: the restart starts at step 0, rightly
        records += [_rec("start", k, 10, attempt=1), _rec("init-process-group", k, 11, attempt=1)]
    records.append(_rec("save-start", 0, 12, attempt=1, path="/checkpoints/s.pt", step=2))
    records.append(_rec("save", 0, 12.5, attempt=1, path="/checkpoints/s.pt", step=2, complete=True))
    row = _rows(records, run)["resume"]
    assert row.status == "skip", row.message
    assert "no checkpoint was whole" in row.message and "mid-save" in row.message
    assert "started again from step 0" not in row.message


def test_a_rank_without_an_exit_after_its_end_crashed_in_teardown() -> None:
    records = [r for r in _healthy() if not (r["event"] == "exit" and r["rank"] == 1)]
    records.append(_rec("end", 1, 4.5, exit_code=0))
    run = ScriptRun(**{**RUN.__dict__, "crash": "exit code -6 (SIGABRT)"})
    row = _rows(records, run)["shutdown"]
    assert row.status == "fail" and row.failed_ranks == (1,)
    assert "crashed in teardown" in row.message and "SIGABRT" in row.message


@pytest.mark.torch
@pytest.mark.slow
def test_the_audit_layer_follows_a_checkpoint_renamed_into_place_and_skips_dcp_s_inner_saves(
    tmp_path: Path,
) -> None:
    pytest.importorskip("numpy")  # DCP pickles through numpy
    from runai_spec.rehearse.script_records import checkpoints

    (tmp_path / "train.py").write_text(
        "import os, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp\n"
        "from torch.distributed.checkpoint.state_dict_saver import save\n"
        "dist.init_process_group('gloo')\n"
        "torch.save({'step': 3}, 'ck.pt.tmp')\n"
        "os.replace('ck.pt.tmp', 'ck.pt')\n"
        "dcp.save({'w': torch.zeros(2)}, checkpoint_id='dcp/step-3')\n"
        "save({'w': torch.zeros(2)}, checkpoint_id='dcp/step-4')\n"
        "dist.destroy_process_group()\n"
    )
    env = _rank_env(tmp_path, tmp_path / "audit")
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True, env=env, timeout=120)
    records = read_audit(tmp_path / "audit", KEY)
    saves = [r for r in records if r["event"] == "save"]
    # no inner ones; the save imported from where it is defined is seen too
    assert [r["api"] for r in saves] == ["torch.save", *["torch.distributed.checkpoint.save"] * 2]
    assert all(r["complete"] for r in saves)
    found = checkpoints(records)
    assert [c["path"] for c in found] == [
        str(tmp_path / "ck.pt"),
        str(tmp_path / "dcp" / "step-3"),
        str(tmp_path / "dcp" / "step-4"),
    ]
    assert found[0]["saved_as"] == str(tmp_path / "ck.pt.tmp")
    assert [r["event"] for r in records][-2:] == ["end", "exit"]
