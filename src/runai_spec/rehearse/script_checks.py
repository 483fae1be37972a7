"""The guide's checklist on the researcher's own script (`rehearse --own-script`).

It reads what the audit layer (`runai_spec/audit/sitecustomize.py`) recorded in every rank.

Each check is one row: pass, fail, or skip with the reason it could not be checked here. A
"generation" of a rank is one start of its process: (container attempt, torchrun restart)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..pipeline.checklist import GUIDE_CHECKS, PreflightSettings
from .checks import CheckResult
from .script_records import ScriptRun, crashed_after_end, generation, ranks_text, stuck, stuck_text
from .script_rows import batch_row, master_address_row, metrics_row, transport_env_row
from .script_saves import checkpoint_row, resume_row

GPU_ONLY_HINTS = ("nccl", "cuda", "nvidia driver", "no nvidia", "gpu")
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


def script_checks(
    records: Sequence[Mapping[str, Any]], run: ScriptRun, settings: PreflightSettings
) -> list[CheckResult]:
    """One row per guide check on the script, in SCRIPT_ROWS order, then any audit error."""
    gpu_only = _gpu_only_stop(records, run)
    rows = [
        _ranks_row(records, run),
        _world_row(records, run),
        _device_row(records, run),
        batch_row(records, run, settings),
        checkpoint_row(records, run),
        metrics_row(records, run),
        resume_row(records, run),
        _shutdown_row(records, run),
    ]
    rows += [r for r in (transport_env_row(records), master_address_row(records, run)) if r is not None]
    if gpu_only is not None:
        rows = [
            r if r.status == "pass" else CheckResult(r.check, "skip", f"not checked here: {gpu_only}")
            for r in rows
        ]
    else:
        rows = _one_cause(records, rows)
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


# what a script records before it does anything the rows judge
_START_UP = ("start", "end", "exit", "audit-error", "env-set")
# what a script records once it trains: a step's batch, a step or save behind it, a save
_STEPPED = ("batch", "moved-on", "save-start", "save", "save-complete")
# rows that stand on their own when the script died early: the cause's row and what it did set
_OWN_ROWS = ("ranks", "shutdown", "transport-env", "master-address")


def _stopped(records: Sequence[Mapping[str, Any]]) -> str | None:
    """How the first start of the script ended where a rank stopped with an error and no rank
    took a step or saved: the exception (or exit code) of the first such rank, else None."""
    if any(r.get("event") in _STEPPED for r in records):
        return None
    for r in records:
        if r.get("event") == "exit" and generation(r) == (0, 0) and r.get("exit_code") not in (0, None):
            return str(r.get("exception") or f"exit code {r.get('exit_code')}")
    return None


def _one_cause(records: Sequence[Mapping[str, Any]], rows: list[CheckResult]) -> list[CheckResult]:
    """One cause reported once: where no rank started, the ranks row fails; where a rank
    stopped with an error before any rank took a step (a mistyped script name, `No module
    named 'tensorboard'`), the shutdown row fails with it; the rows that need the script to
    run skip, naming the cause (those that passed, e.g. world-size, stay)."""
    if not _starts(records):
        why = "no rank of the script started (see the ranks and pods rows)"
        return [
            r if r.check == "ranks" else CheckResult(r.check, "skip", f"not checked: {why}") for r in rows
        ]
    stopped = _stopped(records)
    if stopped is None:
        return rows
    when = "at start-up" if all(r.get("event") in _START_UP for r in records) else "before its first step"
    why = f"the script stopped {when} ({stopped}); see the shutdown row"
    return [
        r
        if r.check in _OWN_ROWS or r.status == "pass"
        else CheckResult(r.check, "skip", f"not checked: {why}")
        for r in rows
    ]


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


def _lifetimes(records: Sequence[Mapping[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """{rank: [(first, last) time of each of its processes' records]} in the first generation."""
    spans: dict[tuple[int, Any], tuple[float, float]] = {}
    for r in records:
        if r.get("rank") is None or generation(r) != (0, 0) or not isinstance(r.get("t"), int | float):
            continue
        key, t = (int(r["rank"]), r.get("pid")), float(r["t"])
        first, last = spans.get(key, (t, t))
        spans[key] = (min(first, t), max(last, t))
    by_rank: dict[int, list[tuple[float, float]]] = {}
    for (rank, _), span in spans.items():
        by_rank.setdefault(rank, []).append(span)
    return by_rank


def _overlap(spans: list[tuple[float, float]]) -> bool:
    ordered = sorted(spans)
    return any(b[0] < a[1] for a, b in zip(ordered, ordered[1:], strict=False))


def _ranks_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    first = [r for r in _starts(records) if generation(r) == (0, 0)]
    counts: dict[int, int] = {}
    for r in first:
        counts[int(r["rank"])] = counts.get(int(r["rank"]), 0) + 1
    # A rank's second process in one generation is a duplicate only while its first still
    # runs. One after it is torchrun's: its agent restarts a healthy group for a node joining
    # the rendezvous without spending a restart, so TORCHELASTIC_RESTART_COUNT stays
    # (torch/distributed/elastic/agent/server/api.py, _invoke_run, HEALTHY branch; torch 2.11-2.13).
    lives = _lifetimes(records)
    twice = [k for k, n in counts.items() if n > 1 and _overlap(lives.get(k, []))]
    again = [k for k, n in counts.items() if n > 1 and k not in twice]
    missing = [k for k in range(run.world) if k not in counts]
    extra = [k for k in counts if not 0 <= k < run.world]
    if missing or twice or extra:
        parts = []
        if missing:
            parts.append(f"rank(s) {ranks_text(missing)} never started")
        if twice:
            parts.append(f"rank(s) {ranks_text(twice)} started more than once at the same time")
        if extra:
            parts.append(f"rank(s) {ranks_text(extra)} outside 0..{run.world - 1}")
        return CheckResult(
            "ranks",
            "fail",
            "; ".join(parts) + f" (expected {run.world})",
            tuple(sorted(counts)),
            tuple(sorted(missing + twice + extra)),
        )
    restarted = (
        f"; rank(s) {ranks_text(again)} started again after they ended, as torchrun restarts a "
        "group for a node joining the rendezvous (no restart spent)"
        if again
        else ""
    )
    return CheckResult(
        "ranks", "pass", f"all {run.world} rank(s) started once{restarted}", tuple(sorted(counts))
    )


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
            f"rank(s) {ranks_text(wrong)} joined a group of {', '.join(sizes)}, not {run.world}"
            if wrong
            else f"rank(s) {ranks_text(silent)} never initialised the process group"
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
        parts = [f"rank(s) {ranks_text(on_cpu)} used the CPU"] if on_cpu else []
        parts += [f"ranks {ranks_text(ks)} share one GPU" for ks in shared]
        if len(devices) < run.world:
            parts.append(f"rank(s) {ranks_text(set(range(run.world)) - set(devices))} used no GPU")
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


def _stuck_row(records: Sequence[Mapping[str, Any]]) -> CheckResult | None:
    """The failing shutdown row of ranks alive after their own destroy_process_group, or None."""
    hung = stuck(records)
    if not hung:
        return None
    return CheckResult(
        "shutdown",
        "fail",
        f"{stuck_text(hung)}: in the cluster the pod never completes and holds its GPUs; end "
        "the threads and waits that outlive training (join them, or make them daemons)",
        failed_ranks=tuple(int(r["rank"]) for r in hung),
    )


def _shutdown_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    last: dict[int, tuple[int, int]] = {}
    for r in _starts(records):
        last[int(r["rank"])] = max(last.get(int(r["rank"]), (0, 0)), generation(r))
    exits = {
        int(r["rank"]): r
        for r in records
        if r.get("event") == "exit"
        and r.get("rank") is not None
        and generation(r) == last.get(int(r["rank"]))
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
    hung = _stuck_row(records)
    if hung is not None:
        return hung
    teardown = [] if run.restarted else crashed_after_end([r for r in records if generation(r) == (0, 0)])
    if teardown and run.crash is None and run.timed_out:
        return CheckResult(
            "shutdown",
            "skip",
            f"rank(s) {ranks_text(teardown)} still in teardown when stopped, after the script had "
            "ended (a thread, a flush or a hang at exit?): the end of the process was not seen here",
            failed_ranks=tuple(teardown),
        )
    if teardown:
        return CheckResult(
            "shutdown",
            "fail",
            f"rank(s) {ranks_text(teardown)} crashed in teardown, after the script had ended"
            + (f" ({run.crash})" if run.crash else "")
            + ": an atexit handler, a destructor or a thread still running at exit (e.g. "
            "`terminate called without an active exception`); in the cluster the pod fails "
            "although training finished, and torchrun restarts the workers",
            failed_ranks=tuple(teardown),
        )
    running = [k for k in last if k not in exits]
    if running and run.timed_out:
        return CheckResult(
            "shutdown",
            "skip",
            f"rank(s) {ranks_text(running)} still running at --timeout: the end of the run was not seen here",
        )
    bad_exit = sorted(k for k, r in exits.items() if r.get("exit_code") != 0)
    no_destroy = sorted(initialised - destroyed)
    if running or bad_exit or no_destroy:
        parts = []
        if running:
            parts.append(f"rank(s) {ranks_text(running)} never exited (killed?)")
        if bad_exit:
            codes = ", ".join(
                f"rank {k}: {exits[k].get('exit_code')}"
                + (f" ({exits[k].get('exception')})" if exits[k].get("exception") else "")
                for k in bad_exit[:4]
            )
            parts.append(f"non-zero exit ({codes})")
        if no_destroy:
            parts.append(f"rank(s) {ranks_text(no_destroy)} did not call destroy_process_group")
        return CheckResult(
            "shutdown",
            "fail",
            "; ".join(parts),
            failed_ranks=tuple(sorted(set(running) | set(bad_exit) | set(no_destroy))),
        )
    return CheckResult(
        "shutdown", "pass", "every rank ended the process group and exited 0", tuple(sorted(exits))
    )
