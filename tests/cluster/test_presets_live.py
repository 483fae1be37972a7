"""`presets verify --live`: the local ledger against the parameters the cluster enforces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kube_helpers import Sleeps, error_lines, run
from kubeapi import KubeAPI
from runai_spec.errors import EXIT_CLUSTER, EXIT_FINDINGS
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission

pytest_plugins = ("kube_fixtures",)
WHERE = f"configmap {admission.PARAMS_NAMESPACE}/{admission.PARAMS_NAME}"


@pytest.fixture
def deployed(api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps) -> dict[str, str]:
    """The cluster's parameters ConfigMap: the shipped presets' (tests edit its data)."""
    params = admission.policy_documents(PresetRegistry(ROOT / "presets"))[-1]
    stored: dict[str, Any] = api.kube.put("configmaps", params)
    data: dict[str, str] = stored["data"]
    return data


def verify_live(*extra: str) -> tuple[int, list[str], str]:
    result = run("presets", "verify", "--live", *extra)
    return result.exit_code, error_lines(result.stderr), result.stdout


def live_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ": live: " in ln]


def test_a_cluster_that_enforces_the_ledger_matches(deployed: dict[str, str]) -> None:
    code, lines, stdout = verify_live()
    assert code == 0, lines
    assert f"ok: live: {WHERE} matches the approved presets" in stdout
    assert live_lines(lines) == []


def test_approved_here_but_not_deployed_is_a_finding(deployed: dict[str, str]) -> None:
    for key in [k for k in deployed if k.startswith("h200-8gpu.")]:
        del deployed[key]
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    assert live_lines(lines) == [
        f"error: {ROOT / 'presets' / 'h200-8gpu.yaml'}: live: approved here but not yet deployed "
        f"by the AI Engineers ({WHERE} has no h200-8gpu; the cluster denies its jobs)"
    ]
    assert lines[-1].startswith("hint: ") and "presets policy" in lines[-1]


def test_deployed_but_different_is_a_finding_naming_the_fields(deployed: dict[str, str]) -> None:
    deployed["h200-8gpu.sha256"] = "0" * 64
    deployed["h200-8gpu.shape-sha256"] = "1" * 64  # the shape another policy enforces
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    (line,) = live_lines(lines)
    assert line.endswith(
        f"h200-8gpu.yaml: live: deployed but different: sha256, shape-sha256 ({WHERE} holds other values)"
    )


def test_deployed_but_missing_here_is_a_finding(deployed: dict[str, str]) -> None:
    deployed.update({"h200-64gpu.sha256": "1" * 64, "h200-64gpu.projects": "*"})
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    (line,) = live_lines(lines)
    assert "h200-64gpu.yaml: live: deployed on the cluster" in line and "not approved here" in line


def test_a_forged_local_approval_differs_from_what_the_cluster_enforces(
    presets_dir: Path, deployed: dict[str, str], engineer_key: Path
) -> None:
    preset = presets_dir / "h200-2x8-ib.yaml"
    preset.write_text(preset.read_text().replace('cpu: "96"', 'cpu: "64"'), encoding="utf-8")
    # their own key, listed in their checkout's allowed_signers: a forged approval
    PresetRegistry(presets_dir).approve("h200-2x8-ib", engineer_key, expires="2027-12-31")
    code, lines, _ = verify_live("--dir", str(presets_dir))
    assert code == EXIT_FINDINGS
    (line,) = live_lines(lines)
    assert f"{presets_dir / 'h200-2x8-ib.yaml'}: live: deployed but different:" in line
    assert "shape-sha256" in line and "sha256" in line and "approved-by" in line


def test_no_parameters_on_the_cluster_means_nothing_is_deployed(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    assert f"error: cluster: {WHERE}: not deployed (no admission parameters on the cluster)" in lines
    assert len(live_lines(lines)) == len(PresetRegistry(ROOT / "presets").names())


def test_forbidden_is_one_warning_not_a_finding(api: KubeAPI, deployed: dict[str, str]) -> None:
    api.kube.forbidden.add(("get", "configmaps"))
    code, lines, _ = verify_live()
    assert code == 0, lines
    warnings = [ln for ln in lines if ln.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: cluster: {WHERE}: not checked: forbidden ("
    )
    assert not [ln for ln in lines if ln.startswith("error: ")]


def test_unreachable_exits_3(unreachable: tuple[Path, str], cli_sleeps: Sleeps) -> None:
    config, token = unreachable
    code, lines, _ = verify_live("--kubeconfig", str(config))
    assert code == EXIT_CLUSTER
    assert lines[0].startswith("error: cluster: ") and all(token not in ln for ln in lines)


def test_kubeconfig_and_context_options_pick_the_cluster(
    api: KubeAPI, deployed: dict[str, str], tmp_path: Path
) -> None:
    config = api.kubeconfig(tmp_path / "other-kubeconfig", context="gpu-cluster")
    for key in [k for k in deployed if k.startswith("h200-1gpu.")]:
        del deployed[key]
    code, lines, _ = verify_live("--kubeconfig", str(config), "--context", "gpu-cluster")
    assert code == EXIT_FINDINGS and "h200-1gpu.yaml: live: approved here" in "".join(lines)
    code, lines, _ = verify_live("--kubeconfig", str(config), "--context", "nope")
    assert code != 0 and lines[0].startswith("error: ")


def test_compare_deployed_names_each_kind_of_difference() -> None:
    local = {"a.sha256": "1", "a.cpu": "8", "b.sha256": "2", "c.expired": "2026-01-01", "e.sha256": "5"}
    cluster = {"a.sha256": "1", "a.cpu": "16", "c.sha256": "3", "d.sha256": "4", "e.sha256": "5"}
    assert admission.compare_deployed(local, cluster) == [
        admission.Deployment("a", "different", ("cpu",)),
        admission.Deployment("b", "not deployed"),
        admission.Deployment("c", "expired here", ("2026-01-01",)),
        admission.Deployment("d", "not approved here"),
    ]
