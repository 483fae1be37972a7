"""`validate --live` and `submit`'s live site checks against the fake API server (issue 13)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from kube_helpers import run
from kubeapi import KubeAPI, seed_site

pytest_plugins = ("kube_fixtures",)
EXAMPLES = ["single-gpu", "single-node", "multi-node", "elastic"]
MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"
PVC = "/api/v1/namespaces/runai-nlp-lab/persistentvolumeclaims/nlp-lab-checkpoints"


@pytest.fixture
def site(api: KubeAPI, kubeconfig: Path, cli_sleeps: Any) -> KubeAPI:
    seed_site(api.kube)
    return api


def live(*profiles: Path | str) -> tuple[int, list[dict[str, Any]]]:
    result = run("validate", "--live", "--format", "json", *map(str, profiles))
    data = json.loads(result.stdout)
    findings = [f for p in data["profiles"] for f in p["findings"]] if "profiles" in data else data
    return result.exit_code, findings


def live_rules(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if str(f.get("rule", "")).startswith("live-")]


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_examples_pass_against_a_cluster_matching_the_site(site: KubeAPI, example: str) -> None:
    result = run("validate", "--live", str(ROOT / "examples" / example / "profile.yaml"))
    assert "[live-" not in result.output, result.output
    assert result.exit_code == 0, result.output
    assert not site.kube.writes()


def _profile(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load(MULTI.read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    change(data)
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _expect_one(site: KubeAPI, profile: Path, rule: str, obj: str) -> None:
    result = run("validate", "--live", str(profile))
    lines = [x for x in result.output.splitlines() if "[live-" in x]
    assert len(lines) == 1 and f"[{rule}]" in lines[0] and obj in lines[0], result.output
    assert result.exit_code == 1
    submitted = run("submit", str(profile))
    lines = [x for x in submitted.output.splitlines() if "[live-" in x]
    assert len(lines) == 1 and obj in lines[0], submitted.output
    assert submitted.exit_code == 1
    assert not site.kube.writes()


def test_rwo_pvc_on_two_pods(site: KubeAPI) -> None:
    site.kube.site_objects[PVC]["spec"]["accessModes"] = ["ReadWriteOnce"]
    _expect_one(site, MULTI, "live-pvc", "persistentvolumeclaim/nlp-lab-checkpoints")


def test_missing_pvc_and_unbound_pvc(site: KubeAPI) -> None:
    site.kube.site_objects[PVC]["status"]["phase"] = "Pending"
    _expect_one(site, MULTI, "live-pvc", "nlp-lab-checkpoints")
    del site.kube.site_objects[PVC]
    _expect_one(site, MULTI, "live-pvc", "nlp-lab-checkpoints")


def test_secret_key_missing_and_present(site: KubeAPI, tmp_path: Path) -> None:
    profile = _profile(
        tmp_path, lambda d: d.update(secret_env={"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}})
    )
    _expect_one(site, profile, "live-secret", "secret/wandb")
    site.kube.site_objects["/api/v1/namespaces/runai-nlp-lab/secrets/wandb"] = {
        "metadata": {"name": "wandb"},
        "data": {"other": "eA=="},
    }
    _expect_one(site, profile, "live-secret", "secret/wandb")
    site.kube.site_objects["/api/v1/namespaces/runai-nlp-lab/secrets/wandb"]["data"]["api-key"] = "eA=="
    code, findings = live(profile)
    assert code == 0 and not live_rules(findings)


def test_unknown_pool(site: KubeAPI) -> None:
    for obj in site.kube.site_objects.values():
        obj.get("metadata", {}).get("labels", {}).pop("runai/node-pool", None)
    _expect_one(site, MULTI, "live-node-pool", "nodepool/h200-ib")


def test_wrong_gpu_model(site: KubeAPI) -> None:
    for path, obj in site.kube.site_objects.items():
        if path.startswith("/api/v1/nodes/"):
            obj["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    _expect_one(site, MULTI, "live-node-pool", "nodepool/h200-ib")


def test_too_large_for_any_node(site: KubeAPI) -> None:
    for path, obj in site.kube.site_objects.items():
        if path.startswith("/api/v1/nodes/"):
            obj["status"]["allocatable"]["memory"] = "64Gi"
    _expect_one(site, MULTI, "live-node-fit", "nodepool/h200-ib")


def test_missing_nad(site: KubeAPI) -> None:
    del site.kube.site_objects[
        "/apis/k8s.cni.cncf.io/v1/namespaces/runai-ib/network-attachment-definitions/ib-sriov-rail3"
    ]
    _expect_one(site, MULTI, "live-network", "network-attachment-definition/runai-ib/ib-sriov-rail3")


def test_namespace_not_the_projects(site: KubeAPI) -> None:
    site.kube.site_objects["/api/v1/namespaces/runai-nlp-lab"]["metadata"]["labels"] = {}
    _expect_one(site, MULTI, "live-namespace", "namespace/runai-nlp-lab")


def test_queue_missing_and_over_quota(site: KubeAPI) -> None:
    queue = "/apis/scheduling.run.ai/v2/queues/nlp-lab"
    site.kube.site_objects[queue]["spec"]["resources"]["gpu"]["quota"] = 8
    code, findings = live(MULTI)
    [finding] = live_rules(findings)
    assert code == 0 and finding["severity"] == "warning" and "quota of 8" in finding["message"]
    del site.kube.site_objects[queue]
    _expect_one(site, MULTI, "live-queue", "queue/nlp-lab")


def test_priority_class_missing(site: KubeAPI) -> None:
    del site.kube.site_objects["/apis/scheduling.k8s.io/v1/priorityclasses/high"]
    _expect_one(site, MULTI, "live-priority", "priorityclass/high")


def test_operator_crd_and_version(site: KubeAPI) -> None:
    deploy = site.kube.site_objects["/apis/apps/v1/namespaces/kubeflow/deployments/training-operator"]
    deploy["spec"]["template"]["spec"]["containers"][0]["image"] = "kubeflow/training-operator:v1.7.0"
    _expect_one(site, MULTI, "live-operator", "deployment/kubeflow/training-operator")
    del site.kube.site_objects[
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"
    ]
    _expect_one(site, MULTI, "live-operator", "crd/pytorchjobs.kubeflow.org")


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"


def test_the_render_is_checked_against_the_schema_the_cluster_serves(site: KubeAPI) -> None:
    crd = site.kube.site_objects[CRD_PATH]
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    run_policy = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["runPolicy"]
    run_policy["properties"]["backoffLimit"] = {"type": "string"}  # a cluster whose CRD differs
    _expect_one(site, MULTI, "live-crd-schema", "spec.runPolicy.backoffLimit")
    for version in crd["spec"]["versions"]:
        version["name"] = "v2"
    _expect_one(site, MULTI, "live-crd-schema", "apiVersion")
    del crd["spec"]["versions"]
    result = run("validate", "--live", str(MULTI))
    assert "the served PyTorchJob CRD has no schema" in result.output and result.exit_code == 0


@pytest.mark.parametrize(
    "resource",
    [
        "namespaces",
        "queues.scheduling.run.ai",
        "priorityclasses",
        "persistentvolumeclaims",
        "nodes",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "customresourcedefinitions",
    ],
)
def test_forbidden_is_one_warning_and_the_others_run(site: KubeAPI, resource: str) -> None:
    site.kube.denied.add(resource)
    del site.kube.site_objects["/apis/scheduling.k8s.io/v1/priorityclasses/high"]
    result = run("validate", "--live", str(MULTI))
    assert "Traceback" not in result.output
    forbidden = [x for x in result.output.splitlines() if "not checked: forbidden" in x]
    assert len(forbidden) == 1 and x_warning(forbidden[0]), result.output
    if resource != "priorityclasses":
        assert "[live-priority]" in result.output  # the other checks still ran
    else:
        assert result.exit_code == 0, result.output


def x_warning(line: str) -> bool:
    return line.startswith("warning:")


def test_forbidden_secrets_is_a_warning(site: KubeAPI, tmp_path: Path) -> None:
    site.kube.denied.add("secrets")
    profile = _profile(
        tmp_path, lambda d: d.update(secret_env={"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}})
    )
    result = run("validate", "--live", str(profile))
    assert "not checked: forbidden (secrets)" in result.output and result.exit_code == 0


def test_live_markdown_format(site: KubeAPI) -> None:
    del site.kube.site_objects[PVC]
    result = run("validate", "--live", "--format", "markdown", str(MULTI))
    assert result.exit_code == 1 and "nlp-lab-checkpoints" in result.stdout


def test_every_live_rule_is_documented() -> None:
    import re

    source = (ROOT / "src" / "runai_spec" / "cluster" / "checks.py").read_text(encoding="utf-8")
    rules = set(re.findall(r'"(live-[a-z-]+)"', source))
    doc = (ROOT / "docs" / "live-checks.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(live-[a-z-]+)`", doc))
    assert rules and rules == documented, (rules, documented)


def test_an_expired_token_is_unauthorised_not_unchecked(
    site: KubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 item 1: a 401 stops validate --live and submit with exit 3, not a green run of
    `not checked: forbidden` warnings."""
    wrong = site.kubeconfig(tmp_path / "expired", token="expired-token-0123456789abcdef")
    monkeypatch.setenv("KUBECONFIG", str(wrong))
    for args in (["validate", "--live", str(MULTI)], ["submit", str(MULTI)]):
        result = run(*args)
        assert result.exit_code == 3, result.output
        assert "unauthorised" in result.stderr and "not checked" not in result.output, result.output
        assert "expired-token" not in result.output
        assert not [ln for ln in result.stderr.splitlines() if ln.startswith("warning")]
    assert not site.kube.writes()
