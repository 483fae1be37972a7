"""The `global-batch`, `metrics` and `transport-env` rows of `rehearse --own-script`, measured."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..facts import mpi
from ..pipeline.checklist import PreflightSettings
from .checks import CheckResult
from .script_records import LOST, ScriptRun, generation, ranks_text, under

# a variable set by code of these folders is the library's own business, not the script's
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3")


def samples_per_step(records: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """{rank: samples between two optimizer steps} as the first start of each rank measured
    them (the audit layer's `batch` records): the DataLoader's batches where it used one, else
    the inputs of its outermost module calls; the most frequent value over the steps after the
    first. The first step also counts what a loader drew ahead of it: Accelerate's
    DataLoaderShard takes one batch before it yields the current one (accelerate 1.16.0
    data_loader.py, to know the last batch), so its first step reads one batch more; it counts
    only where it is the one step measured."""
    seen: dict[int, dict[int, int]] = {}
    for r in records:
        if r.get("event") != "batch" or r.get("rank") is None or generation(r) != (0, 0):
            continue
        value = int(r.get("loader") or 0) or int(r.get("forward") or 0)
        if value:
            seen.setdefault(int(r["rank"]), {})[int(r.get("n") or 0)] = value
    found = {}
    for rank, steps in seen.items():
        first = min(steps)
        values = [v for n, v in sorted(steps.items()) if n != first] or [steps[first]]
        found[rank] = Counter(values).most_common(1)[0][0]
    return found


def batch_row(
    records: Sequence[Mapping[str, Any]], run: ScriptRun, settings: PreflightSettings
) -> CheckResult:
    """The global batch the script trains with, measured: samples per optimizer step of each
    rank, against the profile's `batch.global`."""
    if settings.global_batch is None:
        return CheckResult("global-batch", "skip", "the profile declares no global batch")
    local, accum, declared = settings.local_batch, settings.grad_accum, settings.global_batch
    arithmetic = local * run.plan_world * accum
    if arithmetic != declared:
        return CheckResult(
            "global-batch",
            "fail",
            f"{local} local x {run.plan_world} processes x {accum} accumulation = {arithmetic}, "
            f"not the declared {declared}",
        )
    per_rank = samples_per_step(records)
    if not per_rank:
        return CheckResult(
            "global-batch",
            "note",
            "not measured: no rank stepped a torch optimizer with batches through a DataLoader or a "
            f"module call; the profile's arithmetic: {local} local x {run.plan_world} processes x "
            f"{accum} accumulation = {declared}",
        )
    shown = ", ".join(f"rank {k}: {v}" for k, v in sorted(per_rank.items()))
    here = sum(per_rank.values()) * run.world // len(per_rank)
    values = set(per_rank.values())
    details = {"samples_per_step": {str(k): v for k, v in sorted(per_rank.items())}, "declared": declared}
    if here == declared:
        return CheckResult(
            "global-batch",
            "pass",
            f"measured {here} samples per optimizer step over the {run.world} process(es) here ({shown}): "
            f"the declared {declared}; the script divides the global batch by the world size",
            details=details,
        )
    if len(values) == 1 and next(iter(values)) * run.plan_world == declared:
        return CheckResult(
            "global-batch",
            "pass",
            f"measured {next(iter(values))} samples per optimizer step per rank ({shown}) x "
            f"{run.plan_world} processes in the cluster = the declared {declared}",
            details=details,
        )
    cluster = max(values) * run.plan_world
    return CheckResult(
        "global-batch",
        "fail",
        f"measured samples per optimizer step: {shown}; that is {here} over the {run.world} "
        f"process(es) here and {cluster} over the {run.plan_world} in the cluster, not the declared "
        f"{declared} (a batch computed per node, or per rank from the wrong world size?)",
        failed_ranks=tuple(sorted(per_rank)),
        details=details,
    )


def metrics_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult:
    """Only rank 0 writes metrics, and where they land outlives the pod (a volume)."""
    writes = [r for r in records if r.get("event") == "metrics" and not r.get("failed")]
    if not writes:
        return CheckResult(
            "metrics", "skip", "the script opened no TensorBoard, wandb or mlflow writer (nothing to check)"
        )
    others = sorted({int(r["rank"]) for r in writes if r.get("rank") not in (0, None)})
    apis = sorted({str(r.get("api")) for r in writes})
    volumes = tuple(dict.fromkeys((*run.volumes, run.checkpoint_dir)))
    lost = [r for r in writes if r.get("path") and not any(under(str(r["path"]), v) for v in volumes)]
    problems = []
    if others:
        problems.append(
            f"rank(s) {ranks_text(others)} also write shared metrics ({', '.join(apis)}): only rank 0 should"
        )
    if lost:
        where = sorted({f"{r.get('api')} into {r.get('path')}" for r in lost})
        problems.append(
            f"{'; '.join(where[:2])}: the image's file system, {LOST}; point the writer at a "
            f"volume ({', '.join(volumes)})"
        )
    if problems:
        bad = sorted(set(others) | {int(r["rank"]) for r in lost if r.get("rank") is not None})
        return CheckResult("metrics", "fail", "; ".join(problems), failed_ranks=tuple(bad))
    where = sorted(
        {str(r.get("path") or r.get("tracking")) for r in writes if r.get("path") or r.get("tracking")}
    )
    into = f" into {', '.join(where[:2])}" if where else ""
    return CheckResult("metrics", "pass", f"only rank 0 writes metrics ({', '.join(apis)}){into}", (0,))


def transport_env_row(records: Sequence[Mapping[str, Any]]) -> CheckResult | None:
    """A failing row where the script set NCCL_*/transport variables itself at run time; None
    where it did not."""
    sets = [
        r
        for r in records
        if r.get("event") == "env-set"
        and not any(part in str(r.get("where") or "") for part in LIBRARY_PARTS)
    ]
    # DeepSpeed's OpenMPI runner's transport (its mpirun flags, .deepspeed_env): the engineers'
    runner = [r for r in records if r.get("event") in ("transport-flags", "deepspeed-env")]
    if not sets and not runner:
        return None
    shown = sorted({f"{r.get('name')}={r.get('value')} ({r.get('where')})" for r in sets})
    said = (
        [
            f"rank(s) {ranks_text(int(r['rank']) for r in sets if r.get('rank') is not None)} set "
            f"{'; '.join(shown[:3])} at run time: the transport reads these once, and a value set in "
            "the script overrides the preset's for this site; declare them in the profile's env, where "
            "the preset's admission checks them"
        ]
        if sets
        else []
    )
    found = sorted({f"{r.get('path') or ' '.join(r.get('argv') or [])} ({r.get('where')})" for r in runner})
    if runner:
        said.append(
            f"the script used DeepSpeed's OpenMPI runner's transport ({'; '.join(found[:2])}): "
            f"its mpirun line forces {', '.join(mpi.DEEPSPEED_OPENMPI_TRANSPORT)} and exports "
            f"every line of {mpi.DEEPSPEED_ENV_FILE} to the ranks (DeepSpeed 0.19.8 "
            "launcher/multinode_runner.py, launcher/runner.py): transport settings the AI "
            "Engineers own (the preset's mpi.mpirun_args and network.env)"
        )
    bad = [r for r in [*sets, *runner] if r.get("rank") is not None]
    return CheckResult(
        "transport-env",
        "fail",
        "; ".join(said),
        failed_ranks=tuple(sorted({int(r["rank"]) for r in bad})),
        details={"set": shown, "runner": found},
    )


def master_address_row(records: Sequence[Mapping[str, Any]], run: ScriptRun) -> CheckResult | None:
    """The master address chosen by `hostname -I` (DeepSpeed's mpi_discovery): a failing row
    where the preset attaches a second network (its first address need not be the pod
    network's), a note elsewhere; None where no rank chose it so."""
    chose = [r for r in records if r.get("event") == "master-address"]
    if not chose:
        return None
    how = sorted({f"{r.get('how')} ({r.get('where')})" for r in chose})
    ranks = ranks_text(int(r["rank"]) for r in chose if r.get("rank") is not None)
    said = (
        f"rank(s) {ranks} took MASTER_ADDR from `hostname -I` ({'; '.join(how[:2])}; DeepSpeed "
        "0.19.8 comm/comm.py mpi_discovery takes rank 0's first address) over the rendered one"
    )
    if not run.second_network:
        return CheckResult(
            "master-address", "note", f"{said}: one network here, so the pod's", details={"how": how}
        )
    return CheckResult(
        "master-address",
        "fail",
        f"{said}, and the preset attaches a second network: the first address need not be the "
        "pod network's; set RANK, WORLD_SIZE and LOCAL_RANK from OMPI_COMM_WORLD_* before "
        "deepspeed.init_distributed (with those and the rendered MASTER_ADDR and MASTER_PORT it "
        "skips mpi_discovery)",
        failed_ranks=tuple(sorted({int(r["rank"]) for r in chose if r.get("rank") is not None})),
        details={"how": how},
    )
