"""`presets policy`: the admission policy, binding and parameters from the CLI."""

from __future__ import annotations

from pathlib import Path

import yaml

from conftest import ROOT, run
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission


def test_presets_policy_prints_the_policy_binding_and_params() -> None:
    result = run("presets", "policy")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ConfigMap",
    ]
    assert docs == admission.policy_documents(PresetRegistry(ROOT / "presets"))


def test_presets_policy_out_writes_both_files(tmp_path: Path) -> None:
    result = run("presets", "policy", "-o", str(tmp_path / "policy"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "policy").iterdir()) == ["params.yaml", "policy.yaml"]
    assert f"wrote {tmp_path / 'policy' / 'policy.yaml'}" in result.stderr


def test_presets_policy_into_a_file_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    result = run("presets", "policy", "-o", str(tmp_path / "f"))
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert "not a folder" in result.stderr


def test_presets_policy_into_proc_is_bad_input_not_an_internal_error() -> None:
    result = run("presets", "policy", "-o", "/proc/self/x")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and "hint: " in result.stderr
