"""The `checkpoint` and `resume` rows of `rehearse --own-script`: whole checkpoints, what restarts loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checks import CheckResult
from .script_records import (
    LOST,
    ScriptRun,
    checkpoints,
    cut_short,
    generation,
    ranks_text,
    step_of,
    under,
)

# the profile's checkpoint.format, told by the API that wrote the checkpoint
FORMAT_OF_API = {
    "torch.save": "torch",
    "torch.distributed.checkpoint": "dcp",
    "safetensors": "safetensors",
    "deepspeed": "deepspeed",
}


def format_of(api: str) -> str:
    return next((fmt for prefix, fmt in FORMAT_OF_API.items() if api.startswith(prefix)), api)


def _unfinished(records: Sequence[Mapping[str, Any]]) -> str:
    """'; rank(s) … began a save of … that never completed' or ''."""
    cut = cut_short(records) + [
        r for r in records if r.get("event") == "save" and r.get("path") and r.get("complete") is False
    ]
    cut = [r for r in cut if not r.get("async")]
    if not cut:
        return ""
    paths = sorted({str(r.get("path")) for r in cut})
    return (
        f"; rank(s) {ranks_text(int(r['rank']) for r in cut if r.get('rank') is not None)} began "
        f"{len(cut)} save(s) that never completed ({', '.join(paths[:2])}): not counted"
    )


def checkpoint_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    """Whole checkpoints, on the checkpoint volume, non-sharded ones from rank 0 only, in the
    profile's format."""
    saves = checkpoints(records)
    in_memory = [r for r in records if r.get("event") == "save" and not r.get("failed") and not r.get("path")]
    note = f" ({run.path_note})" if run.path_note else ""
    unfinished = _unfinished(records)
    if not saves:
        more = " before --timeout stopped it; give it longer" if run.timed_out else ""
        return CheckResult(
            "checkpoint",
            "fail",
            "no rank saved a whole checkpoint (torch.save, torch.distributed.checkpoint, "
            f"safetensors, DeepSpeed){more}: the guide asks for periodic checkpoints on the "
            f"checkpoint volume {run.checkpoint_dir}{unfinished}",
        )
    outside = [r for r in saves if not under(str(r["path"]), run.checkpoint_dir)]
    not_zero = [r for r in saves if not r.get("sharded") and r.get("rank") not in (0, None)]
    used = sorted({format_of(str(r.get("api"))) for r in saves})
    problems: list[str] = []
    if outside:
        paths = sorted({str(r["path"]) for r in outside})
        problems.append(
            f"{', '.join(paths[:3])} is not on the checkpoint volume {run.checkpoint_dir}: {LOST}"
        )
    if not_zero:
        problems.append(
            f"rank(s) {ranks_text(int(r['rank']) for r in not_zero)} wrote a non-sharded checkpoint "
            f"({not_zero[0].get('path')}): only rank 0 should write it (sharded DCP saves from "
            "every rank are fine, and so are files of each rank's own beside rank 0's)"
        )
    if run.checkpoint_format and run.checkpoint_format not in used:
        problems.append(
            f"the profile declares checkpoint.format {run.checkpoint_format}, the script saved "
            f"{', '.join(used)} checkpoints: declare what the script writes"
        )
    if problems:
        bad = {int(r["rank"]) for r in outside + not_zero if r.get("rank") is not None}
        return CheckResult(
            "checkpoint",
            "fail",
            "; ".join(problems) + note,
            failed_ranks=tuple(sorted(bad)),
            details={"saves": [r.get("path") for r in saves][:20], "formats": used},
        )
    apis = sorted({str(r.get("api")) for r in saves})
    where = f"under {run.checkpoint_dir}" + (" (and in memory)" if in_memory else "")
    return CheckResult(
        "checkpoint",
        "pass",
        f"{_count(saves)} whole checkpoint save(s) {where} by rank(s) "
        f"{ranks_text(int(r['rank']) for r in saves if r.get('rank') is not None)} with "
        f"{', '.join(apis)}{unfinished}{note}",
        details={"formats": used},
    )


def _newest_step(there: Sequence[Mapping[str, Any]], rank: int, folder: str) -> int | None:
    """The step of the newest whole checkpoint on the volume that RANK can resume from: rank
    0's, a sharded one, or its own per-rank file."""
    steps = [
        step_of(c)
        for c in there
        if under(str(c["path"]), folder) and (c.get("sharded") or c.get("rank") in (0, rank, None))
    ]
    known = [s for s in steps if s is not None]
    return max(known) if known else None


def _count(saves: Sequence[Mapping[str, Any]]) -> int:
    """How many checkpoints the saves made: a sharded save is one, however many ranks wrote
    their shards (4 DCP saves by 4 ranks were "16 whole checkpoint saves")."""
    single = sum(1 for c in saves if not c.get("sharded"))
    shards: dict[tuple[str, tuple[int, int]], dict[Any, int]] = {}
    for c in saves:
        if c.get("sharded"):
            by_rank = shards.setdefault((str(c.get("group") or c["path"]), generation(c)), {})
            by_rank[c.get("rank")] = by_rank.get(c.get("rank"), 0) + 1
    return single + sum(max(by_rank.values()) for by_rank in shards.values())


def _judge(
    records: Sequence[Mapping[str, Any]], start: Mapping[str, Any], run: ScriptRun
) -> tuple[str | None, bool]:
    """(what is wrong with this restart's resume, or None; whether a checkpoint was there to resume)."""
    rank, gen, t0 = int(start["rank"]), generation(start), float(start.get("t") or 0)
    # a PID is this start's only within its generation: each container start is a PID
    # namespace of its own, whose PIDs the next start may have again
    mine = [
        r
        for r in records
        if r.get("pid") == start.get("pid") and r.get("rank") == rank and generation(r) == gen
    ]
    # any whole checkpoint before this start: one off the volume was lost with the pod, and a
    # restart that cannot resume from it started again from step 0 all the same
    there = [c for c in checkpoints(records) if float(c["t"]) < t0]
    loads = [
        r
        for r in mine
        if r.get("event") == "load" and r.get("path") and under(str(r["path"]), run.checkpoint_dir)
    ]
    saves = [r for r in mine if r.get("event") in ("save-start", "save") and r.get("path")]
    first_save = saves[0] if saves else None
    if not there:
        return None, False  # nothing whole to resume from: starting at step 0 is right
    label = f"rank {rank} (container start {gen[0]}" + (f", torchrun restart {gen[1]})" if gen[1] else ")")
    if first_save is not None and (not loads or float(loads[0]["t"]) > float(first_save["t"])):
        return f"{label} saved before loading any checkpoint: it started again from step 0", True
    if first_save is None and not loads:
        return f"{label} never loaded the checkpoint", True
    loaded = [s for s in (step_of(r) for r in loads) if s is not None]
    newest = _newest_step(there, rank, run.checkpoint_dir)
    if loaded and newest is not None and max(loaded) < newest:
        return (
            f"{label} loaded step {max(loaded)}, not the newest whole checkpoint (step {newest}): "
            "it repeats the steps between"
        ), True
    saved_before = [s for s in (step_of(c) for c in there if c.get("rank") == rank) if s is not None]
    again = step_of(first_save) if first_save is not None else None
    done = max(saved_before + loaded) if saved_before + loaded else None
    if again is not None and done is not None and again <= done:
        how = (
            f"it loaded step {max(loaded)} and repeats the work since (resume at the step after "
            "the saved one)"
            if loaded
            else "it started again from step 0"
        )
        return (
            f"{label} saved step {again} again after its restart (step {done} was saved before): {how}"
        ), True
    return None, True


def _unseen_loads(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> str:
    """' rank(s) … loaded …' for restarted ranks that loaded a checkpoint from the volume whose
    whole save the audit layer did not see, else '': the skip must not say they started over."""
    loads = [
        r
        for r in records
        if r.get("event") == "load"
        and generation(r) != (0, 0)
        and r.get("path")
        and under(str(r["path"]), run.checkpoint_dir)
    ]
    if not loads:
        return ""
    step = step_of(loads[0])
    return (
        f"; rank(s) {ranks_text(int(r['rank']) for r in loads if r.get('rank') is not None)} loaded "
        f"{loads[0].get('path')}" + (f" (step {step})" if step is not None else "") + ", whose "
        "whole save the audit layer did not see before the fault (written before this rehearsal, "
        "or by an API it does not follow)"
    )


def resume_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    """Every restarted rank loads a whole checkpoint from before the fault before it saves
    again; where none was whole yet (the fault landed mid-save), starting at step 0 is right."""
    if not run.restarted:
        return CheckResult(
            "resume",
            "skip",
            "no restart in this rehearsal: add --kill POD (or --restart-after-checkpoint) to check "
            "the restore",
        )
    later = [
        r
        for r in records
        if r.get("event") == "start" and r.get("rank") is not None and generation(r) != (0, 0)
    ]
    if not later:
        return CheckResult(
            "resume", "fail", "no rank started again after the fault: nothing resumed (see the fault row)"
        )
    failed: list[str] = []
    bad: set[int] = set()
    checked: set[int] = set()
    nothing: set[int] = set()
    for start in later:
        wrong, had = _judge(records, start, run)
        rank = int(start["rank"])
        checked.add(rank)
        if wrong:
            failed.append(wrong)
            bad.add(rank)
        elif not had:
            nothing.add(rank)
    if failed:
        return CheckResult(
            "resume", "fail", "; ".join(failed[:4]), tuple(sorted(checked)), tuple(sorted(bad))
        )
    if nothing == checked:
        cut = cut_short(records)
        mid = (
            f" (the fault landed mid-save: rank(s) {ranks_text(int(r['rank']) for r in cut)} were "
            f"writing {cut[0].get('path')}, never completed)"
            if cut
            else ""
        )
        unseen = _unseen_loads(records, run)
        started = (
            unseen if unseen else f"; the restarted rank(s) {ranks_text(checked)} rightly started from step 0"
        )
        return CheckResult(
            "resume",
            "skip",
            f"not checked: no checkpoint was whole before the fault{mid}{started} (fault after a "
            "checkpoint, e.g. @checkpoint, to check the restore)",
            tuple(sorted(checked)),
        )
    return CheckResult(
        "resume",
        "pass",
        f"rank(s) {ranks_text(checked - nothing)} loaded the previous attempt's checkpoint before "
        "saving again",
        tuple(sorted(checked)),
    )


def mid_save(records: Sequence[Mapping[str, Any]], wall: float) -> str:
    """'it landed mid-save: …; ' where saves that began before the fault (a wall-clock time)
    never completed, else ''."""
    cut = [r for r in cut_short(records) if float(r.get("t") or 0) <= wall]
    cut += [
        r
        for r in records
        if r.get("event") == "save" and r.get("failed") and r.get("path") and float(r.get("t") or 0) >= wall
    ]
    if not cut:
        return ""
    paths = sorted({str(r.get("path")) for r in cut})
    return (
        f"it landed mid-save: rank(s) {ranks_text(int(r['rank']) for r in cut if r.get('rank') is not None)} "
        f"were writing {', '.join(paths[:2])}, which never completed; "
    )
