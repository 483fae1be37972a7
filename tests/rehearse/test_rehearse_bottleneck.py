"""Measure before you scale (issue 24): the `bottleneck` row splits each steady optimizer step
into input, checkpoint, communication and compute and names the bottleneck as the site guide
does; `--scaling` compares the throughput per process as processes are added."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import needs_torch
from runai_spec.cli import app
from runai_spec.errors import InputError
from runai_spec.rehearse.bottleneck import (
    BOUND_SHARE,
    WARMUP_STEPS,
    ScalingPoint,
    bottleneck_row,
    measures,
    rank_splits,
    scaling_row,
    verdict,
)
from runai_spec.rehearse.scaling import check_scaling, parse_scaling
from runai_spec.rehearse.spec import RehearsalSpec


def _steps(rank: int, times: list[list[float]], first: int = 0, pid: int = 1, **kw: Any) -> dict[str, Any]:
    head = {"event": "steps", "rank": rank, "pid": pid, "attempt": 0, "restart": 0, "first": first}
    return {**head, "times": times, **kw}


WARM = [[5.0, 4.0, 0.0, 0.0]] * WARMUP_STEPS  # warm-up steps: slow, and never counted


def test_the_warm_up_steps_of_each_start_are_skipped_and_the_rest_pooled_per_rank() -> None:
    records = [
        _steps(0, [*WARM, [1.0, 0.5, 0.0, 0.0]]),
        _steps(0, [[1.0, 0.1, 0.2, 0.3]], first=WARMUP_STEPS + 1),  # a later record of that start
        _steps(0, [*WARM, [2.0, 0.0, 0.0, 0.0]], pid=2),  # the rank started again: its own warm-up
        _steps(1, WARM),
        {"event": "save", "rank": 0},
    ]
    (zero,) = rank_splits(records)
    assert (zero.rank, zero.steps, zero.total_s) == (0, 3, 4.0)
    assert (zero.input_s, zero.checkpoint_s, zero.communication_s) == pytest.approx((0.6, 0.2, 0.3))
    assert zero.compute_s == pytest.approx(2.9)


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ([0.41, 0.0, 0.0], "input"),
        ([0.0, 0.3, 0.1], "checkpoint"),
        ([0.05, 0.0, 0.25], "communication"),
        ([0.15, 0.1, 0.15], "compute"),  # no part reaches BOUND_SHARE
        ([0.0, 0.0, 0.0], "compute"),
    ],
)
def test_the_verdict_is_the_largest_part_at_or_above_the_bound_share(
    part: list[float], expected: str
) -> None:
    splits = rank_splits([_steps(0, [*WARM, *[[1.0, *part]] * 4]), _steps(1, [*WARM, *[[1.0, *part]] * 4])])
    name, shares = verdict(splits)
    assert name == expected
    assert shares["compute"] == pytest.approx(1.0 - sum(part))
    # compute wins only where no other part reaches the bound share
    assert (max(part) >= BOUND_SHARE) == (expected != "compute")


def test_the_row_says_the_share_the_guide_s_advice_and_the_gpu_figures() -> None:
    row = bottleneck_row(
        [
            _steps(0, [*WARM, *[[0.1, 0.041, 0.0, 0.002]] * 10], gpu_busy=0.35, peak_memory_bytes=3 * 2**30),
            _steps(1, [*WARM, *[[0.1, 0.041, 0.0, 0.002]] * 10], gpu_busy=0.45, peak_memory_bytes=2**30),
        ],
        gpus=2,
    )
    assert row.status == "note" and row.details["verdict"] == "input"
    assert row.message.startswith(
        "input-bound: 41 % of each step waits for data; more GPUs will not make it faster"
    )
    assert "mean step 100.0 ms over 20 steady step(s) of 2 rank(s)" in row.message
    assert "GPU busy 40 %" in row.message and "peak memory 3.00 GiB" in row.message
    assert row.details["steps_per_s_per_process"] == 10.0 and row.details["peak_memory_bytes"] == 3 * 2**30
    assert [r["steps"] for r in row.details["per_rank"]] == [10, 10]


def test_too_few_steady_steps_is_not_measured() -> None:
    row = bottleneck_row([_steps(0, [*WARM, [1.0, 0.0, 0.0, 0.0]])])
    assert row.status == "skip" and row.message.startswith("not measured: 1 steady optimizer step(s)")
    assert bottleneck_row([]).status == "skip"


def _point(procs: int, rate: float | None, verdict: str = "compute") -> ScalingPoint:
    measured = {} if rate is None else {"steps_per_s_per_process": rate, "verdict": verdict}
    return ScalingPoint(procs, procs * 2, measured, f"/logs/scaling-{procs}")


def test_scaling_efficiency_is_throughput_per_process_against_the_smallest_k() -> None:
    row = scaling_row([_point(1, 10.0), _point(2, 9.0), _point(4, 5.0, "communication")], "2 CPU cores")
    assert row.status == "note"
    assert [r["efficiency"] for r in row.details["runs"]] == [1.0, 0.9, 0.5]
    assert row.message.startswith(
        "scaling efficiency on this machine (2 CPU cores), steps/s per process against 1 per pod "
        "(world 2) (samples per step not measured: steps/s, assuming each process keeps its batch)"
    )
    assert "4 per pod (world 8): 5.00 steps/s per process, 50 %, communication-bound" in row.message


def _sampled(procs: int, steps_per_s: float, per_step: float) -> ScalingPoint:
    measured = {
        "steps_per_s_per_process": steps_per_s,
        "samples_per_step_per_process": per_step,
        "samples_per_s_per_process": steps_per_s * per_step,
        "verdict": "compute",
    }
    return ScalingPoint(procs, procs, measured, f"/logs/scaling-{procs}")


def test_scaling_counts_samples_per_second_and_refuses_an_efficiency_when_the_batch_per_process_changed() -> (
    None
):
    """Issue 42 item 2: a script that divides the global batch by the world size steps 4.6
    times as often per process with a quarter of the batch; steps/s per process said 460 %."""
    row = scaling_row([_sampled(1, 10.0, 32), _sampled(2, 46.0, 8)], "2 CPU cores")
    runs = row.details["runs"]
    assert row.details["unit"] == "samples"
    assert [r["efficiency"] for r in runs] == [1.0, None]
    assert runs[1]["relative"] == 1.15 and "per-process batch changed (32 -> 8" in runs[1]["refused"]
    assert "460" not in row.message and "scaling efficiency" not in row.message
    assert row.message.startswith("throughput on this machine (2 CPU cores), samples/s per process")
    assert (
        "2 per pod (world 2): 368.00 samples/s per process (8 samples per step), 115 % of the "
        "baseline, not an efficiency" in row.message
    )


def test_scaling_in_samples_with_the_same_batch_is_an_efficiency_and_above_100_is_refused() -> None:
    row = scaling_row([_sampled(1, 10.0, 8), _sampled(2, 9.0, 8), _sampled(4, 7.0, 8)], "x")
    assert [r["efficiency"] for r in row.details["runs"]] == [1.0, 0.9, 0.7]
    assert row.message.startswith("scaling efficiency on this machine (x), samples/s per process")
    assert "2 per pod (world 2): 72.00 samples/s per process (8 samples per step), 90 %," in row.message
    faster = scaling_row([_sampled(1, 10.0, 8), _sampled(2, 12.0, 8)], "x")
    (_, two) = faster.details["runs"]
    assert two["efficiency"] is None and two["relative"] == 1.2
    assert "120 % of the baseline, not an efficiency: above 100 %" in faster.message


def test_bottleneck_records_samples_per_step_and_on_a_cpu_gives_no_gpu_advice() -> None:
    batches = [
        {"event": "batch", "rank": k, "pid": 1, "attempt": 0, "restart": 0, "n": n, "loader": 16}
        for k in (0, 1)
        for n in (1, 2, 3)
    ]
    steps = [_steps(k, [*WARM, *[[0.1, 0.0197, 0.0, 0.0]] * 5]) for k in (0, 1)]
    row = bottleneck_row(steps + batches)
    assert row.details["samples_per_step_per_process"] == 16.0
    assert row.details["samples_per_s_per_process"] == pytest.approx(160.0)
    # 19.7 % is below the 20 % rule: not "20 %", and on a CPU no GPU advice
    assert row.details["verdict"] == "compute"
    assert "input 19.7 %" in row.message and "input 20 %" not in row.message
    assert "more GPUs" not in row.message and "rehearsal on a GPU machine" in row.message
    assert "more GPUs can help" in bottleneck_row(steps, gpus=1).message


def test_every_k_of_scaling_runs_with_the_same_thread_setting() -> None:
    """torchrun sets OMP_NUM_THREADS=1 only for several workers (torch/distributed/run.py):
    K=1 ran with every core's threads. Every K gets 1 unless the profile sets it."""
    from runai_spec.rehearse.scaling import threads_env

    env: list[dict[str, str]] = [{"name": "MY_FLAG", "value": "1"}]
    container = {"name": "pytorch", "env": env}
    job = {
        "kind": "PyTorchJob",
        "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": [container]}}}}},
    }
    assert threads_env([job], RehearsalSpec()) == {"OMP_NUM_THREADS": "1"}
    env.append({"name": "OMP_NUM_THREADS", "value": "4"})
    assert threads_env([job], RehearsalSpec()) == {}


def test_scaling_without_a_measurement_is_not_measured() -> None:
    row = scaling_row([_point(1, 10.0), _point(2, None)], "2 CPU cores")
    assert row.status == "skip" and "--procs-per-pod 2" in row.message


def test_the_record_keeps_both_rows_numbers() -> None:
    rows = [bottleneck_row([_steps(0, [*WARM, *[[1.0, 0.0, 0.5, 0.0]] * 3])]), scaling_row([], "x")]
    kept = measures(rows)
    assert kept["bottleneck"]["verdict"] == "checkpoint" and kept["bottleneck"]["status"] == "note"
    assert kept["scaling"]["status"] == "skip"


@pytest.mark.parametrize("text", ["0", "1,x", "1,,2", "65", "-1"])
def test_a_bad_scaling_list_is_refused(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_scaling(text)
    assert caught.value.field == "--scaling"


def test_scaling_needs_the_own_script_and_no_faults() -> None:
    assert parse_scaling("1, 2,4,2") == (1, 2, 4)
    with pytest.raises(InputError, match="preflight.py steps no optimizer"):
        check_scaling(RehearsalSpec(scaling=(1, 2)))
    with pytest.raises(InputError, match="cut them short"):
        check_scaling(RehearsalSpec(scaling=(1, 2), own_script=True, restart_after_checkpoint=True))
    check_scaling(RehearsalSpec(scaling=(1, 2), own_script=True))


# the two scripts of the guide's first rule, on CPU: one waits for its data, one computes
INPUT_BOUND = """\
import time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

class SlowDisk(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        time.sleep(0.02)  # each sample read from a slow file system
        return torch.ones(8)

dist.init_process_group("gloo")
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(SlowDisk(), batch_size=4):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
dist.destroy_process_group()
"""
COMPUTE_BOUND = """\
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for (x,) in DataLoader(TensorDataset(torch.ones(48, 8)), batch_size=4):
    a = torch.randn(192, 192)
    for _ in range(12):
        a = torch.tanh(a @ a)  # the model's real work
    opt.zero_grad()
    (model(x).sum() + a.mean()).backward()
    opt.step()
dist.destroy_process_group()
"""


def _rehearse(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
    script: str,
    *args: str,
) -> tuple[Path, dict[str, dict[str, Any]]]:
    (tmp_path / "train.py").write_text(script)
    profile = {**base_profile, "preset": "h200-8gpu", "command": ["train.py"]}
    profile["batch"] = {"local": 4, "grad_accum": 2, "global": 64}
    path = write_profile(profile)
    monkeypatch.chdir(tmp_path)
    CliRunner().invoke(
        app, ["rehearse", str(path), "--own-script", "--logs", "logs", "--timeout", "120", *args]
    )
    report = tmp_path / "logs" / "result.json"
    assert report.exists()
    return path, {c["check"]: c for c in json.loads(report.read_text())["checks"]}


@pytest.mark.torch
@pytest.mark.parametrize(  # CI: the input-bound case (issue 37: CI's time)
    ("script", "expected"),
    [(INPUT_BOUND, "input"), pytest.param(COMPUTE_BOUND, "compute", marks=pytest.mark.long)],
)
def test_an_input_bound_and_a_compute_bound_script_get_their_verdicts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
    script: str,
    expected: str,
) -> None:
    needs_torch()
    _, rows = _rehearse(tmp_path, monkeypatch, write_profile, base_profile, script, "--procs-per-pod", "1")
    row = rows["bottleneck"]
    assert (row["status"], row["details"]["verdict"]) == ("note", expected), row["message"]
    assert row["message"].startswith(f"{expected}-bound: ")
    assert row["details"]["steady_steps"] == 12 - 1 - WARMUP_STEPS  # 12 batches: 11 steps between them
    assert "audit" not in rows or "step timer" not in rows["audit"]["message"]


# long (issue 29 item 5): three rehearsals (~29 s); its first point is the input-bound run
# CI makes above, the efficiency arithmetic and the ticket are tested offline (above and
# tests/outputs/test_plan_measures.py)
@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
def test_scaling_compares_each_k_and_the_ticket_shows_the_measurement(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    path, rows = _rehearse(
        tmp_path, monkeypatch, write_profile, base_profile, INPUT_BOUND, "--scaling", "1,2"
    )
    row = rows["scaling"]
    assert row["status"] == "note", row["message"]
    runs = row["details"]["runs"]
    assert [(r["procs_per_pod"], r["world"], r["verdict"]) for r in runs] == [
        (1, 1, "input"),
        (2, 2, "input"),
    ]
    assert runs[0]["efficiency"] == 1.0
    assert runs[1]["efficiency"] is not None or runs[1]["refused"], runs[1]
    assert runs[1]["logs_dir"] == str((tmp_path / "logs" / "scaling-2").resolve())
    assert "on this machine (" in row["message"] and "OMP_NUM_THREADS=1 in every run" in row["message"]
    ticket = CliRunner().invoke(app, ["plan", str(path)]).stdout
    section = ticket.split("## Measured before scaling (8 processes asked for)\n\n", 1)[1].split("\n## ", 1)[
        0
    ]
    assert "- bottleneck: **input**: input-bound: " in section
    assert "| 2 | 2 | " in section and "| input |" in section


# the common script of issue 42 item 2: the global batch of 64 divided by the world size
DIVIDED = """\
import os, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
print("threads", os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), flush=True)
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.ones(64 * 10, 64))
for (x,) in DataLoader(data, batch_size=64 // dist.get_world_size()):
    opt.zero_grad()
    model(torch.tanh(x @ torch.ones(64, 64))).sum().backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.mark.long  # a --scaling rerun: with the other --scaling reruns (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_a_script_that_divides_the_global_batch_gets_no_efficiency_above_100(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
) -> None:
    needs_torch()
    _, rows = _rehearse(tmp_path, monkeypatch, write_profile, base_profile, DIVIDED, "--scaling", "1,2")
    row = rows["scaling"]
    assert row["status"] == "note" and row["details"]["unit"] == "samples", row["message"]
    one, two = row["details"]["runs"]
    assert (one["samples_per_step_per_process"], two["samples_per_step_per_process"]) == (64, 32)
    assert two["efficiency"] is None and "per-process batch changed (64 -> 32" in two["refused"]
    assert "scaling efficiency" not in row["message"]
    # every K with one thread per process, K=1 too
    logs = [p.read_text() for p in (tmp_path / "logs").rglob("stdout.log")]
    threads = {line for text in logs for line in text.splitlines() if line.startswith("threads")}
    assert threads == {"threads 1 1"}, threads
