"""The shipped presets survive the faults of issue 11's "Must hold" (DESIGN §4): each example is
rendered from its profile with presets/ exactly as `rehearse` renders it (no edited manifest),
run on CPU (gloo) under the kubelet/operator model with the kubelet's back-off at 0.1, and the
fault row must say which pods came back, the restarts used against the preset's backoffLimit,
that the job recovered, and that every rank resumed the saved step with the saved weights.
The numbers measured are in docs/fault-experiments/RESULTS.md ("Shipped presets")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch
from runai_spec.facts.operator import BACKOFF_BASE_S
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse import CheckResult, RehearseResult, preflight_settings, rehearse_manifests
from runai_spec.rehearse.runner import _resumes, final_round
from runai_spec.rehearse.spec import RehearsalSpec

SCALE = 0.1  # the kubelet's back-off (facts.operator, BACKOFF_BASE_S doubling) at a tenth
FIRST_BACKOFF_S = BACKOFF_BASE_S * SCALE
# rank 0 busy after the first checkpoint: past the first back-off and the restarted agent's
# start (about 2 s here), so the restarted worker meets a master that has not yet noticed
BUSY_S = 6.0
TIMEOUT_S = 240.0


def rehearse_shipped(
    tmp_path: Path,
    example: str,
    procs: int,
    *,
    kill: str | None = None,
    preempt: bool = False,
    busy_s: float = 0.0,
) -> tuple[RehearseResult, CheckResult, Mapping[str, Any]]:
    """`rehearse examples/<example>/profile.yaml --procs-per-pod <procs> --backoff-scale 0.1`
    with the fault: (result, its one fault row, the rendered job)."""
    needs_torch()
    workload = prepare_workload(ROOT / "examples" / example / "profile.yaml")
    assert not [f for f in workload.findings if f.severity == "error"], workload.findings
    settings = replace(preflight_settings(workload), busy_rank0_s=busy_s)
    r = rehearse_manifests(
        list(workload.manifests),
        RehearsalSpec(
            settings=settings,
            procs_per_pod=procs,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=TIMEOUT_S,
            kills=[f"{kill}@checkpoint"] if kill else (),
            preempt="checkpoint" if preempt else None,
            backoff_scale=SCALE,
        ),
    )
    faults = [c for c in r.checks if c.check == "fault"]
    assert len(faults) == 1, [(c.check, c.status, c.message) for c in r.checks]
    job = next(m for m in workload.manifests if m.get("kind") == "PyTorchJob")
    fault = faults[0]
    print(
        f"{example} {kill or 'preempt'}: {fault.status}, restarts "
        f"{fault.details['restarts_used']}/{fault.details['backoff_limit']}, recovered "
        f"{fault.details['ended_at_s'] - fault.details['fault_at_s']:.1f} s after the fault"
    )
    return r, fault, job


def assert_recovered(
    r: RehearseResult,
    fault: CheckResult,
    job: Mapping[str, Any],
    *,
    restarted: Sequence[str],
    recreated: Sequence[str] = (),
    elastic: bool = False,
) -> None:
    """Recovered within the preset's backoffLimit, only these pods restarted in place (or
    recreated), and every rank of the job as it ended resumed the saved step and weights.
    Elastic: a pod that lost the store may need a second start before a round admits it, and
    the last round may hold minReplicas to all pods (torchrun's elastic rendezvous)."""
    rows = [(c.check, c.status, c.message) for c in r.checks]
    assert fault.status == "pass" and r.ok, rows
    d = fault.details
    assert d["phase"] == "Succeeded" and "recovered (the job succeeded" in fault.message, rows
    assert d["restarted"] == sorted(restarted) and d["recreated"] == sorted(recreated), d
    limit = job["spec"]["runPolicy"]["backoffLimit"]
    assert d["backoff_limit"] == limit and len(restarted) <= d["restarts_used"] < limit, d
    if not elastic:
        assert d["restarts_used"] == len(restarted), d
    # the weights too: _resumes compares each resumed rank's digest with the saved one
    final = len(d["resumed_ranks"])
    low = job["spec"]["elasticPolicy"]["minReplicas"] if elastic else r.world_size
    assert d["resumed_ranks"] == list(range(final)) and low <= final <= r.world_size, fault.message
    assert "resumed other weights" not in fault.message and "older step" not in fault.message
    resume = r.check("resume")
    assert resume is not None and resume.status == "pass", rows
    assert resume.details["resumed_from"] == d["saved_step"] > 0
    assert resume.ranks == tuple(range(final)), rows


# --- multi-node (h200-2x8-ib: Master + 1 Worker, c10d at $(MASTER_ADDR), backoffLimit 5)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.faults
def test_multi_node_worker_0_killed_while_rank_0_is_busy_recovers(tmp_path: Path) -> None:
    # the case that broke the old render (RESULTS.md S-kill-w0-busy): one process per pod, so
    # that no idle rank on master-0 notices the lost worker at once; rank 0 sleeps BUSY_S after
    # the first checkpoint, longer than the first back-off, while worker-0 is restarted
    assert BUSY_S > FIRST_BACKOFF_S
    r, fault, job = rehearse_shipped(tmp_path, "multi-node", 1, kill="worker-0", busy_s=BUSY_S)
    assert_recovered(r, fault, job, restarted=["worker-0"])
    # master-0's container was not restarted: its torchrun re-rendezvoused with the new
    # worker in place, after rank 0 woke up and met the closed connections
    assert [(o.name, o.attempt) for o in r.pods if o.name == "master-0"] == [("master-0", 0)]
    log = (tmp_path / "master-0" / "pod.log").read_text()
    assert log.index('"event": "busy"') < log.index('"check": "training", "status": "fail"')


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_multi_node_worker_0_killed_recovers_with_one_restart(tmp_path: Path) -> None:
    r, fault, job = rehearse_shipped(tmp_path, "multi-node", 2, kill="worker-0")
    assert_recovered(r, fault, job, restarted=["worker-0"])


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_multi_node_master_0_killed_restarts_every_pod_once(tmp_path: Path) -> None:
    # master-0 hosts the c10d store: worker-0's agent loses it and exits, 1 restart per pod
    r, fault, job = rehearse_shipped(tmp_path, "multi-node", 2, kill="master-0")
    assert_recovered(r, fault, job, restarted=["master-0", "worker-0"])


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_multi_node_preemption_recreates_every_pod_and_uses_no_restart(tmp_path: Path) -> None:
    r, fault, job = rehearse_shipped(tmp_path, "multi-node", 2, preempt=True)
    assert_recovered(r, fault, job, restarted=[], recreated=["master-0", "worker-0"])
    assert set(fault.details["deleted"]) == {"master-0", "worker-0"}


# --- elastic (h200-elastic-2to4x8-ib: 4 Workers, c10d store on worker-0, backoffLimit 9)


# long (issue 29): CI keeps the elastic example's fault run in test_rehearse_evict (worker-3
# evicted at the first checkpoint, every rank resumes) and this file's kill of the
# multi-node example with rank 0 busy; this one (37 s of CPU) once failed under 3 workers
# and a load of 9, resuming from step 4 where the fault came at step 2
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.faults
def test_elastic_worker_0_killed_restarts_every_pod_once(tmp_path: Path) -> None:
    # worker-0 hosts the c10d store: every other agent loses it and exits, 1 restart per pod
    r, fault, job = rehearse_shipped(tmp_path, "elastic", 1, kill="worker-0")
    assert_recovered(r, fault, job, restarted=["worker-0", "worker-1", "worker-2", "worker-3"], elastic=True)


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_elastic_another_worker_killed_restarts_only_that_pod(tmp_path: Path) -> None:
    # the survivors re-rendezvous in place; the new round renumbers the nodes (worker-3 and
    # the restarted worker-2 may swap ranks), which the final-round checks must follow
    r, fault, job = rehearse_shipped(tmp_path, "elastic", 1, kill="worker-2")
    assert_recovered(r, fault, job, restarted=["worker-2"], elastic=True)


# --- the rehearsal's own bookkeeping, without torch


def _rec(
    pod: str, start: tuple[int, int], rank: int, check: str, status: str = "pass", **more: Any
) -> dict[str, Any]:
    return {"check": check, "status": status, "rank": rank, "_pod": pod, "_start": start, **more}


def test_the_final_round_is_each_pods_last_start_even_where_ranks_were_renumbered() -> None:
    # elastic, worker-2 killed (as measured): in the round the kill cut short worker-3 held
    # rank 3; in the new round it is rank 2 and the restarted worker-2 is rank 3. In the
    # runner's order (the killed container's records first, then each pod's current one)
    # worker-3's old rank-3 records come last: by rank they would pass for rank 3's final
    # round and hide the restarted worker-2's
    lines = [
        _rec("worker-2", (0, 0), 2, "ranks"),
        _rec("worker-2", (1, 0), 3, "ranks"),
        _rec("worker-2", (1, 0), 3, "shutdown"),
        _rec("worker-3", (0, 0), 3, "ranks"),
        _rec("worker-3", (0, 0), 3, "training", "fail"),
        _rec("worker-3", (0, 1), 2, "ranks"),
        _rec("worker-3", (0, 1), 2, "shutdown"),
    ]
    final = final_round(lines)
    assert [(r["_pod"], r["rank"], r["check"]) for r in final] == [
        ("worker-2", 3, "ranks"),
        ("worker-2", 3, "shutdown"),
        ("worker-3", 2, "ranks"),
        ("worker-3", 2, "shutdown"),
    ]


def test_a_resume_of_other_weights_fails_where_the_checkpoint_format_was_skipped() -> None:
    # DCP without numpy: the checkpoint row skips, but a torch.save copy of the step was
    # written and reloaded with its digest; a rank that resumed other weights is wrong
    saved = _rec("master-0", (0, 0), 0, "checkpoint", "skip", saved_step=2, digest="aaaa", untested=True)
    good = _rec("master-0", (0, 1), 0, "resume", resumed_from=2, digest="aaaa")
    bad = _rec("worker-0", (1, 0), 1, "resume", resumed_from=2, digest="bbbb")
    resumed, wrong = _resumes([saved, good, bad], 2)
    assert resumed == {0}
    assert wrong == ["rank(s) 1 resumed other weights than those saved"]
