"""`presets verify --live`: the local ledger against the parameters the cluster enforces."""

from __future__ import annotations

from functools import lru_cache
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
    """The shipped presets' policy, bindings and parameters ConfigMap, applied (tests edit the
    ConfigMap's data)."""
    api.kube.store_policy(_documents())
    stored = api.kube.get("configmaps", admission.PARAMS_NAMESPACE, admission.PARAMS_NAME)
    assert stored is not None
    data: dict[str, str] = stored["data"]
    return data


@lru_cache(maxsize=1)
def _documents() -> list[dict[str, Any]]:
    return admission.policy_documents(PresetRegistry(ROOT / "presets"))


POLICY = f"validatingadmissionpolicies/{admission.POLICY_NAME}"


def verify_live(*extra: str) -> tuple[int, list[str], str]:
    result = run("presets", "verify", "--live", *extra)
    return result.exit_code, error_lines(result.stderr), result.stdout


def live_lines(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ": live: " in ln]


def test_a_cluster_that_enforces_the_ledger_matches(deployed: dict[str, str]) -> None:
    code, lines, stdout = verify_live()
    assert code == 0, lines
    assert f"ok: live: the policy, its bindings and {WHERE} match the approved presets" in stdout
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
    assert "kubectl apply --server-side -f DIR/params.yaml" in lines[-1]


def test_deployed_but_different_is_a_finding_naming_the_fields(deployed: dict[str, str]) -> None:
    deployed["h200-8gpu.sha256"] = "0" * 64
    deployed["h200-8gpu.shape-sha256"] = "1" * 64  # the shape another policy enforces
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    generations, line = live_lines(lines)
    assert line.endswith(
        f"h200-8gpu.yaml: live: deployed but different: sha256, shape-sha256 ({WHERE} holds other values)"
    )
    assert "h200-8gpu.yaml: live: the deployed policy and parameters are of two generations" in generations


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
    checks, line = live_lines(lines)
    assert f"{presets_dir / 'h200-2x8-ib.yaml'}: live: deployed but different:" in line
    assert "shape-sha256" in line and "sha256" in line and "approved-by" in line
    assert checks.endswith(
        "h200-2x8-ib.yaml: live: the deployed policy has other checks for it than the approved "
        "presets here give (the cluster denies its jobs until policy.yaml and params.yaml of one "
        "generation are applied)"
    )


def test_no_parameters_on_the_cluster_means_nothing_is_deployed(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    assert f"error: cluster: {WHERE}: not deployed (no admission parameters on the cluster)" in lines
    assert (
        f"error: cluster: {POLICY}: not deployed: the cluster enforces no preset (PyTorchJobs of any "
        "shape are admitted)"
    ) in lines
    live = live_lines(lines)
    assert len(live) == len(PresetRegistry(ROOT / "presets").names())
    assert all(ln.endswith("no policy enforces presets)") for ln in live), live


# -- issue 41 item 7: what the cluster enforces, said truly in each state -------------------
def test_parameters_only_say_that_nothing_is_enforced(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    api.kube.put("configmaps", _documents()[-1])
    code, lines, stdout = verify_live()
    assert code == EXIT_FINDINGS and "ok: live" not in stdout
    assert lines[0] == (
        f"error: cluster: {POLICY}: not deployed: the cluster enforces no preset (PyTorchJobs of "
        "any shape are admitted)"
    )
    assert live_lines(lines) == []  # the parameters themselves match


def test_a_policy_without_parameters_denies_everything(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    api.kube.store_policy(_documents()[:-1])
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    assert (
        f"error: cluster: {WHERE}: not deployed: the binding denies every PyTorchJob in the project "
        "namespaces (no parameters)"
    ) in lines
    assert all(ln.endswith("the cluster denies its jobs)") for ln in live_lines(lines))


def test_a_policy_without_its_binding_judges_nothing(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    api.kube.store_policy(
        [
            d
            for d in _documents()
            if d["metadata"]["name"] != admission.POLICY_NAME
            or d["kind"] != "ValidatingAdmissionPolicyBinding"
        ]
    )
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    assert (
        f"error: cluster: validatingadmissionpolicybindings/{admission.POLICY_NAME}: not deployed: "
        "the policy judges nothing (PyTorchJobs of any shape are admitted)"
    ) in lines


def test_a_policy_and_parameters_of_two_generations_are_named(deployed: dict[str, str]) -> None:
    deployed["h200-8gpu.shape-sha256"] = "1" * 64  # parameters of another generation
    code, lines, _ = verify_live()
    assert code == EXIT_FINDINGS
    live = live_lines(lines)
    assert any(
        ln.endswith(
            "h200-8gpu.yaml: live: the deployed policy and parameters are of two "
            "generations (the cluster denies its jobs)"
        )
        for ln in live
    ), live


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
