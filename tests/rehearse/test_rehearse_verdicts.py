"""The own-script verdicts, round 3 (issue 42), on records: the resume row true for the save
patterns people write, one cause one row, a rank stuck after its teardown, SIGTERM saves."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch, run
from runai_spec.pipeline.checklist import PreflightSettings
from runai_spec.rehearse.checks import CheckResult
from runai_spec.rehearse.filesystem import audit_layer_dir
from runai_spec.rehearse.script_checks import read_audit, script_checks
from runai_spec.rehearse.script_records import ScriptRun, checkpoints

SETTINGS = PreflightSettings(local_batch=4, grad_accum=2, global_batch=16)
RUN = ScriptRun(world=2, plan_world=2, checkpoint_dir="/checkpoints", gpus=0, restarted=True, timed_out=False)


def _rec(event: str, rank: int, t: float, attempt: int = 0, **kw: Any) -> dict[str, Any]:
    # each container start is a PID namespace of its own: the same PID in every attempt
    return {"event": event, "rank": rank, "t": t, "pid": 5 + rank, "attempt": attempt, "restart": 0, **kw}


def _started(attempt: int, t: float, world: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(world):
        out += [
            _rec("start", k, t, attempt),
            _rec("init-process-group", k, t + 0.5, attempt, group_world_size=world, backend="gloo"),
        ]
    return out


def _ended(attempt: int, t: float, world: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(world):
        out += [
            _rec("destroy-process-group", k, t, attempt),
            _rec("end", k, t + 0.1, attempt, exit_code=0),
            _rec("exit", k, t + 0.2, attempt, exit_code=0),
        ]
    return out


def _tmp_then_rename(attempt: int, t: float, step: int, rank: int = 0) -> list[dict[str, Any]]:
    tmp, final = "/checkpoints/latest.pt.tmp", "/checkpoints/latest.pt"
    return [
        _rec("save-start", rank, t, attempt, api="torch.save", path=tmp, step=step),
        _rec("save", rank, t + 0.1, attempt, api="torch.save", path=tmp, step=step, complete=True),
        _rec("rename", rank, t + 0.2, attempt, src=tmp, dst=final),
    ]


def _rows(records: list[dict[str, Any]], run: ScriptRun = RUN) -> dict[str, CheckResult]:
    ordered = sorted(records, key=lambda r: float(r["t"]))
    return {r.check: r for r in script_checks(ordered, run, SETTINGS)}


def _loads(
    attempt: int, t: float, step: int | None, path: str = "/checkpoints/latest.pt"
) -> list[dict[str, Any]]:
    return [_rec("load", k, t, attempt, api="torch.load", path=path, step=step) for k in range(2)]


def test_a_checkpoint_renamed_into_place_before_the_fault_is_whole_though_the_restart_renames_again() -> None:
    """Issue 42 item 1: the restart's rename of the same temporary name (same PID: a PID
    namespace per container start) was taken for the first save's, which then looked whole only
    after the restart began: "no checkpoint was whole before the fault"."""
    first = _started(0, 1) + _tmp_then_rename(0, 3, step=3)
    again = _started(1, 10) + _loads(1, 11, 3) + _tmp_then_rename(1, 12, step=6) + _ended(1, 14)
    found = checkpoints(sorted(first + again, key=lambda r: float(r["t"])))
    assert [(c["path"], c["t"]) for c in found] == [
        ("/checkpoints/latest.pt", pytest.approx(3.2)),
        ("/checkpoints/latest.pt", pytest.approx(12.2)),
    ]
    row = _rows(first + again)["resume"]
    assert row.status == "pass", row.message
    assert "rank(s) 0, 1 loaded the previous attempt's checkpoint" in row.message


@pytest.mark.parametrize(
    "pattern",
    ["tmp-rename", "final-name", "dcp", "dcp-async", "safetensors", "per-rank"],
)
def test_the_resume_row_passes_each_save_pattern_when_every_rank_resumes_from_the_newest(
    pattern: str,
) -> None:
    final = "/checkpoints/latest.pt"

    def saves(attempt: int, t: float, step: int) -> list[dict[str, Any]]:
        if pattern == "tmp-rename":
            return _tmp_then_rename(attempt, t, step)
        if pattern in ("final-name", "safetensors"):
            api = "torch.save" if pattern == "final-name" else "safetensors.torch.save_file"
            return [_rec("save", 0, t, attempt, api=api, path=final, step=step, complete=True)]
        if pattern == "per-rank":
            return [
                _rec(
                    "save",
                    k,
                    t,
                    attempt,
                    api="torch.save",
                    path=f"/checkpoints/rank{k}.pt",
                    step=step,
                    complete=True,
                )
                for k in range(2)
            ]
        path = f"/checkpoints/step-{step}"
        if pattern == "dcp":
            return [
                _rec("save", k, t, attempt, api="torch.distributed.checkpoint.save", path=path, sharded=True)
                for k in range(2)
            ]
        return [  # async: whole once its upload future is done
            _rec(
                "save-complete", k, t + 0.5, attempt, api="torch.distributed.checkpoint.async_save", path=path
            )
            for k in range(2)
        ]

    def loads(attempt: int, t: float, step: int) -> list[dict[str, Any]]:
        if pattern == "per-rank":
            return [_rec("load", k, t, attempt, path=f"/checkpoints/rank{k}.pt", step=step) for k in range(2)]
        path = f"/checkpoints/step-{step}" if pattern.startswith("dcp") else final
        return [
            _rec("load", k, t, attempt, path=path, step=None if path != final else step) for k in range(2)
        ]

    records = _started(0, 1) + saves(0, 2, 2) + saves(0, 4, 4)
    records += _started(1, 10) + loads(1, 11, 4) + saves(1, 12, 6) + _ended(1, 14)
    rows = _rows(records)
    assert rows["resume"].status == "pass", (pattern, rows["resume"].message)
    # every rank's own file beside rank 0's is one sharded checkpoint, not rank 1's mistake
    assert rows["checkpoint"].status == "pass", (pattern, rows["checkpoint"].message)
    assert rows["checkpoint"].message.startswith("3 whole checkpoint save(s) under /checkpoints")


@pytest.mark.parametrize("key_step", [4, 3], ids=["repeats-the-saved-step", "older-step"])
def test_a_resume_that_repeats_the_saved_step_fails_naming_what_it_loaded(key_step: int) -> None:
    """Issue 42 item 6: pytorch/examples ddp-tutorial-series/multinode.py saves EPOCHS_RUN = the
    epoch it just trained and resumes `range(EPOCHS_RUN, max_epochs)`: it trains that epoch again."""
    records = _started(0, 1) + _tmp_then_rename(0, 2, step=4)
    records += _started(1, 10) + _loads(1, 11, 4) + _tmp_then_rename(1, 12, step=key_step) + _ended(1, 14)
    row = _rows(records)["resume"]
    assert row.status == "fail" and row.failed_ranks == (0,), row.message
    assert f"saved step {key_step} again after its restart (step 4 was saved before)" in row.message
    assert "it loaded step 4 and repeats the work since" in row.message
    assert "step 0" not in row.message  # it did load: the logs say so


def test_a_restart_that_loads_an_older_checkpoint_than_the_newest_fails() -> None:
    records = _started(0, 1)
    for step in (2, 4):
        records.append(
            _rec(
                "save", 0, step, api="torch.save", path=f"/checkpoints/ck-{step}.pt", step=step, complete=True
            )
        )
    records += _started(1, 10) + _loads(1, 11, 2, "/checkpoints/ck-2.pt") + _ended(1, 14)
    row = _rows(records)["resume"]
    assert row.status == "fail" and row.failed_ranks == (0, 1), row.message
    assert "loaded step 2, not the newest whole checkpoint (step 4)" in row.message


def test_a_skipped_resume_never_says_a_rank_started_over_when_it_loaded_a_checkpoint() -> None:
    """The fault's restart loaded a checkpoint whose save the layer never saw whole: the row
    skips, and says what the rank loaded instead of "rightly started from step 0"."""
    records = _started(0, 1) + _started(1, 10) + _loads(1, 11, 3) + _ended(1, 14)
    row = _rows(records)["resume"]
    assert row.status == "skip", row.message
    assert "rightly started from step 0" not in row.message
    assert "rank(s) 0, 1 loaded /checkpoints/latest.pt (step 3)" in row.message


def _failing(rows: dict[str, CheckResult]) -> set[str]:
    return {k for k, r in rows.items() if r.status == "fail"}


def test_a_mistyped_script_name_is_one_failing_row_with_its_cause() -> None:
    """Issue 42 item 3: `command: [trian.py]` gave ranks, world-size and shutdown a pass and
    the checkpoint a fail; Python exits 2 without running any of the script."""
    cause = "can't open file '/workspace/trian.py': No such file or directory"
    records = []
    for k in range(2):
        records += [_rec("start", k, 1), _rec("end", k, 1.1, exit_code=2, exception=cause)]
        records.append(_rec("exit", k, 1.2, exit_code=2, exception=cause))
    rows = _rows(records, ScriptRun(**{**RUN.__dict__, "restarted": False}))
    assert _failing(rows) == {"shutdown"}, {k: r.message for k, r in rows.items()}
    assert cause in rows["shutdown"].message
    for name in ("world-size", "checkpoint", "global-batch", "resume"):
        assert (
            rows[name].status == "skip" and f"the script stopped at start-up ({cause})" in rows[name].message
        )


def test_a_missing_dependency_after_the_process_group_fails_one_row_and_keeps_what_passed() -> None:
    cause = "ModuleNotFoundError: No module named 'tensorboard'"
    records = _started(0, 1)
    records += [_rec("exit", k, 2, exit_code=1, exception=cause) for k in range(2)]
    rows = _rows(records, ScriptRun(**{**RUN.__dict__, "restarted": False}))
    assert _failing(rows) == {"shutdown"}, {k: r.message for k, r in rows.items()}
    assert rows["world-size"].status == "pass"
    assert rows["checkpoint"].status == "skip"
    assert f"the script stopped before its first step ({cause})" in rows["checkpoint"].message
    # once a rank has stepped, a later crash is the rows' business: each says what it saw
    stepped = records + [_rec("batch", 0, 1.8, n=1, loader=8)]
    assert "checkpoint" in _failing(_rows(stepped, ScriptRun(**{**RUN.__dict__, "restarted": False})))


def test_the_audit_layer_records_a_script_file_that_does_not_exist_as_exit_2(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "RUNAI_SPEC_AUDIT_DIR": str(tmp_path / "audit"),
        "RUNAI_SPEC_AUDIT_KEY": "k" * 64,
        "PYTHONPATH": str(audit_layer_dir()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }
    done = subprocess.run(
        [sys.executable, "trian.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "can't open file" in done.stderr
    (exit_record,) = [r for r in read_audit(tmp_path / "audit", "k" * 64) if r["event"] == "exit"]
    assert exit_record["exit_code"] == 2
    assert (
        exit_record["exception"]
        == f"can't open file {str(tmp_path / 'trian.py')!r}: No such file or directory"
    )


def test_a_rank_alive_after_its_own_destroy_process_group_fails_shutdown_naming_where_it_waits() -> None:
    """Issue 42 item 5: it was `shutdown: skip` at --timeout (or a recovery failure)."""
    records = _started(0, 1) + [_rec("batch", k, 1.5, n=1, loader=8) for k in range(2)]
    records.append(_rec("save", 0, 1.6, api="torch.save", path="/checkpoints/s.pt", step=1, complete=True))
    records += _ended(0, 2, world=1)  # rank 0 ends; rank 1 does not
    records += [
        _rec("destroy-process-group", 1, 2),
        _rec(
            "stuck",
            1,
            12,
            after="destroy_process_group",
            seconds=10.0,
            waits_in=[
                "train.py:9 in <module>",
                "threading.py:1590 in _shutdown",
                "threading.py:1119 in _wait_for_tstate_lock",
            ],
            threads=["uploader"],
        ),
    ]
    run = ScriptRun(**{**RUN.__dict__, "restarted": False, "timed_out": True})
    row = _rows(records, run)["shutdown"]
    assert row.status == "fail" and row.failed_ranks == (1,), row.message
    assert row.message.startswith(
        "rank 1 still alive 10 s after its own destroy_process_group, waiting in threading.py:1119 in "
        "_wait_for_tstate_lock <- threading.py:1590 in _shutdown <- train.py:9 in <module> "
        "(non-daemon thread(s) still running: uploader): in the cluster the pod never completes"
    )
    # a process that exited after its `stuck` record was slow, not stuck
    late = records + [_rec("exit", 1, 13, exit_code=0)]
    assert _rows(late, ScriptRun(**{**RUN.__dict__, "restarted": False}))["shutdown"].status == "pass"


# rank 1 joins a non-daemon thread at exit, after its own destroy_process_group
HANGS_AFTER_TEARDOWN = """\
import threading, time, torch.distributed as dist
dist.init_process_group("gloo")
dist.destroy_process_group()
if dist.is_initialized() is False and __import__("os").environ["RANK"] == "1":
    threading.Thread(target=time.sleep, args=(600,), name="uploader").start()
"""
# rank 1 waits on after rank 0 has ended and exited (no destroy of its own)
OUTLIVES_ITS_PEERS = """\
import os, time, torch.distributed as dist
dist.init_process_group("gloo")
if os.environ["RANK"] == "1":
    time.sleep(600)
dist.destroy_process_group()
"""


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param(  # CI stops at the other stuck rank (issue 37: CI's time)
            HANGS_AFTER_TEARDOWN,
            "after its own destroy_process_group, waiting in threading.py:",
            marks=pytest.mark.long,
        ),
        pytest.param(  # a rank stuck after teardown: with the long tests (issue 37: CI's time)
            OUTLIVES_ITS_PEERS,
            "after every other rank exited, waiting in train.py:4 in <module>",
            marks=pytest.mark.long,
        ),
    ],
    ids=["after-its-destroy", "after-its-peers"],
)
def test_a_rehearsal_stops_at_a_rank_stuck_after_its_teardown_and_fails_shutdown(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Any,
    base_profile: dict[str, Any],
    script: str,
    expected: str,
) -> None:
    needs_torch()
    (tmp_path / "train.py").write_text(script)
    batch = {"local": 4, "grad_accum": 2, "global": 64}
    path = write_profile({**base_profile, "preset": "h200-8gpu", "command": ["train.py"], "batch": batch})
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    result = run(
        "rehearse", str(path), "--own-script", "--procs-per-pod", "2", "--logs", "logs", "--timeout", "120"
    )
    assert time.monotonic() - started < 90  # stopped at the stuck record, not at --timeout
    assert result.exit_code == 1, result.output
    rows = {c["check"]: c for c in json.loads((tmp_path / "logs" / "result.json").read_text())["checks"]}
    shutdown = rows["shutdown"]
    assert shutdown["status"] == "fail" and shutdown["failed_ranks"] == [1], shutdown
    assert f"rank 1 still alive 10 s {expected}" in shutdown["message"]
    joins = "(non-daemon thread(s) still running: uploader)" in shutdown["message"]
    assert joins == (script == HANGS_AFTER_TEARDOWN)


def test_a_save_that_starts_after_the_sigterm_is_a_sigterm_save() -> None:
    from runai_spec.rehearse.script_records import sigterm_saves

    records = _started(0, 1)
    records += [
        _rec("save-start", 0, 4, api="torch.save", path="/checkpoints/a.pt", step=2),  # under way at SIGTERM
        _rec("save", 0, 6, api="torch.save", path="/checkpoints/a.pt", step=2, complete=True),
        _rec("save-start", 0, 7, api="torch.save", path="/checkpoints/b.pt", step=3),
        _rec("save", 0, 7.5, api="torch.save", path="/checkpoints/b.pt", step=3, complete=True),
    ]
    records += _started(1, 20) + _tmp_then_rename(1, 21, step=4)  # the next pod's saves: none
    ordered = sorted(records, key=lambda r: float(r["t"]))
    assert [c["path"] for c in sigterm_saves(ordered, 5.0)] == ["/checkpoints/b.pt"]
    assert sigterm_saves(ordered, 8.0) == []


# a DDP script under torchrun; with HANDLER set, rank 0 saves once the SIGTERM came
SIGTERM_SCRIPT = """\
import os, signal, time, torch, torch.distributed as dist
CKPT = "/checkpoints/state.pt"
stop = []
if os.environ.get("HANDLER"):
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
dist.init_process_group("gloo")
rank = dist.get_rank()
step = torch.load(CKPT)["step"] if os.path.exists(CKPT) else 0
while step < 12:
    step += 1
    t = torch.ones(1)
    dist.all_reduce(t)
    if step == 2 and rank == 0:
        torch.save({"step": step}, CKPT)
    if stop:
        if rank == 0:
            torch.save({"step": step}, CKPT)
        break
    time.sleep(0.3)
dist.destroy_process_group()
"""


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize(
    "handler",  # both with the long tests (issue 37: CI's time)
    [
        pytest.param("1", marks=pytest.mark.long, id="saves"),
        pytest.param("", marks=pytest.mark.long, id="no-handler"),
    ],
)
def test_checkpoint_on_sigterm_is_checked_on_the_own_script(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Any,
    base_profile: dict[str, Any],
    handler: str,
) -> None:
    """Issue 42 item 4: with checkpoint.on_sigterm and --preempt checkpoint, a script that
    saved after the SIGTERM and one with no handler both passed "no rank saved on SIGTERM"."""
    needs_torch()
    (tmp_path / "train.py").write_text(SIGTERM_SCRIPT)
    profile = {**base_profile, "preset": "h200-8gpu", "command": ["train.py"], "metrics": {"writer": "rank0"}}
    profile["batch"] = {"local": 4, "grad_accum": 2, "global": 64}
    profile["checkpoint"] = {**profile["checkpoint"], "format": "torch", "on_sigterm": True}
    path = write_profile(profile)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HANDLER", handler)
    result = run(
        "rehearse",
        str(path),
        "--own-script",
        "--procs-per-pod",
        "2",
        "--logs",
        "logs",
        "--timeout",
        "120",
        "--preempt",
        "checkpoint",
        "--backoff-scale",
        "0.1",
    )
    rows = {c["check"]: c for c in json.loads((tmp_path / "logs" / "result.json").read_text())["checks"]}
    fault = rows["fault"]
    if handler:
        assert result.exit_code == 0, result.output
        assert fault["status"] == "pass" and "on SIGTERM rank(s) 0 saved their last step" in fault["message"]
    else:
        assert result.exit_code == 1, result.output
        assert fault["status"] == "fail" and "no rank saved on SIGTERM" in fault["message"]
        assert "did not save on SIGTERM within the grace period, as the profile says" in fault["message"]


def test_a_sharded_save_by_every_rank_is_one_checkpoint() -> None:
    """Issue 42 item 8: 4 DCP saves by 4 ranks were "16 whole checkpoint save(s)"."""
    records = _started(0, 1, world=4)
    for step in range(1, 5):
        records += [
            _rec(
                "save",
                k,
                1 + step,
                api="dcp.save",
                path=f"/checkpoints/step-{step}",
                sharded=True,
                complete=True,
            )
            for k in range(4)
        ]
    records += _ended(0, 10, world=4)
    run = ScriptRun(**{**RUN.__dict__, "world": 4, "plan_world": 4, "restarted": False})
    row = _rows(records, run)["checkpoint"]
    assert row.status == "pass" and row.message.startswith("4 whole checkpoint save(s) under /checkpoints")


def test_a_transport_variable_set_with_setdefault_is_one_finding(tmp_path: Path) -> None:
    """Issue 42 item 8: os.environ.setdefault's own `self[key] = value` (in <frozen os>) was a
    second finding beside the script's line."""
    (tmp_path / "train.py").write_text("import os\nos.environ.setdefault('NCCL_DEBUG', 'INFO')\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "RUNAI_SPEC_AUDIT_DIR": str(tmp_path / "audit"),
        "RUNAI_SPEC_AUDIT_KEY": "k" * 64,
        "PYTHONPATH": str(audit_layer_dir()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, timeout=60, check=True)
    sets = [r for r in read_audit(tmp_path / "audit", "k" * 64) if r["event"] == "env-set"]
    row = _rows(_started(0, 1) + sets)["transport-env"]
    assert row.details["set"] == [f"NCCL_DEBUG=INFO ({tmp_path / 'train.py'}:2)"], row.details


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("single-gpu", "one pod, one process with no launcher: no rendezvous across pods"),
        ("single-node", "torchrun --standalone: a rendezvous of its own inside the pod"),
    ],
)
def test_the_network_row_names_no_static_rendezvous_where_the_layout_has_none(
    tmp_path: Path, example: str, expected: str
) -> None:
    """Issue 42 item 8: in netns mode the row said "node rank 0 of the static rendezvous" for
    a python command and for torchrun --standalone."""
    from conftest import example_job
    from runai_spec.rehearse import plan_pods
    from runai_spec.rehearse.checks import netns_note
    from runai_spec.rehearse.network import NetPlan, PodNet
    from runai_spec.rehearse.spec import RehearsalSpec

    plans, _ = plan_pods([example_job(example)], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    net = NetPlan("10.0.0.0/24", str(tmp_path), (PodNet("master-0", "m", str(tmp_path), "10.0.0.2"),))
    row = netns_note(plans, net)
    assert expected in row.message and "static rendezvous" not in row.message, row.message


def test_args_shorten_the_own_script_s_run_without_editing_the_profile(tmp_path: Path) -> None:
    """Issue 42 item 8: --args appends to the script's own arguments in every pod."""
    from conftest import example_job
    from runai_spec.rehearse import plan_pods
    from runai_spec.rehearse.spec import RehearsalSpec, parse_script_args

    words = parse_script_args("--max-steps 40 --note 'two words'", own_script=True)
    assert words == ("--max-steps", "40", "--note", "two words")
    spec = RehearsalSpec(procs_per_pod=1, own_script=True, script_args=words, workdir=tmp_path)
    plans, _ = plan_pods([example_job("multi-node")], spec, root=tmp_path / "logs")
    for plan in plans:
        assert plan.argv[-4:] == words, plan.argv
    assert "--args --max-steps 40 --note 'two words'" in spec.recorded_options()


def test_args_without_the_own_script_is_bad_input() -> None:
    result = run(
        "rehearse", str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--args", "--max-steps 4"
    )
    assert result.exit_code == 2, result.output
    assert "--args" in result.stderr and "hint: add --own-script" in result.stderr
