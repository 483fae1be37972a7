"""`rehearse --scaling 1,2,4`: the own-script rehearsal again with each --procs-per-pod, compared."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError
from .bottleneck import ScalingPoint, scaling_row
from .checks import RehearseResult, result_dict
from .spec import RehearsalSpec

MAX_PROCS = 64  # a typo such as 1,2,40000 is refused before anything starts
HINT = "processes per pod to compare, e.g. --scaling 1,2,4 (with --own-script)"


def parse_scaling(text: str | None) -> tuple[int, ...]:
    """`1,2,4` as (1, 2, 4): distinct whole numbers from 1 to MAX_PROCS, in the order given."""
    if not text:
        return ()
    out: list[int] = []
    for item in text.split(","):
        word = item.strip()
        if not word.isdigit() or not 1 <= int(word) <= MAX_PROCS:
            raise InputError(
                f"{word or '(empty)'!s} is not a number of processes from 1 to {MAX_PROCS}",
                field="--scaling",
                hint=HINT,
            )
        if int(word) not in out:
            out.append(int(word))
    return tuple(out)


def check_scaling(spec: RehearsalSpec) -> None:
    """--scaling measures the script's steady steps: with --own-script, without faults."""
    if not spec.scaling:
        return
    if not spec.own_script:
        raise InputError(
            "measures your script's steps, and preflight.py steps no optimizer",
            field="--scaling",
            hint="add --own-script",
        )
    if spec.faults_asked:
        raise InputError(
            "measures steady runs; a --kill, --preempt or --restart-after-checkpoint would cut them short",
            field="--scaling",
            hint="rehearse the faults and the scaling separately",
        )


def machine() -> str:
    """This machine in the words of the scaling row."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    return f"{cores} CPU cores"


def _point(result: RehearseResult, procs: int) -> ScalingPoint:
    row = result.check("bottleneck")
    return ScalingPoint(
        procs, result.world_size, dict(row.details) if row is not None else {}, str(result.logs_dir)
    )


def rehearse_scaling(
    manifests: Sequence[Mapping[str, Any]], spec: RehearsalSpec, first: RehearseResult
) -> RehearseResult:
    """The rehearsal `first` (with spec's --procs-per-pod) and one more per other K of
    --scaling, each in `<logs>/scaling-K/`; `first` with the `scaling` row added, its
    result.json written again."""
    from . import rehearse_manifests

    points = []
    for procs in spec.scaling:
        if procs == spec.procs_per_pod:
            points.append(_point(first, procs))
            continue
        run = rehearse_manifests(
            manifests,
            dataclasses.replace(
                spec, procs_per_pod=procs, scaling=(), logs_dir=first.logs_dir / f"scaling-{procs}"
            ),
        )
        points.append(_point(run, procs))
    where = f"{machine()}, {'GPUs (nccl)' if first.backend == 'nccl' else 'no GPU (gloo)'}"
    result = dataclasses.replace(first, checks=(*first.checks, scaling_row(points, where)))
    (result.logs_dir / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result
