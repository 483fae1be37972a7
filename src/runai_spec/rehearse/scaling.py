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


# torchrun sets OMP_NUM_THREADS=1 for its workers only where it starts several and the variable
# is not set (torch/distributed/run.py, `run`, torch 2.11-2.13): K=1 would run with every core's
# threads and K>1 with one, and the comparison would measure the thread setting
THREADS_ENV = "OMP_NUM_THREADS"


def _sets(node: Any, name: str) -> bool:
    """Whether a manifest (any nesting) has a container env entry NAME."""
    if isinstance(node, Mapping):
        env = node.get("env")
        if isinstance(env, list) and any(isinstance(e, Mapping) and e.get("name") == name for e in env):
            return True
        return any(_sets(v, name) for v in node.values())
    if isinstance(node, list):
        return any(_sets(v, name) for v in node)
    return False


def threads_env(manifests: Sequence[Mapping[str, Any]], spec: RehearsalSpec) -> dict[str, str]:
    """The thread setting every K of --scaling runs with: the container's own, else torchrun's
    default for several workers, OMP_NUM_THREADS=1, for K=1 too."""
    if THREADS_ENV in spec.env or any(_sets(m, THREADS_ENV) for m in manifests):
        return {}
    return {THREADS_ENV: "1"}


def _point(result: RehearseResult, procs: int) -> ScalingPoint:
    row = result.check("bottleneck")
    return ScalingPoint(
        procs, result.world_size, dict(row.details) if row is not None else {}, str(result.logs_dir)
    )


def rehearse_scaling(manifests: Sequence[Mapping[str, Any]], spec: RehearsalSpec) -> RehearseResult:
    """The rehearsal with spec's --procs-per-pod and one more per other K of --scaling, each in
    `<logs>/scaling-K/`, every one with the same thread setting (threads_env); the first with
    the `scaling` row added, its result.json written again."""
    from . import rehearse_manifests

    threads = threads_env(manifests, spec)
    spec = dataclasses.replace(spec, env={**spec.env, **threads})
    first = rehearse_manifests(manifests, spec)
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
    setting = (
        f"{THREADS_ENV}={threads[THREADS_ENV]} in every run" if threads else f"the profile's {THREADS_ENV}"
    )
    where = f"{machine()}, {'GPUs (nccl)' if first.backend == 'nccl' else 'no GPU (gloo)'}, {setting}"
    result = dataclasses.replace(first, checks=(*first.checks, scaling_row(points, where)))
    result.logs_dir.mkdir(parents=True, exist_ok=True)
    (result.logs_dir / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result
