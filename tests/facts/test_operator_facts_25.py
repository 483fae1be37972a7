"""Issue 25 item 7, the smaller facts: the kubelet's back-off starts over after ten minutes of
running, an unset nprocPerNode is the operator's "auto", the operator's validation is told
apart from runai-spec's own layout rule, and the rehearsal models the site's operator."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, example_job, pytorch_container, run
from runai_spec import rehearse as rehearse_module
from runai_spec.facts.kubeflow import (
    DEFAULT_NPROC,
    MASTER,
    OPERATOR_VERSIONS,
    OWN_RULE,
    WORKER,
    injected_nproc,
    operator_env,
    operator_problems,
)
from runai_spec.facts.operator import BACKOFF_RESET_AFTER_S, JobModel
from runai_spec.load.registry import ApprovedSite, PresetRegistry
from runai_spec.rehearse.argv import plan_pods
from runai_spec.rehearse.spec import RehearsalSpec

# --- the kubelet's back-off (client-go util/flowcontrol/backoff.go hasExpired) ------------


def _model(scale: float = 1.0) -> JobModel:
    return JobModel.of(example_job("single-node"), backoff_scale=scale)


def _fail_and_restart(model: JobModel, at: float) -> float:
    """The container fails at AT; returns when the kubelet restarts it."""
    model.exited("master-0", 1, at)
    due = model.next_due()
    assert due is not None
    assert [a.kind for a in model.due(due)] == ["restart"]
    return due


def test_back_to_back_failures_double_the_back_off() -> None:
    m = _model()
    first = _fail_and_restart(m, 0.0)
    second = _fail_and_restart(m, first + 1.0)
    assert (first, second - (first + 1.0)) == (10.0, 20.0)


def test_a_container_that_ran_ten_minutes_starts_its_back_off_again() -> None:
    m = _model()
    first = _fail_and_restart(m, 0.0)
    _fail_and_restart(m, first + 1.0)  # 20 s
    later = first + 1.0 + 20.0 + BACKOFF_RESET_AFTER_S + 1.0  # ran > 600 s since the failure
    m.exited("master-0", 1, later)
    assert m.next_due() == later + 10.0
    assert any("starts again" in text for _, text in m.log)
    assert m.restarts_used == 2  # restartCount is not reset: backoffLimit still counts them


def test_the_reset_window_scales_with_the_back_off() -> None:
    m = _model(scale=0.1)
    _fail_and_restart(m, 0.0)
    m.exited("master-0", 1, 0.1 * BACKOFF_RESET_AFTER_S + 2.0)
    assert m.next_due() == pytest.approx(0.1 * BACKOFF_RESET_AFTER_S + 2.0 + 1.0)


# --- nprocPerNode defaulting (pytorch_defaults.go setDefaultNprocPerNode) ------------------


@pytest.mark.parametrize("version", OPERATOR_VERSIONS)
def test_an_unset_nproc_per_node_is_auto(version: str) -> None:
    job = copy.deepcopy(example_job("multi-node"))
    del job["spec"]["nprocPerNode"]
    assert injected_nproc(job, version) == DEFAULT_NPROC
    env = operator_env(job, MASTER, 0, version)
    assert env["PET_NPROC_PER_NODE"] == "auto"
    # getNprocPerNodeInt: "auto" counts 1 process per pod
    pods = 1 + job["spec"]["pytorchReplicaSpecs"][WORKER]["replicas"]
    assert env["WORLD_SIZE"] == str(pods)


@pytest.mark.parametrize("version", OPERATOR_VERSIONS)
def test_the_deprecated_elastic_nproc_keeps_nproc_per_node_unset(version: str) -> None:
    job = copy.deepcopy(example_job("elastic"))
    del job["spec"]["nprocPerNode"]
    job["spec"]["elasticPolicy"]["nProcPerNode"] = 4
    assert operator_env(job, WORKER, 0, version)["PET_NPROC_PER_NODE"] == "4"


# --- the operator's validation (pytorchjob_webhook.go, v1.7 pytorch_validation.go) ----------


def test_a_worker_only_job_is_runai_specs_rule_not_the_operators() -> None:
    job = copy.deepcopy(example_job("multi-node"))
    del job["spec"]["pytorchReplicaSpecs"][MASTER]
    [problem] = operator_problems(job)
    assert OWN_RULE in problem


def test_the_operator_s_own_rules_elastic_without_workers_and_a_container_without_image() -> None:
    job = copy.deepcopy(example_job("elastic"))
    job["spec"]["pytorchReplicaSpecs"][MASTER] = job["spec"]["pytorchReplicaSpecs"].pop(WORKER)
    job["spec"]["pytorchReplicaSpecs"][MASTER]["replicas"] = 1
    pytorch_container(job)["image"] = ""
    problems = operator_problems(job)
    assert [p.split(":")[0] for p in problems] == [
        f"spec.pytorchReplicaSpecs.{WORKER}",
        f"spec.pytorchReplicaSpecs.{MASTER}",
    ]
    assert not any(OWN_RULE in p for p in problems)


# --- the rehearsal models the site's operator -------------------------------------------


def _pod_env(tmp_path: Path, version: str) -> dict[str, str]:
    manifests = [example_job("elastic")]
    plans, _ = plan_pods(
        manifests, RehearsalSpec(procs_per_pod=1, operator_version=version), root=tmp_path / version
    )
    return dict(plans[0].env)


def test_on_a_1_7_site_the_rehearsed_elastic_pod_gets_no_pet_nproc_per_node(tmp_path: Path) -> None:
    assert "PET_NPROC_PER_NODE" not in _pod_env(tmp_path, "1.7")
    assert _pod_env(tmp_path, "1.9")["PET_NPROC_PER_NODE"] == "1"


@pytest.mark.parametrize(("field", "value"), [("operator_version", "1.7"), ("kai_version", "v0.9.9")])
def test_rehearse_passes_the_site_s_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: str
) -> None:
    """The rehearsal follows the training-operator and KAI releases site.yaml declares (issue 40
    item 5: the KAI release was not passed, the fault model used v0.17.0's)."""
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake(manifests: Any, spec: Any) -> Any:
        seen.update(vars(spec))
        raise Stop

    old = PresetRegistry.approved_site

    def approved_site(self: PresetRegistry) -> ApprovedSite:
        approved = old(self)
        return approved._replace(site=approved.site.model_copy(update={field: value}))

    monkeypatch.setattr(PresetRegistry, "approved_site", approved_site)
    monkeypatch.setattr(rehearse_module, "rehearse_manifests", fake)
    run("rehearse", str(ROOT / "examples" / "elastic" / "profile.yaml"), "--logs", str(tmp_path / "logs"))
    assert seen.get(field) == value
