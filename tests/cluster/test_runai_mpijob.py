"""submit --via runai of `launcher: mpi` (issue 39 item 4): Workloads V2 takes the rendered MPIJob
as it is (Run:ai's "Supported Workload Types" registers Kubeflow's MPIJob beside PyTorchJob)."""

from __future__ import annotations

from pathlib import Path

import yaml

import runai_schemas
from kube_helpers import run
from kubeapi import KubeAPI
from mpi_presets import mpi_presets, mpi_profile
from runaiapi import RunaiAPI

pytest_plugins = ("kube_fixtures", "runai_fixtures")
NAME, NS = "llm-7b-mpi", "runai-nlp-lab"


def test_submit_via_runai_sends_the_rendered_mpijob_unchanged(
    runai_site: RunaiAPI, presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    mpi_presets(presets_dir, _engineer_key)
    profile = str(mpi_profile(tmp_path))
    rendered = run("render", profile)
    assert rendered.exit_code == 0, rendered.stderr
    (job,) = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "MPIJob"]
    result = run("submit", profile)
    assert result.exit_code == 0, result.stderr
    assert runai_site.state.only()["rawManifest"] == job
    (post,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert runai_schemas.errors(runai_schemas.WORKLOAD_V2_CREATE, post.body) == []


def test_status_logs_and_delete_of_an_mpijob_submitted_through_runai(
    runai_site: RunaiAPI,
    api: KubeAPI,
    kubeconfig: Path,
    presets_dir: Path,
    _engineer_key: Path,
    tmp_path: Path,
) -> None:
    """status reads the workload's phase and pods from Run:ai (the launcher Job's pod by its
    generated name, the workers by index); logs read the pods through the Kubernetes client
    (Run:ai reports none), finding the MPIJob by its kind and its pods by mpi-operator's
    labels; delete removes the workload through the Workloads API."""
    mpi_presets(presets_dir, _engineer_key)
    profile = str(mpi_profile(tmp_path))
    assert run("submit", profile).exit_code == 0
    stored = runai_site.state.only()
    launcher = f"{NAME}-launcher-x7k2q"
    runai_site.state.pods[stored["metadata"]["id"]] = [
        {
            "name": launcher,
            "k8sPhase": "Running",
            "containers": [{"name": "pytorch", "startedAt": "2026-12-06T10:00:00Z"}],
        },
        {"name": f"{NAME}-worker-0", "k8sPhase": "Running", "containers": []},
    ]
    status = run("status", profile)
    assert status.exit_code == 0, status.stderr
    assert f"{launcher}  Launcher 0  Running  started 2026-12-06T10:00:00Z" in status.stdout, status.stdout
    assert f"{NAME}-worker-0  Worker 0  Running" in status.stdout
    # what Run:ai made of the workload in the cluster: the MPIJob as sent, its pods, their logs
    api.kube.mpi_installed = True
    api.kube.put("mpijobs", stored["rawManifest"])
    api.kube.add_mpi_pod(NAME, NS, "launcher", 0)
    api.kube.add_mpi_pod(NAME, NS, "worker", 0)
    api.kube.logs[(NS, launcher, False)] = "rank 0 step 1\n"
    api.kube.logs[(NS, f"{NAME}-worker-0", False)] = "sshd up\n"
    out = tmp_path / "logs"
    logs = run("logs", profile, "--out", str(out))
    assert logs.exit_code == 0, logs.output
    assert (out / f"{launcher}.log").read_text() == "rank 0 step 1\n"
    assert (out / f"{NAME}-worker-0.log").read_text() == "sshd up\n"
    deleted = run("delete", profile, "--yes", "--wait")
    assert deleted.exit_code == 0, deleted.stderr
    assert runai_site.state.workloads == {}
    assert f"deleted: runai workload nlp-lab/{NAME}" in deleted.stderr
