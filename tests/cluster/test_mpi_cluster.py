"""submit, status, logs and delete of `launcher: mpi` with --via kubernetes (issue 39 item 4):
the MPIJob kubeflow.org/v2beta1 found by its own kind (the plan's, or by NAME each kind the
cluster serves), its pods by mpi-operator v0.6.0's labels, its phase from its conditions as that
operator writes them (pkg/controller/mpi_job_controller.go, mpi_job_controller_status.go)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_helpers import run
from kubeapi import KubeAPI
from mpi_presets import mpi_presets, mpi_profile

pytest_plugins = ("kube_fixtures",)

NAME = "llm-7b-mpi"
NS = "runai-nlp-lab"
REF = f"mpijobs/{NS}/{NAME}"


@pytest.fixture
def profile(api: KubeAPI, kubeconfig: Path, presets_dir: Path, _engineer_key: Path, tmp_path: Path) -> str:
    """The MPI profile, on a cluster that serves mpi-operator's MPIJob beside the PyTorchJob."""
    api.kube.mpi_installed = True
    mpi_presets(presets_dir, _engineer_key)
    return str(mpi_profile(tmp_path))


def _conditions(*types: str) -> list[dict[str, Any]]:
    return [{"type": t, "status": "True", "reason": f"MPIJob{t}", "message": f"MPIJob {t}."} for t in types]


def _submitted(api: KubeAPI, profile: str) -> None:
    result = run("submit", profile)
    assert result.exit_code == 0, result.output
    assert f"created: {REF}" in result.stderr
    assert api.kube.count("mpijobs") == 1 and api.kube.count("pytorchjobs") == 0
    api.kube.add_mpi_pod(NAME, NS, "worker", 1)
    api.kube.add_mpi_pod(NAME, NS, "worker", 0, phase="Pending")
    api.kube.add_mpi_pod(NAME, NS, "launcher", 0)


def test_submit_applies_the_mpijob_and_submit_again_finds_it_unchanged(api: KubeAPI, profile: str) -> None:
    _submitted(api, profile)
    job = api.kube.get("mpijobs", NS, NAME)
    assert job is not None and job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    rendered = run("render", profile)
    (mine,) = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "MPIJob"]
    assert job["spec"] == mine["spec"]
    again = run("submit", profile)
    assert again.exit_code == 0 and f"unchanged: {REF}" in again.stderr, again.output


@pytest.mark.parametrize("how", ["profile", "name"])
def test_status_reads_the_mpijob_and_its_pods_by_mpi_operators_labels(
    api: KubeAPI, profile: str, how: str
) -> None:
    _submitted(api, profile)
    job = api.kube.get("mpijobs", NS, NAME)
    assert job is not None
    # mpi-operator v0.6.0 leaves Running True beside Succeeded (it never sets it False on
    # completion); the last True condition is Succeeded here, but order cannot be relied on
    job["status"] = {"conditions": _conditions("Created", "Succeeded", "Running")}
    args = [profile] if how == "profile" else [NAME, "--project", "nlp-lab"]
    before = len(api.kube.requests)
    result = run("status", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["phase"] == "Succeeded"
    assert [(p["name"], p["role"], p["index"]) for p in status["pods"]] == [
        (f"{NAME}-launcher-x7k2q", "launcher", 0),
        (f"{NAME}-worker-0", "worker", 0),
        (f"{NAME}-worker-1", "worker", 1),
    ]
    # by NAME: the PyTorchJob asked first (404), then the MPIJob; never a PyTorchJob guessed
    gets = [r.path for r in api.kube.requests[before:] if r.path.endswith(f"/{NAME}")]
    if how == "name":
        assert gets[0].endswith(f"/pytorchjobs/{NAME}") and gets[-1].endswith(f"/mpijobs/{NAME}")
    else:
        assert all("/pytorchjobs/" not in path for path in gets)


def test_status_of_an_evicted_worker_is_failed_and_a_pending_job_says_mpi_operator(
    api: KubeAPI, profile: str
) -> None:
    _submitted(api, profile)
    job = api.kube.get("mpijobs", NS, NAME)
    assert job is not None
    fresh = run("status", NAME, "-p", "nlp-lab")
    assert fresh.exit_code == 0, fresh.output
    assert f"{NAME} ({NS}): Pending" in fresh.stdout and "mpi-operator has not reported" in fresh.stdout
    job["status"] = {"conditions": _conditions("Created", "Running", "Failed")}
    job["status"]["conditions"][-1] |= {"reason": "MPIJobEvicted", "message": "1/2 workers are evicted"}
    failed = run("status", NAME, "-p", "nlp-lab")
    assert failed.exit_code == 0, failed.output
    assert f"{NAME} ({NS}): Failed" in failed.stdout and "1/2 workers are evicted" in failed.stdout


def test_logs_save_the_launchers_and_workers_logs(api: KubeAPI, profile: str, tmp_path: Path) -> None:
    _submitted(api, profile)
    api.kube.logs[(NS, f"{NAME}-launcher-x7k2q", False)] = "mpirun: rank 0 step 1\n"
    api.kube.logs[(NS, f"{NAME}-worker-1", False)] = "sshd up\n"
    for args in ([profile], [NAME, "-p", "nlp-lab"]):
        out = tmp_path / f"logs-{len(args)}"
        result = run("logs", *args, "--out", str(out))
        assert result.exit_code == 0, result.output
        assert (out / f"{NAME}-launcher-x7k2q.log").read_text() == "mpirun: rank 0 step 1\n"
        assert (out / f"{NAME}-worker-1.log").read_text() == "sshd up\n"
        assert f"skipped {NAME}-worker-0" in result.stderr
    printed = run("logs", NAME, "-p", "nlp-lab", "--out", "-", "--pod", f"{NAME}-launcher-x7k2q")
    assert printed.exit_code == 0, printed.output
    assert "mpirun: rank 0 step 1" in printed.stdout


@pytest.mark.parametrize("how", ["profile", "name"])
def test_delete_deletes_the_mpijob_and_nothing_else(api: KubeAPI, profile: str, how: str) -> None:
    _submitted(api, profile)
    args = [profile] if how == "profile" else [NAME, "--project", "nlp-lab"]
    result = run("delete", *args, "--yes")
    assert result.exit_code == 0, result.output
    assert f"deleted: {REF}" in result.stderr
    assert api.kube.count("mpijobs") == 0 and api.kube.count("pods") == 0
    assert [r.path for r in api.kube.sent("DELETE")] == [
        f"/apis/kubeflow.org/v2beta1/namespaces/{NS}/mpijobs/{NAME}"
    ]


def test_a_name_that_is_no_job_of_either_kind_is_not_found(api: KubeAPI, profile: str) -> None:
    result = run("status", "no-such-job", "-p", "nlp-lab")
    assert result.exit_code == 3, result.output
    assert f"error: cluster: pytorchjobs/{NS}/no-such-job: not found" in result.stderr


def test_by_name_on_a_cluster_without_the_training_operator_the_mpijob_is_found(
    api: KubeAPI, profile: str
) -> None:
    _submitted(api, profile)
    api.kube.crd_installed = False  # mpi-operator only: pytorchjobs is not served
    result = run("status", NAME, "-p", "nlp-lab")
    assert result.exit_code == 0, result.output
    assert f"{NAME} ({NS}): Pending" in result.stdout
    missing = run("status", "no-such-job", "-p", "nlp-lab")
    assert missing.exit_code == 3 and f"mpijobs/{NS}/no-such-job: not found" in missing.stderr, missing.output


def test_by_name_the_errors_name_the_mpijob_it_was_found_as(
    api: KubeAPI, profile: str, tmp_path: Path
) -> None:
    _submitted(api, profile)  # no pod has a log yet
    result = run("logs", NAME, "-p", "nlp-lab", "--out", str(tmp_path / "logs"))
    assert result.exit_code == 3, result.output
    assert f"error: cluster: {REF}: no pod had a log to save" in result.stderr


def test_submit_smoke_applies_the_preflight_configmap_and_the_smoke_mpijob(
    api: KubeAPI, profile: str
) -> None:
    """issue 39 item 3: the MPI smoke test goes to the cluster as the PyTorchJob's does."""
    result = run("submit", profile, "--smoke")
    assert result.exit_code == 0, result.output
    smoke = api.kube.get("mpijobs", NS, f"{NAME}-smoke")
    assert smoke is not None and smoke["kind"] == "MPIJob"
    assert api.kube.get("configmaps", NS, f"{NAME}-smoke-preflight") is not None
    assert api.kube.get("mpijobs", NS, NAME) is None  # the real job is not touched
