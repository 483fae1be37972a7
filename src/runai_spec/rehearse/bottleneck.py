"""Measure before you scale: the `bottleneck` and `scaling` rows, from the audit layer's step timer.

The site guide's first rule: "Use more GPUs only after profiling shows that the single-GPU run
is compute bound and the model or batch can scale. More GPUs can make a run slower when input
loading, communication, or checkpoint writing is the bottleneck." The audit layer
(`audit/runai_spec_steps.py`) records each rank's optimizer steps split into data, checkpoint
and collective time; these rows read them. Both are measurements of this machine, so their
status is `note` (or `skip` where there was nothing to measure), never a pass or a fail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checks import CheckResult
from .script_rows import samples_per_step

WARMUP_STEPS = 3  # each rank start's first steps: allocation, autotuning, the first batches
MIN_STEPS = 3  # steady steps (all ranks together) needed for a verdict
BOUND_SHARE = 0.20  # a part of the step at or above this share, and the largest one, is the bottleneck
PARTS = ("input", "checkpoint", "communication")  # the verdicts besides `compute`, in record order
WHAT = (
    "step: optimizer.step() to optimizer.step(); input: inside DataLoader's iterator __next__; "
    "checkpoint: inside torch.save to a file, torch.distributed.checkpoint save/async_save, "
    "safetensors save; communication: inside torch.distributed collective calls and Work.wait "
    "(with NCCL the host's blocking time; DDP's gradient all-reduce inside backward counts as "
    "compute); compute: the rest. The outermost counts once; the first "
    f"{WARMUP_STEPS} steps of each rank start are skipped."
)
ADVICE = {
    "input": "more GPUs will not make it faster: more DataLoader workers, faster storage or "
    "pre-processed data first",
    "checkpoint": "more GPUs will not make it faster: save less often, or with DCP's async_save",
    "communication": "more GPUs add more of it: larger batches per step, fewer or overlapped collectives",
    "compute": "more GPUs can help where the model or batch can scale",
}
# on a CPU rehearsal the step computes far slower than on the cluster's GPUs: the same input,
# checkpoint and communication time weighs more there, and "more GPUs" is not this run's advice
CPU_ADVICE = {
    "input": "on a GPU, whose compute is far faster, the wait for data weighs even more: more "
    "DataLoader workers, faster storage or pre-processed data first",
    "checkpoint": "on a GPU, whose compute is far faster, saving weighs even more: save less "
    "often, or with DCP's async_save",
    "communication": "on a GPU, whose compute is far faster, communication weighs even more: "
    "larger batches per step, fewer or overlapped collectives",
    "compute": "measured on this machine's CPU: whether the GPU run is compute bound takes a "
    "rehearsal on a GPU machine (the GPU computes the same step far faster, so the other parts "
    "weigh more there)",
}
BOUND = {
    "input": "waits for data",
    "checkpoint": "saves checkpoints",
    "communication": "waits in collectives",
}


@dataclass(frozen=True)
class StepSplit:
    """One rank's steady-state steps: how many, their total time and its parts (seconds)."""

    rank: int
    steps: int
    total_s: float
    input_s: float
    checkpoint_s: float
    communication_s: float
    gpu_busy: float | None = None  # 0..1, the device's utilisation over the steady steps
    peak_memory_bytes: int | None = None

    @property
    def compute_s(self) -> float:
        return max(0.0, self.total_s - self.input_s - self.checkpoint_s - self.communication_s)

    def part(self, name: str) -> float:
        return float(getattr(self, f"{name}_s"))


def rank_splits(records: Sequence[Mapping[str, Any]]) -> list[StepSplit]:
    """Per rank, the steps of every start of its script after that start's warm-up, pooled."""
    by_start: dict[tuple[int, Any, Any, Any], list[list[float]]] = {}
    gpu: dict[int, tuple[float | None, int | None]] = {}
    for r in records:
        if r.get("event") != "steps" or r.get("rank") is None:
            continue
        rank = int(r["rank"])
        start = (rank, r.get("attempt"), r.get("restart"), r.get("pid"))
        first = int(r.get("first") or 0)
        for offset, times in enumerate(r.get("times") or []):
            if first + offset >= WARMUP_STEPS and len(times) == 4:
                by_start.setdefault(start, []).append([float(t) for t in times])
        if r.get("gpu_busy") is not None or r.get("peak_memory_bytes") is not None:
            gpu[rank] = (r.get("gpu_busy"), r.get("peak_memory_bytes"))
    pooled: dict[int, list[list[float]]] = {}
    for (rank, *_), steps in by_start.items():
        pooled.setdefault(rank, []).extend(steps)
    out = []
    for rank in sorted(pooled):
        steps = pooled[rank]
        busy, peak = gpu.get(rank, (None, None))
        total, data, saving, waiting = (sum(s[i] for s in steps) for i in range(4))
        out.append(
            StepSplit(
                rank,
                len(steps),
                total,
                data,
                saving,
                waiting,
                None if busy is None else float(busy),
                None if peak is None else int(peak),
            )
        )
    return out


def verdict(splits: Sequence[StepSplit]) -> tuple[str, dict[str, float]]:
    """The bottleneck over all ranks' steady steps, and each part's share of the step time: the
    largest of input, checkpoint and communication when it takes BOUND_SHARE or more, else
    compute."""
    total = sum(s.total_s for s in splits)
    shares = {
        name: (sum(s.part(name) for s in splits) / total if total > 0 else 0.0)
        for name in (*PARTS, "compute")
    }
    worst = max(PARTS, key=lambda name: shares[name])
    return (worst if shares[worst] >= BOUND_SHARE else "compute"), shares


def _pct(share: float) -> str:
    """A share in whole percent; one decimal where whole percent would read as the bound
    (19.7 % is not "20 %" beside a rule of "20 % or more")."""
    near = round(share * 100) == round(BOUND_SHARE * 100) and abs(share - BOUND_SHARE) > 1e-9
    return f"{share * 100:.1f} %" if near else f"{round(share * 100):d} %"


def bottleneck_row(records: Sequence[Mapping[str, Any]], gpus: int = 0) -> CheckResult:
    """The `bottleneck` row: where each steady step's time goes, and the guide's verdict (its
    advice on a GPU, or what it means on this machine's CPU where GPUS is 0)."""
    splits = rank_splits(records)
    steps = sum(s.steps for s in splits)
    if steps < MIN_STEPS:
        return CheckResult(
            "bottleneck",
            "skip",
            f"not measured: {steps} steady optimizer step(s) after each rank's first {WARMUP_STEPS} "
            f"(needs {MIN_STEPS}; the script steps no torch.optim optimizer, or too few times "
            "before it ended or --timeout stopped it)",
        )
    name, shares = verdict(splits)
    mean_step = sum(s.total_s for s in splits) / steps
    head = (
        f"compute-bound: {_pct(shares['compute'])} of each step computes"
        if name == "compute"
        else f"{name}-bound: {_pct(shares[name])} of each step {BOUND[name]}"
    )
    parts = ", ".join(f"{p} {_pct(shares[p])}" for p in (*PARTS, "compute") if p != name)
    advice = ADVICE[name] if gpus else CPU_ADVICE[name]
    msg = (
        f"{head}; {advice} ({parts}; mean step {mean_step * 1000:.1f} ms over {steps} steady "
        f"step(s) of {len(splits)} rank(s), on this machine)"
    )
    rate = steps / sum(s.total_s for s in splits)
    samples = samples_per_step(records)
    per_process = sum(samples.values()) / len(samples) if samples else None
    busy = [s.gpu_busy for s in splits if s.gpu_busy is not None]
    peaks = [s.peak_memory_bytes for s in splits if s.peak_memory_bytes is not None]
    if busy:
        msg += f"; GPU busy {_pct(sum(busy) / len(busy))} (NVML utilisation, mean of ranks)"
    if peaks:
        msg += f"; peak memory {max(peaks) / 2**30:.2f} GiB (torch.cuda.max_memory_allocated)"
    return CheckResult(
        "bottleneck",
        "note",
        msg,
        tuple(s.rank for s in splits),
        details={
            "verdict": name,
            "shares": {k: round(v, 4) for k, v in shares.items()},
            "mean_step_s": round(mean_step, 6),
            "steady_steps": steps,
            "warmup_steps_skipped": WARMUP_STEPS,
            "steps_per_s_per_process": round(rate, 4),
            # the global-batch row's samples per optimizer step, mean over the ranks
            "samples_per_step_per_process": None if per_process is None else round(per_process, 4),
            "samples_per_s_per_process": None if per_process is None else round(rate * per_process, 4),
            "gpu_busy": round(sum(busy) / len(busy), 4) if busy else None,
            "peak_memory_bytes": max(peaks) if peaks else None,
            "per_rank": [_rank_dict(s) for s in splits],
            "what": WHAT,
        },
    )


def _rank_dict(s: StepSplit) -> dict[str, Any]:
    return {
        "rank": s.rank,
        "steps": s.steps,
        "step_s": round(s.total_s / s.steps, 6) if s.steps else None,
        **{f"{p}_s": round(s.part(p), 6) for p in (*PARTS, "compute")},
        "gpu_busy": s.gpu_busy,
        "peak_memory_bytes": s.peak_memory_bytes,
    }


@dataclass(frozen=True)
class ScalingPoint:
    """One rehearsal of the scaling series: K processes per pod, the world it made, and its
    bottleneck row's details (empty where it measured nothing)."""

    procs_per_pod: int
    world: int
    measured: Mapping[str, Any]
    logs_dir: str


# two measurements of samples per step per process that differ by more than this are two batches
SAME_BATCH = 0.01


def _rate(p: ScalingPoint, unit: str) -> float:
    return float(p.measured.get(f"{unit}_per_s_per_process") or 0)


def _refusal(p: ScalingPoint, base: ScalingPoint, relative: float) -> str | None:
    """Why RELATIVE, P's throughput per process against BASE's, is no scaling efficiency, or None."""
    mine, theirs = (x.measured.get("samples_per_step_per_process") for x in (p, base))
    if mine and theirs and abs(float(mine) - float(theirs)) > SAME_BATCH * float(theirs):
        return (
            f"not an efficiency: the per-process batch changed ({float(theirs):g} -> {float(mine):g} "
            "samples per step; the script divides the global batch by the world size), so each "
            "process does other work per step"
        )
    if relative > 1.0:
        return (
            "not an efficiency: above 100 %, which adding processes cannot give; this machine's "
            "noise, caches or a setting that differs between the runs"
        )
    return None


def scaling_row(points: Sequence[ScalingPoint], machine: str) -> CheckResult:
    """The `scaling` row: each K's samples per second per process (steps per second where no
    samples were measured) against the smallest K's: the scaling efficiency of data
    parallelism, refused where the per-process batch changed or the figure is above 100 %."""
    unit = "samples" if all(p.measured.get("samples_per_s_per_process") for p in points) else "steps"
    base = min(points, key=lambda p: p.procs_per_pod) if points else None
    missing = sorted(p.procs_per_pod for p in points if not p.measured.get("steps_per_s_per_process"))
    if base is None or missing:
        return CheckResult(
            "scaling",
            "skip",
            "not measured: no steady optimizer steps with --procs-per-pod "
            + ", ".join(map(str, missing or [p.procs_per_pod for p in points]))
            + " (see each run's bottleneck row)",
            details={"runs": [_point_dict(p, None, None) for p in points]},
        )
    runs = []
    for p in points:
        relative = _rate(p, unit) / _rate(base, unit)
        runs.append(_point_dict(p, relative, _refusal(p, base, relative)))
    listed = "; ".join(_run_text(r, unit) for r in runs)
    refused = any(r["refused"] for r in runs)
    assumed = (
        ""
        if unit == "samples"
        else " (samples per step not measured: steps/s, assuming each process keeps its batch)"
    )
    return CheckResult(
        "scaling",
        "note",
        f"{'throughput' if refused else 'scaling efficiency'} on this machine ({machine}), "
        f"{unit}/s per process against {base.procs_per_pod} per pod (world {base.world}){assumed}: "
        f"{listed}. This machine's cores, not the cluster's GPUs: a drop here says the script or "
        "this machine limits it",
        details={
            "machine": machine,
            "baseline_procs_per_pod": base.procs_per_pod,
            "unit": unit,
            "runs": runs,
        },
    )


def _run_text(r: Mapping[str, Any], unit: str) -> str:
    batch = r.get("samples_per_step_per_process")
    per_step = f" ({float(batch):g} samples per step)" if batch else ""
    share = f"{_pct(r['relative'])} of the baseline, {r['refused']}" if r["refused"] else _pct(r["relative"])
    return (
        f"{r['procs_per_pod']} per pod (world {r['world']}): {float(r[f'{unit}_per_s_per_process']):.2f} "
        f"{unit}/s per process{per_step}, {share}, {r['verdict']}-bound"
    )


def _point_dict(p: ScalingPoint, relative: float | None, refused: str | None) -> dict[str, Any]:
    return {
        "procs_per_pod": p.procs_per_pod,
        "world": p.world,
        "steps_per_s_per_process": p.measured.get("steps_per_s_per_process"),
        "samples_per_s_per_process": p.measured.get("samples_per_s_per_process"),
        "samples_per_step_per_process": p.measured.get("samples_per_step_per_process"),
        "relative": None if relative is None else round(relative, 4),
        # the scaling efficiency, where the figure is one (refused: why not)
        "efficiency": None if relative is None or refused else round(relative, 4),
        "refused": refused,
        "verdict": p.measured.get("verdict"),
        "logs_dir": p.logs_dir,
    }


def measures(checks: Sequence[CheckResult]) -> dict[str, Any]:
    """What the rehearsal record keeps of the measurements: each row's verdict, message and
    numbers (the last of each)."""
    out: dict[str, Any] = {}
    for c in checks:
        if c.check in ("bottleneck", "scaling"):
            out[c.check] = {"status": c.status, "message": c.message, **dict(c.details)}
    return out
