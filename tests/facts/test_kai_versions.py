"""KAI-Scheduler by version (issue 40 item 5): the site declares its KAI release; which Topology
object it reads, whether it honours the job's staleness grace period and the eviction model
follow it, with a test per version; one scheduling pass may evict k >= 1 pods of a job."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from conftest import ROOT, example_job
from kubeapi import KubeAPI
from runai_spec.cluster import Target
from runai_spec.cluster.checks import live_findings
from runai_spec.cluster.session import session_for
from runai_spec.facts.kai import (
    KAI_VERSION,
    KAI_VERSIONS,
    STALENESS_ANNOTATION,
    STALENESS_GRACE_DEFAULT_S,
    evicted_in_pass,
    honours_staleness_annotation,
    staleness_grace_s,
    topology_api,
)
from runai_spec.facts.operator import JobModel
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse.runner import job_model
from runai_spec.rehearse.spec import RehearsalSpec

pytest_plugins = ("kube_fixtures",)
MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"
TOPOLOGY = PresetRegistry().site().topology.name  # type: ignore[union-attr]

# per version: (Topology group, staleness annotation honoured)
EXPECTED = {
    "v0.9.9": ("kueue.x-k8s.io", False),
    "v0.12.0": ("kai.scheduler", False),
    "v0.17.0": ("kai.scheduler", True),
}


def test_every_modelled_version_has_its_expectation() -> None:
    assert set(EXPECTED) == set(KAI_VERSIONS) and KAI_VERSION == KAI_VERSIONS[-1] == "v0.17.0"
    assert PresetRegistry().site().kai_version == KAI_VERSION  # a site that declares none


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_the_topology_object_per_version(version: str) -> None:
    assert topology_api(version) == (EXPECTED[version][0], "v1alpha1", "topologies")


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_the_staleness_annotation_per_version(version: str) -> None:
    job = copy.deepcopy(example_job("multi-node"))
    job["metadata"].setdefault("annotations", {})[STALENESS_ANNOTATION] = "2m"
    honoured = EXPECTED[version][1]
    assert honours_staleness_annotation(version) is honoured
    assert staleness_grace_s(job, version) == (120.0 if honoured else STALENESS_GRACE_DEFAULT_S)
    model = JobModel.of(job, kai_version=version)
    assert model.stale_grace_s == (120.0 if honoured else STALENESS_GRACE_DEFAULT_S)


def test_an_unmodelled_kai_version_is_refused() -> None:
    with pytest.raises(ValueError, match="modelled are"):
        topology_api("v0.10.0")


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_one_pass_may_evict_several_pods_down_to_the_minimum(version: str) -> None:
    job = example_job("elastic")  # 4 pods, minReplicas 2
    assert evicted_in_pass(4, 2, 1) == 1 and evicted_in_pass(4, 2, 2) == 2
    assert evicted_in_pass(4, 2, 3) == 4  # below the minimum: the gang goes whole
    model = JobModel.of(job, kai_version=version)
    names = [n for n in model.pods][-2:]
    actions = model.evicted(names, 0.0)
    assert sorted(str(a.pod) for a in actions if a.kind == "delete") == sorted(names)
    assert [a.kind for a in actions].count("recreate") == 2 and model.phase == "Running"
    assert model.restarts_used == 0
    whole = JobModel.of(job, kai_version=version).evicted(list(model.pods)[1:], 0.0)
    assert whole[0].kind == "delete-all"


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_the_live_topology_check_reads_the_object_of_the_site_s_version(
    version: str, api: KubeAPI, target: Target
) -> None:
    """A v0.9.9 site's Topology is Kueue's: the check found none at kai.scheduler and said
    'does not exist' on a cluster that has it."""
    workload = prepare_workload(Path(MULTI))
    workload = workload._replace(site=workload.site.model_copy(update={"kai_version": version}))
    kai_path = f"/apis/kai.scheduler/v1alpha1/topologies/{TOPOLOGY}"
    seeded = api.kube.site_objects.pop(kai_path)
    group = EXPECTED[version][0]
    api.kube.site_objects[f"/apis/{group}/v1alpha1/topologies/{TOPOLOGY}"] = seeded
    with session_for(target) as session:
        found = [f for f in live_findings(session, workload) if f.rule == "live-topology"]
    assert found == []
    del api.kube.site_objects[f"/apis/{group}/v1alpha1/topologies/{TOPOLOGY}"]
    with session_for(target) as session:
        [missing] = [f for f in live_findings(session, workload) if f.rule == "live-topology"]
    assert f"topologies.{group}, what KAI {version} reads" in missing.message


@pytest.mark.parametrize("version", KAI_VERSIONS)
def test_the_fault_rehearsal_follows_the_site_s_kai_version(version: str) -> None:
    """The rehearsal's eviction model used KAI v0.17.0's rules whatever the site declared."""
    job = copy.deepcopy(example_job("elastic"))
    job["metadata"].setdefault("annotations", {})[STALENESS_ANNOTATION] = "2m"
    model = job_model(job, RehearsalSpec(procs_per_pod=1, kai_version=version))
    assert model.stale_grace_s == (120.0 if EXPECTED[version][1] else STALENESS_GRACE_DEFAULT_S)
