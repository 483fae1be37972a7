"""`launcher: mpi` downstream (issue 39 item 4): render, explain's origins of the MPIJob's own
fields, plan's ticket, diff against a committed render, validate --crd with mpi-operator's CRD."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run
from mpi_presets import PRESET, mpi_presets, mpi_profile

CRD = ROOT.parent / "shared" / "schemas" / "kubeflow.org_mpijobs.yaml"


@pytest.fixture
def profile(presets_dir: Path, _engineer_key: Path, tmp_path: Path) -> Path:
    mpi_presets(presets_dir, _engineer_key)
    return mpi_profile(tmp_path)


def test_explain_names_the_preset_for_the_mpijobs_own_fields(profile: Path) -> None:
    result = run("render", "--explain", str(profile))
    assert result.exit_code == 0, result.stderr
    lines = {line.split(":")[0].strip(): line for line in result.stdout.splitlines() if "#" in line}
    for field, origin in (
        ("slotsPerWorker", "gpus_per_pod"),
        ("sshAuthMountPath", "mpi.ssh_auth_mount_path"),
        ("launcherCreationPolicy", "mpi.launcher_creation_policy"),
        ("mpiImplementation", "mpi.implementation"),
    ):
        assert f"{PRESET}.yaml" in lines[field] and origin in lines[field], lines[field]
    assert "mpi.mpirun_args" in next(ln for ln in result.stdout.splitlines() if '- "--mca"' in ln)
    assert "mpi.worker_command[0]" in next(ln for ln in result.stdout.splitlines() if "/usr/sbin/sshd" in ln)


def test_plan_writes_its_ticket_for_an_mpijob(profile: Path) -> None:
    result = run("plan", str(profile))
    assert result.exit_code == 0, result.stderr
    assert "llm-7b-mpi" in result.stdout and "16" in result.stdout


def test_diff_against_a_committed_render_sees_a_changed_mpirun_flag(profile: Path, tmp_path: Path) -> None:
    rendered = run("render", str(profile))
    assert rendered.exit_code == 0, rendered.stderr
    committed = tmp_path / "committed"
    committed.mkdir()
    (committed / "llm-7b-mpi.yaml").write_text(rendered.stdout, encoding="utf-8")
    assert run("diff", str(profile), "--against", str(committed)).exit_code == 0
    docs = list(yaml.safe_load_all(rendered.stdout))
    job = next(d for d in docs if d and d["kind"] == "MPIJob")
    job["spec"]["slotsPerWorker"] = 4
    (committed / "llm-7b-mpi.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    changed = run("diff", str(profile), "--against", str(committed))
    assert changed.exit_code == 1, changed.stderr
    assert "slotsPerWorker" in changed.stdout


def test_validate_crd_checks_the_mpijob_against_mpi_operators_crd(profile: Path) -> None:
    result = run("validate", "--crd", str(CRD), str(profile))
    assert result.exit_code == 0, result.output
    # the plan's own kind is checked: training-operator's CRD serves no v2beta1 (it said ok)
    other = run("validate", "--crd", str(CRD.with_name("kubeflow.org_pytorchjobs.yaml")), str(profile))
    assert other.exit_code == 1, other.output
    assert "does not serve version 'v2beta1'" in other.output


def test_presets_policy_writes_checks_of_the_mpijob(profile: Path, presets_dir: Path, tmp_path: Path) -> None:
    """A preset allowing mpi gets a family of MPIJob checks (it was refused, exit 2: the gate
    was derived from PyTorchJob renders only); tests/outputs/admission/test_admission_mpi.py
    judges MPIJobs with it."""
    result = run("presets", "policy", "--out", str(tmp_path / "deploy"))
    assert result.exit_code == 0, result.output
    policy = next(yaml.safe_load_all((tmp_path / "deploy" / "policy.yaml").read_text(encoding="utf-8")))
    assert "mpijobs" in str(policy["spec"]["matchConstraints"]) and "mpiReplicaSpecs" in str(policy)
