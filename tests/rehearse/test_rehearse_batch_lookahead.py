"""The global-batch row's samples per optimizer step, where a loader reads ahead of the step."""

from __future__ import annotations

from typing import Any

from runai_spec.rehearse.script_rows import samples_per_step


def _batch(rank: int, n: int, loader: int, attempt: int = 0) -> dict[str, Any]:
    start = {"attempt": attempt, "restart": 0}
    return {"event": "batch", "rank": rank, "pid": 1, **start, "n": n, "loader": loader}


def test_a_first_step_that_read_one_batch_ahead_does_not_decide_the_batch() -> None:
    """Accelerate's DataLoaderShard draws one batch before it yields the current one: its first
    optimizer step of 8 micro-batches of 4 counts 36 samples, the next ones 32. A kill after the
    second step left [36, 32], a tie the first step won: a correct script failed global-batch."""
    records = [_batch(k, 1, 36) for k in (0, 1)] + [_batch(k, 2, 32) for k in (0, 1)]
    assert samples_per_step(records) == {0: 32, 1: 32}
    many = [_batch(0, n, 36 if n == 1 else 32) for n in (1, 2, 3, 4)]
    assert samples_per_step(many) == {0: 32}


def test_a_single_measured_step_still_counts_and_later_starts_are_not_mixed_in() -> None:
    records = [_batch(0, 1, 32), _batch(0, 1, 40, attempt=1), _batch(0, 2, 40, attempt=1)]
    assert samples_per_step(records) == {0: 32}


def test_the_gpu_runs_killed_first_start_measures_the_steps_after_its_first() -> None:
    """The device run of docs/gpu-runs/accelerate (8 local x 4 accumulation, a kill after the
    step-2 checkpoint): the first start measured 40 (one batch drawn ahead) then 32 before the
    kill, and the restarted start draws ahead again. The row read 40 at 7d1f14e (the tie); the
    script is correct: 32."""
    first = [_batch(0, 1, 40), _batch(0, 2, 32)]
    restarted = [_batch(0, 1, 40, attempt=1)] + [_batch(0, n, 32, attempt=1) for n in (2, 3, 4)]
    assert samples_per_step(first + restarted) == {0: 32}
