"""`launcher: mpi` (issue 39 items 1, 2): an MPIJob kubeflow.org/v2beta1 that the published CRD
and mpi-operator v0.6.0's validation admit, whose launcher runs mpirun with the preset's flags
only; a site without mpi-operator (or with training-operator's MPIJob v1) refuses it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import run
from mpi_presets import MPI, mpi_presets, mpi_profile
from mpi_presets import mpijob_schema as _crd_schema
from runai_spec import render
from runai_spec.facts import mpi
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload


@pytest.fixture
def presets(presets_dir: Path, _engineer_key: Path) -> Path:
    return mpi_presets(presets_dir, _engineer_key)


def _job(presets: Path, folder: Path, **fields: Any) -> dict[str, Any]:
    plan = prepare_workload(mpi_profile(folder, **fields), PresetRegistry(presets)).plan
    (job,) = render.render_plan(plan)
    return job


def test_the_rendered_mpijob_validates_against_the_published_crd_and_the_operators_rules(
    presets: Path, tmp_path: Path
) -> None:
    job = _job(presets, tmp_path)
    errors = [e.message for e in jsonschema.Draft7Validator(_crd_schema()).iter_errors(job)]
    assert errors == []
    assert mpi.operator_problems(job) == []
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")


def test_the_operators_defaults_are_the_crds(presets: Path, tmp_path: Path) -> None:
    """facts/mpi.py's defaults and enums are the CRD's own (default.go writes the same), and
    the render writes every field the operator would default, so none is left to it."""
    spec = _crd_schema()["properties"]["spec"]["properties"]
    assert spec["launcherCreationPolicy"]["default"] == mpi.DEFAULT_LAUNCHER_CREATION_POLICY
    assert spec["mpiImplementation"]["default"] == mpi.DEFAULT_IMPLEMENTATION
    assert tuple(spec["mpiImplementation"]["enum"]) == mpi.IMPLEMENTATIONS
    assert spec["sshAuthMountPath"]["default"] == mpi.DEFAULT_SSH_AUTH_MOUNT_PATH
    assert spec["slotsPerWorker"]["default"] == mpi.DEFAULT_SLOTS_PER_WORKER
    assert set(spec["mpiReplicaSpecs"]["additionalProperties"]["properties"]) >= {"replicas", "restartPolicy"}
    written = _job(presets, tmp_path)["spec"]
    defaulted = {"slotsPerWorker", "sshAuthMountPath", "launcherCreationPolicy", "mpiImplementation"}
    assert set(written) >= defaulted
    assert "cleanPodPolicy" in written["runPolicy"]


def test_the_launcher_runs_mpirun_with_the_world_size_the_presets_flags_and_the_program(
    presets: Path, tmp_path: Path
) -> None:
    job = _job(presets, tmp_path)
    specs = job["spec"]["mpiReplicaSpecs"]
    assert (specs["Launcher"]["replicas"], specs["Worker"]["replicas"]) == (1, 1)  # 2 pods
    assert job["spec"]["slotsPerWorker"] == 8 and job["spec"]["runLauncherAsWorker"] is True
    assert job["spec"]["sshAuthMountPath"] == MPI["ssh_auth_mount_path"]
    assert job["spec"]["launcherCreationPolicy"] == MPI["launcher_creation_policy"]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 5  # the restart budget: the preset's
    (launcher,) = specs["Launcher"]["template"]["spec"]["containers"]
    (worker,) = specs["Worker"]["template"]["spec"]["containers"]
    approved = MPI["mpirun_args"]
    assert launcher["command"][:3] == ["mpirun", "-np", "16"]
    assert launcher["command"][3 : 3 + len(approved)] == approved
    forwarded = launcher["command"][3 + len(approved) : -7]
    assert forwarded == ["-x", "TOKENIZERS_PARALLELISM", "-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    assert launcher["command"][-7:] == [
        "python", "-u", "train.py", "--config", "configs/7b.yaml", "--checkpoint-dir", "/checkpoints"
    ]  # fmt: skip
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    assert env["MASTER_ADDR"] == "llm-7b-mpi-launcher" and env["MASTER_PORT"] == "23456"
    assert worker["command"] == MPI["worker_command"]
    # the same pod otherwise: GPUs, network, volumes
    for key in ("resources", "volumeMounts", "securityContext", "env"):
        assert launcher[key] == worker[key]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_the_hostfile_is_the_operators() -> None:
    """newConfigMap (v0.6.0 mpi_job_controller.go) for OpenMPI with the launcher as a worker."""
    assert mpi.hostfile("j", "ns", 2, 4, True) == (
        "j-launcher.j.ns.svc slots=4\nj-worker-0.j.ns.svc slots=4\nj-worker-1.j.ns.svc slots=4\n"
    )
    # v0.7.0 and later, run with --cluster-domain
    assert mpi.hostfile("j", "ns", 1, 2, True, "cluster.local").splitlines()[1] == (
        "j-worker-0.j.ns.svc.cluster.local slots=2"
    )
    assert dict(mpi.launcher_env(4, True))["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert "NVIDIA_VISIBLE_DEVICES" not in dict(mpi.launcher_env(4, True))
    assert dict(mpi.launcher_env(4, False))["NVIDIA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("operator", "reason"),
    [
        ("none", "the site runs no MPI operator"),
        ("training-operator-v1", "training-operator's MPIJob kubeflow.org/v1 under the same CRD name"),
    ],
)
def test_a_site_without_mpi_operator_v2beta1_refuses_launcher_mpi_with_the_reason(
    presets_dir: Path, _engineer_key: Path, tmp_path: Path, operator: str, reason: str
) -> None:
    mpi_presets(presets_dir, _engineer_key, operator=operator)
    result = run("validate", str(mpi_profile(tmp_path)))
    assert result.exit_code == 1, result.output
    assert reason in result.output and "mpi_operator" in result.output


def test_every_mpi_operator_release_modelled_renders_the_same_job(
    presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    jobs = []
    for version in mpi.OPERATOR_VERSIONS:
        copy = tmp_path / version / "presets"
        shutil.copytree(presets_dir, copy)
        job = _job(mpi_presets(copy, _engineer_key, operator=version), tmp_path / version)
        job["metadata"]["annotations"].pop("runai-spec/site-sha256")
        jobs.append(job)
    assert mpi.OPERATOR_VERSIONS == ("v0.6.0", "v0.7.0", "v0.8.0")
    assert all(job == jobs[0] for job in jobs)


def test_a_preset_that_does_not_allow_mpi_refuses_it(presets: Path, tmp_path: Path) -> None:
    result = run("validate", str(mpi_profile(tmp_path, preset="h200-2x8-ib")))
    assert result.exit_code == 1, result.output
    assert "does not allow launcher 'mpi'" in result.output


def test_mpirun_in_the_command_is_told_to_use_the_field(presets: Path, tmp_path: Path) -> None:
    command = ["mpirun", "-np", "16", "train.py"]
    result = run("validate", str(mpi_profile(tmp_path, command=command, launcher="torchrun")))
    assert result.exit_code == 1, result.output
    assert "launcher: mpi" in result.output


@pytest.mark.parametrize("flag", ["--mca", "-np", "--hostfile=/tmp/h", "--oversubscribe", "--bind-to"])
def test_mpiruns_flags_in_the_researchers_command_are_refused(
    presets: Path, tmp_path: Path, flag: str
) -> None:
    result = run("validate", str(mpi_profile(tmp_path, command=["train.py", flag, "x"])))
    assert result.exit_code == 1, result.output
    assert "is mpi's flag" in result.output


def test_a_scripts_own_short_flags_stay_its_own(presets: Path, tmp_path: Path) -> None:
    result = run("validate", str(mpi_profile(tmp_path, command=["train.py", "-n", "3", "-x", "y"])))
    assert "is mpi's flag" not in result.output


@pytest.mark.parametrize("name", ["OMPI_MCA_btl", "UCX_TLS", "I_MPI_FABRICS", "HYDRA_IFACE"])
def test_mpi_transport_variables_in_the_profile_are_the_engineers(
    presets: Path, tmp_path: Path, name: str
) -> None:
    result = run("validate", str(mpi_profile(tmp_path, env={name: "tcp"})))
    assert result.exit_code == 1, result.output
    assert f"{name} is an MPI transport setting" in result.output
    # from a Secret too: mpirun forwards the variable to every rank whichever way it is set
    secret = run("validate", str(mpi_profile(tmp_path, secret_env={name: {"secret": "s", "key": "k"}})))
    assert secret.exit_code == 1, secret.output
    assert f"secret_env.{name}" in secret.output and f"{name} is an MPI transport setting" in secret.output


def test_deepspeed_over_mpi_with_a_second_network_is_warned_of_mpi_discovery(
    presets: Path, tmp_path: Path
) -> None:
    """DESIGN 4.8: mpi_discovery's MASTER_ADDR is rank 0's first `hostname -I` address; the
    preset here attaches the InfiniBand rails (network.annotations)."""
    result = run("validate", str(mpi_profile(tmp_path, strategy="deepspeed")))
    assert "warning:" in result.output and "runs mpi_discovery" in result.output, result.output
    plain = run("validate", str(mpi_profile(tmp_path, strategy="fsdp")))
    assert "mpi_discovery" not in plain.output
