"""The guide's checklist on the researcher's own script (`rehearse --own-script`).

It reads what the audit layer (`runai_spec/audit/sitecustomize.py`) recorded in every rank.

Each check is one row: pass, fail, or skip with the reason it could not be checked here. A
"generation" of a rank is one start of its process: (container attempt, torchrun restart)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..pipeline.checklist import GUIDE_CHECKS, PreflightSettings
from .checks import CheckResult

GPU_ONLY_HINTS = ("nccl", "cuda", "nvidia driver", "no nvidia", "gpu")
LOST = "lost when the pod restarts"
SCRIPT_ROWS = GUIDE_CHECKS  # the guide's checklist, in its order


def read_audit(folder: Path, key: str) -> list[dict[str, Any]]:
    """Every record of every rank that the audit layer wrote under this rehearsal's KEY, in
    time order; a torn last line (a killed rank) is skipped, and so is every line whose HMAC
    does not verify (`foreign_records` counts those)."""
    return _read_audit(folder, key)[0]


def foreign_records(folder: Path, key: str) -> dict[str, int]:
    """{file: lines} of what the audit folder holds that the audit layer did not write under
    KEY (a script writing records there itself, issue 23): never counted."""
    return _read_audit(folder, key)[1]


def _read_audit(folder: Path, key: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    records: list[dict[str, Any]] = []
    foreign: dict[str, int] = {}
    secret = key.encode()
    entries = sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
    for path in entries:
        if (
            not (path.name.startswith("rank-") and path.name.endswith(".jsonl"))
            or path.is_symlink()
            or not path.is_file()
        ):
            foreign[path.name] = foreign.get(path.name, 0) + 1
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for index, line in enumerate(lines):
            mac, _, body = line.partition(" ")
            good = bool(secret) and hmac.compare_digest(
                mac.encode(), hmac.new(secret, body.encode(), hashlib.sha256).hexdigest().encode()
            )
            try:
                item = json.loads(body) if good else None
            except ValueError:
                item = None
            if isinstance(item, dict) and isinstance(item.get("event"), str):
                records.append(item)
            elif not (index == len(lines) - 1 and not line.endswith("}")):  # not a torn tail
                foreign[path.name] = foreign.get(path.name, 0) + 1
    records.sort(key=lambda r: float(r.get("t") or 0))
    return records, foreign


def foreign_row(foreign: Mapping[str, int]) -> CheckResult | None:
    """The failing row for records the audit layer did not write, or None."""
    if not foreign:
        return None
    files = sorted(foreign)
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return CheckResult(
        "audit",
        "fail",
        f"{sum(foreign.values())} record(s) in the audit folder "
        f"were not written by the audit layer ({shown}): not counted; a script "
        "that writes there itself fails the rehearsal",
        details={"files": files},
    )


def _generation(rec: Mapping[str, Any]) -> tuple[int, int]:
    return int(rec.get("attempt") or 0), int(rec.get("restart") or 0)


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in sorted(set(ranks)))


@dataclass(frozen=True)
class ScriptRun:
    """What the rehearsal knows about the run beside the records."""

    world: int  # processes started here
    plan_world: int  # processes the plan asks for in the cluster
    checkpoint_dir: str  # the checkpoint volume's path as the script sees it
    gpus: int  # visible GPUs (0: CPU, gloo)
    restarted: bool  # a fault was injected (a kill or a preemption)
    timed_out: bool  # some pod was still running at --timeout
    path_note: str | None = None  # how volume paths were mapped when they are not the real ones


def script_checks(
    records: Sequence[Mapping[str, Any]], run: ScriptRun, settings: PreflightSettings
) -> list[CheckResult]:
    """One row per guide check on the script, in SCRIPT_ROWS order, then any audit error."""
    gpu_only = _gpu_only_stop(records, run)
    rows = [
        _ranks_row(records, run),
        _world_row(records, run),
        _device_row(records, run),
        _batch_row(records, run, settings),
        _checkpoint_row(records, run),
        _metrics_row(records),
        _resume_row(records, run),
        _shutdown_row(records, run),
    ]
    if gpu_only is not None:
        rows = [
            r if r.status == "pass" else CheckResult(r.check, "skip", f"not checked here: {gpu_only}")
            for r in rows
        ]
    errors = [r for r in records if r.get("event") == "audit-error"]
    if errors:
        rows.append(
            CheckResult(
                "audit",
                "skip",
                f"the audit layer failed {len(errors)} time(s) "
                f"(the script was not affected): {errors[0].get('where')}",
                details={"error": str(errors[0].get("error", ""))[-300:]},
            )
        )
    return rows


def _gpu_only_stop(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> str | None:
    """Why a script that needs a GPU stopped on this CPU machine, or None."""
    if run.gpus:
        return None
    for rec in records:
        failed = str(rec.get("failed") or rec.get("exception") or "").lower()
        asked = str(rec.get("requested_backend") or "").lower()
        if (rec.get("event") == "init-process-group" and "nccl" in asked and rec.get("failed")) or (
            failed and any(word in failed for word in GPU_ONLY_HINTS)
        ):
            what = "asks for nccl" if "nccl" in asked else "needs CUDA"
            return (
                f"the script {what} and this machine has no GPU (gloo, CPU); rehearse on a "
                "GPU machine, or let the script pick gloo/CPU when no GPU is visible"
            )
    return None


def _starts(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("event") == "start" and r.get("rank") is not None]


def _ranks_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    first = [r for r in _starts(records) if _generation(r) == (0, 0)]
    counts: dict[int, int] = {}
    for r in first:
        counts[int(r["rank"])] = counts.get(int(r["rank"]), 0) + 1
    missing = [k for k in range(run.world) if k not in counts]
    twice = [k for k, n in counts.items() if n > 1]
    extra = [k for k in counts if not 0 <= k < run.world]
    if missing or twice or extra:
        parts = []
        if missing:
            parts.append(f"rank(s) {_ranks(missing)} never started")
        if twice:
            parts.append(f"rank(s) {_ranks(twice)} started more than once")
        if extra:
            parts.append(f"rank(s) {_ranks(extra)} outside 0..{run.world - 1}")
        return CheckResult(
            "ranks",
            "fail",
            "; ".join(parts) + f" (expected {run.world})",
            tuple(sorted(counts)),
            tuple(sorted(missing + twice + extra)),
        )
    return CheckResult("ranks", "pass", f"all {run.world} rank(s) started once", tuple(sorted(counts)))


def _world_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    inits = [r for r in records if r.get("event") == "init-process-group" and not r.get("failed")]
    if not inits:
        if run.world == 1:
            return CheckResult("world-size", "pass", "one process, no process group")
        return CheckResult(
            "world-size",
            "fail",
            f"no rank initialised a process group, yet the "
            f"job starts {run.world} processes: they would train alone",
        )
    wrong = sorted(
        {
            int(r["rank"])
            for r in inits
            if r.get("group_world_size") != run.world and r.get("rank") is not None
        }
    )
    seen = sorted({int(r["rank"]) for r in inits if r.get("rank") is not None})
    silent = [k for k in range(run.world) if k not in seen]
    if wrong or silent:
        sizes = sorted({str(r.get("group_world_size")) for r in inits})
        msg = (
            f"rank(s) {_ranks(wrong)} joined a group of {', '.join(sizes)}, not {run.world}"
            if wrong
            else f"rank(s) {_ranks(silent)} never initialised the process group"
        )
        return CheckResult("world-size", "fail", msg, tuple(seen), tuple(wrong or silent))
    backend = sorted({str(r.get("backend")) for r in inits})
    return CheckResult(
        "world-size",
        "pass",
        f"every rank joined one group of {run.world} ({', '.join(backend)})",
        tuple(seen),
    )


def _last_device(records: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    out: dict[int, Mapping[str, Any]] = {}
    for r in records:
        if r.get("device") and r.get("rank") is not None:
            out[int(r["rank"])] = r
    return out


def _device_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    devices = _last_device(records)
    if not run.gpus:
        return CheckResult(
            "device",
            "skip",
            "not checked here: no GPU on this machine (gloo, CPU); one device per rank needs the GPU machine",
        )
    on_cpu = [k for k, r in devices.items() if r.get("device") != "cuda"]
    by_uuid: dict[str, list[int]] = {}
    for k, r in devices.items():
        if r.get("device") == "cuda":
            by_uuid.setdefault(str(r.get("device_uuid")), []).append(k)
    shared = [ks for ks in by_uuid.values() if len(ks) > 1]
    if on_cpu or shared or len(devices) < run.world:
        parts = [f"rank(s) {_ranks(on_cpu)} used the CPU"] if on_cpu else []
        parts += [f"ranks {_ranks(ks)} share one GPU" for ks in shared]
        if len(devices) < run.world:
            parts.append(f"rank(s) {_ranks(set(range(run.world)) - set(devices))} used no GPU")
        return CheckResult(
            "device",
            "fail",
            "; ".join(parts),
            tuple(sorted(devices)),
            tuple(sorted(set(on_cpu) | {k for ks in shared for k in ks})),
        )
    return CheckResult(
        "device", "pass", f"{len(by_uuid)} ranks, {len(by_uuid)} distinct GPUs", tuple(sorted(devices))
    )


def _batch_row(
    records: Sequence[Mapping[str, Any]], run: ScriptRun, settings: PreflightSettings
) -> CheckResult:
    if settings.global_batch is None:
        return CheckResult("global-batch", "skip", "the profile declares no global batch")
    local, accum, declared = settings.local_batch, settings.grad_accum, settings.global_batch
    got = local * run.plan_world * accum
    sizes = {
        r.get("group_world_size")
        for r in records
        if r.get("event") == "init-process-group" and not r.get("failed")
    }
    here = f"; here {run.world} process(es) ran, scaled down" if run.world != run.plan_world else ""
    if sizes and sizes != {run.world}:
        return CheckResult(
            "global-batch",
            "fail",
            f"the script's world size {sorted(map(str, sizes))} is not the {run.world} the job starts",
        )
    if got != declared:
        return CheckResult(
            "global-batch",
            "fail",
            f"{local} local x {run.plan_world} processes x "
            f"{accum} accumulation = {got}, not the declared {declared}",
        )
    return CheckResult(
        "global-batch",
        "pass",
        f"{local} local x {run.plan_world} processes x {accum} accumulation = {declared}{here}",
    )


def _checkpoint_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    # A save without a path serialises into memory (DCP's planners call torch.save into a
    # buffer on every rank, torch 2.13 `torch/distributed/checkpoint/`): no checkpoint of its
    # own, so no rank "wrote a non-sharded checkpoint (None)"; the DCP save itself is recorded
    # with its folder (audit layer, sharded).
    in_memory = [r for r in records if r.get("event") == "save" and not r.get("failed") and not r.get("path")]
    saves = [r for r in records if r.get("event") == "save" and not r.get("failed") and r.get("path")]
    note = f" ({run.path_note})" if run.path_note else ""
    if not saves:
        more = " before --timeout stopped it; give it longer" if run.timed_out else ""
        return CheckResult(
            "checkpoint",
            "fail",
            "no rank saved a checkpoint (torch.save, "
            f"torch.distributed.checkpoint, safetensors){more}: the guide asks "
            f"for periodic checkpoints on the checkpoint volume {run.checkpoint_dir}",
        )
    outside = [r for r in saves if not _under(str(r["path"]), run.checkpoint_dir)]
    not_zero = [r for r in saves if not r.get("sharded") and r.get("rank") not in (0, None)]
    problems: list[str] = []
    if outside:
        paths = sorted({str(r["path"]) for r in outside})
        problems.append(
            f"{', '.join(paths[:3])} is not on the checkpoint volume {run.checkpoint_dir}: {LOST}"
        )
    if not_zero:
        problems.append(
            f"rank(s) {_ranks(int(r['rank']) for r in not_zero)} wrote a "
            f"non-sharded checkpoint ({not_zero[0].get('path')}): only rank 0 "
            "should write it (sharded DCP saves from every rank are fine)"
        )
    bad_ranks = tuple(sorted({int(r["rank"]) for r in outside + not_zero if r.get("rank") is not None}))
    if problems:
        return CheckResult(
            "checkpoint",
            "fail",
            "; ".join(problems) + note,
            failed_ranks=bad_ranks,
            details={"saves": [r.get("path") for r in saves][:20]},
        )
    apis = sorted({str(r.get("api")) for r in saves})
    where = f"under {run.checkpoint_dir}" + (" (and in memory)" if in_memory else "")
    return CheckResult(
        "checkpoint",
        "pass",
        f"{len(saves)} save(s) {where} by "
        f"rank(s) {_ranks(int(r['rank']) for r in saves if r.get('rank') is not None)}"
        f" with {', '.join(apis)}{note}",
    )


def _metrics_row(records: Sequence[Mapping[str, Any]]) -> CheckResult:
    writes = [r for r in records if r.get("event") == "metrics" and not r.get("failed")]
    if not writes:
        return CheckResult(
            "metrics", "skip", "the script opened no TensorBoard, wandb or mlflow writer (nothing to check)"
        )
    others = sorted({int(r["rank"]) for r in writes if r.get("rank") not in (0, None)})
    apis = sorted({str(r.get("api")) for r in writes})
    if others:
        return CheckResult(
            "metrics",
            "fail",
            f"rank(s) {_ranks(others)} also write shared metrics ({', '.join(apis)}): only rank 0 should",
            failed_ranks=tuple(others),
        )
    return CheckResult("metrics", "pass", f"only rank 0 writes metrics ({', '.join(apis)})", (0,))


def _resume_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    if not run.restarted:
        return CheckResult(
            "resume",
            "skip",
            "no restart in this rehearsal: add --kill POD "
            "(or --restart-after-checkpoint) to check the restore",
        )
    first_saved: dict[int, int] = {}
    for r in records:
        if r.get("event") == "save" and _generation(r) == (0, 0) and isinstance(r.get("step"), int):
            first_saved[int(r["rank"])] = max(first_saved.get(int(r["rank"]), -1), int(r["step"]))
    later = [r for r in _starts(records) if _generation(r) != (0, 0)]
    if not later:
        return CheckResult(
            "resume", "fail", "no rank started again after the fault: nothing resumed (see the fault row)"
        )
    failed: list[str] = []
    bad: set[int] = set()
    checked: set[int] = set()
    for start in later:
        rank, gen = int(start["rank"]), _generation(start)
        # a PID is this start's only within its generation: each container start is a PID
        # namespace of its own, whose PIDs the next start may have again
        mine = [
            r
            for r in records
            if r.get("pid") == start.get("pid") and r.get("rank") == rank and _generation(r) == gen
        ]
        loads = [
            r
            for r in mine
            if r.get("event") == "load" and r.get("path") and _under(str(r["path"]), run.checkpoint_dir)
        ]
        saves = [r for r in mine if r.get("event") == "save"]
        first_save = saves[0] if saves else None
        checked.add(rank)
        if first_save is not None and (not loads or float(loads[0]["t"]) > float(first_save["t"])):
            failed.append(
                f"rank {rank} (restart {gen[0]}.{gen[1]}) saved before loading any "
                "checkpoint: it started again from step 0"
            )
            bad.add(rank)
        elif first_save is None and not loads:
            failed.append(f"rank {rank} (restart {gen[0]}.{gen[1]}) never loaded the checkpoint")
            bad.add(rank)
        elif (
            first_save is not None
            and isinstance(first_save.get("step"), int)
            and rank in first_saved
            and int(first_save["step"]) <= first_saved[rank]
        ):
            failed.append(
                f"rank {rank} saved step {first_save['step']} again after its restart "
                f"(step {first_saved[rank]} was saved before): it started again from "
                "step 0"
            )
            bad.add(rank)
    if failed:
        return CheckResult(
            "resume", "fail", "; ".join(failed[:4]), tuple(sorted(checked)), tuple(sorted(bad))
        )
    return CheckResult(
        "resume",
        "pass",
        f"rank(s) {_ranks(checked)} loaded the previous attempt's checkpoint before saving again",
        tuple(sorted(checked)),
    )


def _shutdown_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    last: dict[int, tuple[int, int]] = {}
    for r in _starts(records):
        last[int(r["rank"])] = max(last.get(int(r["rank"]), (0, 0)), _generation(r))
    exits = {
        int(r["rank"]): r
        for r in records
        if r.get("event") == "exit"
        and r.get("rank") is not None
        and _generation(r) == last.get(int(r["rank"]))
    }
    destroyed = {
        int(r["rank"])
        for r in records
        if r.get("event") == "destroy-process-group" and r.get("rank") is not None
    }
    initialised = {
        int(r["rank"])
        for r in records
        if r.get("event") == "init-process-group" and r.get("rank") is not None and not r.get("failed")
    }
    running = [k for k in last if k not in exits]
    if running and run.timed_out:
        return CheckResult(
            "shutdown",
            "skip",
            f"rank(s) {_ranks(running)} still running at --timeout: the end of the run was not seen here",
        )
    bad_exit = sorted(k for k, r in exits.items() if r.get("exit_code") != 0)
    no_destroy = sorted(initialised - destroyed)
    if running or bad_exit or no_destroy:
        parts = []
        if running:
            parts.append(f"rank(s) {_ranks(running)} never exited (killed?)")
        if bad_exit:
            codes = ", ".join(
                f"rank {k}: {exits[k].get('exit_code')}"
                + (f" ({exits[k].get('exception')})" if exits[k].get("exception") else "")
                for k in bad_exit[:4]
            )
            parts.append(f"non-zero exit ({codes})")
        if no_destroy:
            parts.append(f"rank(s) {_ranks(no_destroy)} did not call destroy_process_group")
        return CheckResult(
            "shutdown",
            "fail",
            "; ".join(parts),
            failed_ranks=tuple(sorted(set(running) | set(bad_exit) | set(no_destroy))),
        )
    return CheckResult(
        "shutdown", "pass", "every rank ended the process group and exited 0", tuple(sorted(exits))
    )
