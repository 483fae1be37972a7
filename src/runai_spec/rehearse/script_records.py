"""The audit layer's records read back: the run beside them, and which saves are checkpoints.

A checkpoint is a whole save of the API the script used, at the path it ends up at: `save`
records the audit layer marked complete (DCP's folder with its `.metadata`; a file that
torch.save or safetensors wrote and closed; DeepSpeed's engine save that returned), or an
async DCP save's `save-complete`; a checkpoint the script renamed into place counts at its new
path. Serialisations into memory and saves inside other saves (DCP's own torch.save calls)
are none."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LOST = "lost when the pod restarts"
DCP_API = "torch.distributed.checkpoint"  # the audit layer's `api` of DCP's saves
# where the script says no step, the checkpoint's name often does: step-200, global_step200
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z]+)*$")
# what a rank does after a save: once one of these follows it, the script is past its renames
_AFTER_SAVE = ("moved-on", "save-start", "end", "exit", "destroy-process-group")


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
    volumes: tuple[str, ...] = ()  # every PVC's mount path (the checkpoint volume's too)
    checkpoint_format: str | None = None  # the profile's checkpoint.format
    crash: str | None = None  # how torchrun's agent saw the first worker fail ("exit code -6 (SIGABRT)")
    second_network: bool = False  # the preset attaches a network beside the pod's (Plan.attaches_network)


def generation(rec: Mapping[str, Any]) -> tuple[int, int]:
    """One start of a rank's process: (container attempt, torchrun restart)."""
    return int(rec.get("attempt") or 0), int(rec.get("restart") or 0)


def under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def ranks_text(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in sorted(set(ranks)))


def step_of(rec: Mapping[str, Any]) -> int | None:
    """The step a checkpoint holds: as the script's state says, else its name's last number."""
    step = rec.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    name = os.path.basename(str(rec.get("path") or "").rstrip("/"))
    found = _TRAILING_NUMBER.search(name)
    return int(found.group(1)) if found else None


def _moves(records: Sequence[Mapping[str, Any]]) -> list[tuple[Any, tuple[int, int], str, str, float]]:
    """(pid, generation, src, dst, t) of each rename of a checkpoint, in time order. A PID is
    one process's only within its generation: each container start is a PID namespace of its
    own, whose PIDs the next start has again (issue 42 item 1)."""
    return [
        (r.get("pid"), generation(r), str(r["src"]), str(r["dst"]), float(r.get("t") or 0))
        for r in records
        if r.get("event") == "rename" and r.get("src") and r.get("dst")
    ]


def checkpoints(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every whole checkpoint, in time order, at its final path (`saved_as`: where it was
    written, where it was renamed; `t`: when it was whole there)."""
    moves = _moves(records)
    out: list[dict[str, Any]] = []
    for r in records:
        # a record without `complete` comes from an audit layer before completion was told
        whole = r.get("event") == "save-complete" or (r.get("event") == "save" and r.get("complete", True))
        if not whole or r.get("failed") or not r.get("path"):
            continue
        path, t = str(r["path"]), float(r.get("t") or 0)
        for _ in range(8):  # a chain of renames, never a loop
            # the first rename of this file by this process after the save: a later save to the
            # same temporary name is renamed again later, and that rename is not this one's
            moved = next(
                (
                    (dst, when)
                    for pid, gen, src, dst, when in moves
                    if pid == r.get("pid") and gen == generation(r) and src == path and when >= t
                ),
                None,
            )
            if moved is None:
                break
            path, t = moved[0], max(t, moved[1])
        # a DCP save is every rank's shards, its async `save-complete` too (which says no `sharded`)
        sharded = bool(r.get("sharded")) or str(r.get("api") or "").startswith(DCP_API)
        out.append({**r, "path": path, "saved_as": r["path"], "t": t, "group": path, "sharded": sharded})
    _per_rank_files(out)
    return sorted(out, key=lambda c: float(c["t"]))


def _as_rank_0(path: str, rank: int) -> list[str]:
    """PATH with one of its standalone numbers RANK read as 0, each way: `ckpt/rank1.pt` ->
    `ckpt/rank0.pt`, and `step-1/rank1.pt` -> `step-0/rank1.pt` or `step-1/rank0.pt`."""
    spots = [m.start() for m in re.finditer(rf"(?<![0-9]){rank}(?![0-9])", path)]
    return [path[:i] + "0" + path[i + len(str(rank)) :] for i in spots]


def _per_rank_files(found: list[dict[str, Any]]) -> None:
    """Every rank saving a file of its own (`rank{k}.pt` beside rank 0's `rank0.pt`) is one
    sharded checkpoint, as a DCP save is: each such save is marked `sharded`, and `group` is
    rank 0's path, the same for all of its files."""
    by_zero = {(c["path"], generation(c)) for c in found if c.get("rank") == 0}
    for c in found:
        rank = c.get("rank")
        if c.get("sharded") or not isinstance(rank, int) or rank <= 0:
            continue
        zero = next((p for p in _as_rank_0(str(c["path"]), rank) if (p, generation(c)) in by_zero), None)
        if zero is not None:
            c.update(sharded=True, group=zero)
            for z in found:
                if z.get("rank") == 0 and z["path"] == zero:
                    z["sharded"] = True


# A rank that ended a whole save and then neither saved nor renamed anything for this long is
# past it too (a script that saves and then waits, evaluates or sleeps may never step again):
# renames into place follow their save at once; seconds of the records' wall clock.
SETTLE_S = 2.0


def first_checkpoint(
    records: Sequence[Mapping[str, Any]], world: int, now: float | None = None
) -> dict[int, int]:
    """{rank: step} once the first start of the script has a whole checkpoint and every rank
    that writes it is past it (a sharded save: every rank): a later step, save or end, or,
    given NOW (the records' wall clock), SETTLE_S quiet seconds after the save with no rename
    since; {} before. This is where a fault "after the first checkpoint" lands."""
    first = [r for r in records if generation(r) == (0, 0)]
    found = checkpoints(first)
    if not found:
        return {}
    group = str(found[0]["group"])
    mine = [c for c in found if c["group"] == group and c.get("rank") is not None]
    saving = set(range(world)) if any(c.get("sharded") for c in mine) else {int(c["rank"]) for c in mine}
    done: dict[int, int] = {}
    for c in mine:
        mine_after = [r for r in first if r.get("pid") == c.get("pid") and float(r.get("t") or 0) >= c["t"]]
        later = any(r.get("event") in _AFTER_SAVE for r in mine_after)
        if not later and now is not None:
            last = max(
                [float(c["t"])] + [float(r.get("t") or 0) for r in mine_after if r.get("event") == "rename"]
            )
            later = now - last >= SETTLE_S
        if later:
            done[int(c["rank"])] = step_of(c) or 0
    return done if saving <= set(done) else {}


def cut_short(records: Sequence[Mapping[str, Any]], before: float | None = None) -> list[Mapping[str, Any]]:
    """The saves that started (before BEFORE, a wall-clock time) and never ended: a fault
    landed while they wrote."""
    ended = {
        (r.get("pid"), generation(r), r.get("path"))
        for r in records
        if r.get("event") == "save" and (before is None or float(r.get("t") or 0) <= before)
    }
    return [
        r
        for r in records
        if r.get("event") == "save-start"
        and (before is None or float(r.get("t") or 0) <= before)
        and (r.get("pid"), generation(r), r.get("path")) not in ended
    ]


def ended(records: Sequence[Mapping[str, Any]], world: int) -> bool:
    """Every rank of the first start has an `end` record: its script is done."""
    done = {int(r["rank"]) for r in records if r.get("event") == "end" and generation(r) == (0, 0)}
    return set(range(world)) <= done


def crashed_after_end(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """Ranks whose script ended but whose process never exited cleanly: no `exit` record of
    the same process (atexit's last handler, the audit layer's, never ran), or a new start of
    the rank by torchrun after it."""
    out: set[int] = set()
    for end in (r for r in records if r.get("event") == "end" and r.get("rank") is not None):
        same = [r for r in records if r.get("pid") == end.get("pid") and generation(r) == generation(end)]
        again = any(
            r.get("event") == "start" and r.get("rank") == end.get("rank") and generation(r) > generation(end)
            for r in records
        )
        if again or not any(r.get("event") == "exit" for r in same):
            out.add(int(end["rank"]))
    return sorted(out)


def stuck(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The audit layer's `stuck` records (a rank alive its STUCK_S after its own
    destroy_process_group, or after every other rank exited) of processes that never exited
    after them, one per rank."""
    exited = {(r.get("pid"), generation(r)) for r in records if r.get("event") == "exit"}
    out: dict[int, Mapping[str, Any]] = {}
    for r in records:
        if (
            r.get("event") == "stuck"
            and r.get("rank") is not None
            and (r.get("pid"), generation(r)) not in exited
        ):
            out.setdefault(int(r["rank"]), r)
    return [out[k] for k in sorted(out)]


def stuck_text(found: Sequence[Mapping[str, Any]]) -> str:
    """'rank 1 still alive 10 s after its own destroy_process_group, waiting in …' of each."""
    parts = []
    for r in found:
        where = list(r.get("waits_in") or [])
        threads = list(r.get("threads") or [])
        waits = f", waiting in {' <- '.join(reversed(where[-3:]))}" if where else ""
        joins = (
            f" (non-daemon thread(s) still running: {', '.join(map(str, threads[:3]))})" if threads else ""
        )
        after = str(r.get("after") or "destroy_process_group")
        event = f"its own {after}" if after == "destroy_process_group" else after
        parts.append(
            f"rank {r['rank']} still alive {float(r.get('seconds') or 0):g} s after {event}{waits}{joins}"
        )
    return "; ".join(parts)


def sigterm_saves(records: Sequence[Mapping[str, Any]], sigterm: float) -> list[Mapping[str, Any]]:
    """The whole checkpoints whose save started at or after SIGTERM (a wall-clock time), by the
    process each rank ran when it came (its latest start before it): the saves a SIGTERM
    handler made; a periodic save under way when the signal came is none."""
    current: dict[int, tuple[Any, tuple[int, int]]] = {}
    for r in records:
        if r.get("event") == "start" and r.get("rank") is not None and float(r.get("t") or 0) <= sigterm:
            current[int(r["rank"])] = (r.get("pid"), generation(r))
    began = {
        (r.get("pid"), generation(r), r.get("path"))
        for r in records
        if r.get("event") == "save-start" and float(r.get("t") or 0) >= sigterm
    }
    return [
        c
        for c in checkpoints(records)
        if c.get("rank") is not None
        and current.get(int(c["rank"])) == (c.get("pid"), generation(c))
        and (c.get("pid"), generation(c), c.get("saved_as")) in began
    ]
