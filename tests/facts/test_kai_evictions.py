"""Issue 25 item 4: KAI-Scheduler's evictions (one pod of an elastic job above its minimum, a
stale gang evicted whole after its grace period) in the operator model, per KAI version."""

from __future__ import annotations

import copy

import pytest

from conftest import example_job
from runai_spec.facts.kai import (
    KAI_VERSIONS,
    STALENESS_GRACE_DEFAULT_S,
    evicts_one,
    is_stale,
    min_member,
)
from runai_spec.facts.operator import JobModel, drive


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_the_pod_group_minimum_of_a_pytorchjob(version: str) -> None:
    fixed, elastic = example_job("multi-node"), example_job("elastic")
    assert min_member(fixed, version) == 2  # master + worker: every replica
    assert min_member(elastic, version) == elastic["spec"]["elasticPolicy"]["minReplicas"] == 2
    forced = copy.deepcopy(elastic)
    forced["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 3}
    assert min_member(forced, version) == 3  # schedulingPolicy.minAvailable wins


def test_an_unmodelled_kai_version_is_refused() -> None:
    with pytest.raises(ValueError, match="modelled are"):
        min_member(example_job("elastic"), "v0.1.0")


def test_one_pod_above_the_minimum_a_gang_below_it() -> None:
    assert evicts_one(3, 2) and not evicts_one(2, 2)
    assert is_stale(1, 2) and not is_stale(0, 2) and not is_stale(2, 2)
    assert STALENESS_GRACE_DEFAULT_S == 60.0  # options.go defaultStalenessGracePeriod


def test_an_evicted_elastic_pod_is_recreated_and_uses_no_restart() -> None:
    m = JobModel.of(example_job("elastic"))
    m.exited("worker-1", 1, 0.0)
    m.due(100.0)  # restarted in place: one restart counted
    assert m.restarts_used == 1
    actions = m.evicted("worker-1", 200.0)
    assert [(a.kind, a.pod) for a in actions] == [("delete", "worker-1"), ("recreate", "worker-1")]
    # a new pod object: the restart it had is no longer summed (PastBackoffLimit), none added
    assert m.restarts_used == 0 and m.phase == "Running"


def test_an_elastic_job_at_its_minimum_is_evicted_whole() -> None:
    job = copy.deepcopy(example_job("elastic"))
    job["spec"]["elasticPolicy"]["minReplicas"] = len(JobModel.of(job).pods)
    m = JobModel.of(job)
    assert [a.kind for a in m.evicted("worker-1", 0.0)][0] == "delete-all"


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_a_lost_pod_without_room_gets_its_gang_evicted_after_the_grace_period(scale: float) -> None:
    m = JobModel.of(example_job("multi-node"), backoff_scale=scale)
    grace = STALENESS_GRACE_DEFAULT_S * scale
    out = drive(m, [(10.0, "lose", "worker-0", 0), (10.0 + grace - 0.5, "tick", None, 0)])
    assert [a.kind for _, a in out] == ["delete"]  # still within the grace period
    out = drive(m, [(10.0 + grace, "tick", None, 0)])
    kinds = [a.kind for _, a in out]
    assert kinds[0] == "delete-all" and kinds.count("recreate") == 2
    assert m.restarts_used == 0 and m.phase == "Running" and m.stale_since is None


def test_an_elastic_gang_above_its_minimum_is_not_stale() -> None:
    m = JobModel.of(example_job("elastic"))
    m.lost("worker-3", 0.0)
    assert m.stale_since is None and m.next_due() is None
