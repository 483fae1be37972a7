"""The fake API server enforces the stored admission policy on create and server-side apply,
answering as the API server does; `submit` turns a denial into one line (issue 14)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT, crd_validator, example_job, pytorch_containers
from kube_helpers import NAME, NS, PROFILE, Render, error_lines, run
from kubeapi import KubeAPI, admit, status_body
from runai_spec.cluster import AdmissionDenied, Target, admission_denied, submit_manifests
from runai_spec.errors import EXIT_CLUSTER
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission

pytest.importorskip("cel_expr_python.cel")
pytest_plugins = ("kube_fixtures",)

DENIED = (
    f'pytorchjobs.kubeflow.org "{NAME}" is forbidden: ValidatingAdmissionPolicy '
    f"'{admission.POLICY_NAME}' with binding '{admission.POLICY_NAME}' denied request: "
)


@lru_cache(maxsize=1)
def _shipped_documents() -> list[dict[str, Any]]:
    """The shipped presets' policy documents, generated once a process (about a CPU second each
    time: issue 37, CI's time)."""
    return admission.policy_documents(PresetRegistry(ROOT / "presets"))


@pytest.fixture
def policed(api: KubeAPI) -> KubeAPI:
    """The policy, binding and parameters of the shipped presets, as the AI Engineers apply them."""
    crd_validator()  # loaded here (seconds, once), not while the client's read timeout runs
    api.kube.store_policy(copy.deepcopy(_shipped_documents()))
    # the API server plans a policy's programs before it serves (cel-cpp plans one on its first
    # evaluation, a second or so for the generated policy): not inside the client's timeout
    for name in EXAMPLES:
        admit(api.kube, "pytorchjobs", "CREATE", example_job(name), None)
    return api


def jobs(api: KubeAPI) -> list[dict[str, Any]]:
    return [o for (plural, _, _), o in api.kube.objects.items() if plural == "pytorchjobs"]


def stored_configmaps(api: KubeAPI) -> list[tuple[str, str]]:
    return sorted((ns, name) for (plural, ns, name) in api.kube.objects if plural == "configmaps")


def more_gpus(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for container in pytorch_containers(manifests[0]):
        container["resources"]["limits"]["nvidia.com/gpu"] = 9
    return manifests


# -- the fake API server -----------------------------------------------------------------
def test_a_tampered_apply_is_denied_as_the_api_server_answers_and_nothing_is_stored(
    policed: KubeAPI, target: Target, rendered: Render
) -> None:
    with pytest.raises(AdmissionDenied) as caught:
        submit_manifests(more_gpus(rendered()), target)
    assert jobs(policed) == []
    (patch,) = policed.kube.sent("PATCH")
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
    # the raw answer: the Status the API server sends for a validation with reason Forbidden
    job = more_gpus(rendered())[0]
    code, body = admit(policed.kube, "pytorchjobs", "CREATE", job, None)  # type: ignore[misc]
    assert code == 403 and body["kind"] == "Status" and body["status"] == "Failure"
    assert body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"].startswith(DENIED + "spec.pytorchReplicaSpecs.")
    assert body["details"]["group"] == "kubeflow.org" and body["details"]["kind"] == "pytorchjobs"
    assert body["details"]["causes"] == [{"message": body["message"].split(" is forbidden: ", 1)[1]}]
    denied = caught.value
    assert denied.exit_code == EXIT_CLUSTER
    assert denied.denied_field is not None
    assert denied.denied_field.endswith(".template.spec.containers[pytorch].resources.limits.nvidia.com/gpu")
    line, hint = denied.lines()
    assert line.startswith(
        f"error: cluster: admission denied pytorchjobs/{NS}/{NAME}: spec.pytorchReplicaSpecs."
    )
    assert line.endswith("nvidia.com/gpu: must be '8' (preset h200-2x8-ib)")
    assert hint.startswith("hint: ") and admission.POLICY_NAME in hint


def test_a_tampered_create_is_denied_too(policed: KubeAPI, target: Target, rendered: Render) -> None:
    from runai_spec.cluster import Session

    job = more_gpus(rendered())[0]
    job["metadata"]["annotations"]["runai-spec/preset"] = "h200-64gpu"
    with Session(target) as session:
        resp = session.call(
            "POST",
            f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs",
            body=json.dumps(job),
            content_type="application/yaml",
            write=True,
        )
        body = json.loads(resp.data)
    assert resp.status == 403, body["message"]
    assert body["message"] == DENIED + (
        "metadata.annotations.runai-spec/preset: h200-64gpu is not an approved preset"
    )
    assert jobs(policed) == []


def test_a_dry_run_is_judged_as_well(policed: KubeAPI, target: Target, rendered: Render) -> None:
    with pytest.raises(AdmissionDenied):
        submit_manifests(more_gpus(rendered()), target, dry_run=True)
    assert jobs(policed) == []


def test_an_untampered_render_is_admitted(policed: KubeAPI, target: Target, rendered: Render) -> None:
    result = submit_manifests(rendered(), target)
    assert [o.action for o in result.outcomes] == ["created"]
    assert policed.kube.get("pytorchjobs", NS, NAME) is not None


def test_an_update_that_changes_the_shape_is_judged(
    policed: KubeAPI, target: Target, rendered: Render
) -> None:
    submit_manifests(rendered(), target)
    version = policed.kube.get("pytorchjobs", NS, NAME)["metadata"]["resourceVersion"]  # type: ignore[index]
    with pytest.raises(AdmissionDenied):
        _apply_over(target, more_gpus(rendered())[0])
    live = policed.kube.get("pytorchjobs", NS, NAME)
    assert live is not None and live["metadata"]["resourceVersion"] == version


def _apply_over(target: Target, job: dict[str, Any]) -> None:
    """A forced server-side apply over the live job (an UPDATE), as `kubectl apply
    --server-side --force-conflicts` would send it."""
    from runai_spec.cluster import Session, job_ref
    from runai_spec.cluster.submit import _apply

    with Session(target) as session:
        _apply(session, job_ref(NAME, NS), job, dry_run=False, force=True)


def test_a_namespace_the_policy_does_not_select_is_not_judged(policed: KubeAPI, rendered: Render) -> None:
    job = more_gpus(rendered())[0]
    job["metadata"]["namespace"] = "default"  # no queue label: not a Run:ai project
    assert admit(policed.kube, "pytorchjobs", "CREATE", job, None) is None
    assert admit(policed.kube, "configmaps", "CREATE", job, None) is None


def test_missing_parameters_deny_every_job(policed: KubeAPI, rendered: Render) -> None:
    del policed.kube.objects[("configmaps", admission.PARAMS_NAMESPACE, admission.PARAMS_NAME)]
    refused = admit(policed.kube, "pytorchjobs", "CREATE", rendered()[0], None)
    assert refused is not None
    code, body = refused
    assert (code, body["reason"]) == (422, "Invalid")
    assert "no params found for policy binding with `Deny` parameterNotFoundAction" in body["message"]


def test_without_a_stored_policy_nothing_is_judged(api: KubeAPI, rendered: Render) -> None:
    assert admit(api.kube, "pytorchjobs", "CREATE", more_gpus(rendered())[0], None) is None


# -- submit ------------------------------------------------------------------------------
@pytest.mark.parametrize("example", EXAMPLES)
def test_submit_of_every_example_is_admitted(policed: KubeAPI, kubeconfig: Path, example: str) -> None:
    result = run("submit", str(ROOT / "examples" / example / "profile.yaml"))
    assert result.exit_code == 0, result.output
    assert len(jobs(policed)) == 1


def test_submit_of_a_render_from_a_forged_approval_is_denied_one_line_nothing_stored(
    presets_dir: Path, policed: KubeAPI, kubeconfig: Path, engineer_key: Path
) -> None:
    """A researcher edits a preset and approves it in their own checkout: the tool renders
    it, the cluster (parameters from the shipped ledger) denies it."""
    preset = presets_dir / "h200-2x8-ib.yaml"
    preset.write_text(preset.read_text().replace('cpu: "96"', 'cpu: "64"'), encoding="utf-8")
    # their own key, listed in their checkout's allowed_signers: a forged approval
    PresetRegistry(presets_dir).approve("h200-2x8-ib", engineer_key, expires="2027-12-31")
    before = stored_configmaps(policed)
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER, result.output
    lines = [ln for ln in error_lines(result.stderr) if ln.startswith(("error: ", "hint: "))]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    sha = PresetRegistry(ROOT / "presets").get("h200-2x8-ib").sha256
    assert errors == [
        f"error: cluster: admission denied {PROFILE}: "
        f"metadata.annotations.runai-spec/preset-sha256: must be '{sha}' "
        "(preset h200-2x8-ib; and more)"
    ], result.stderr
    assert lines[-2] == errors[0] and lines[-1].startswith("hint: ")  # the last two lines
    assert "Traceback" not in result.output
    assert jobs(policed) == [] and stored_configmaps(policed) == before


def test_submit_of_a_tampered_object_names_the_field(
    policed: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that edits the render after it was checked (one more GPU per pod)."""
    from runai_spec.pipeline import workload as workload_module

    real = workload_module.prepare_workload

    def tampered(path: Path) -> Any:
        workload = real(path)
        manifests = more_gpus([dict(m) for m in workload.manifests])
        return workload._replace(manifests=tuple(manifests))

    # the command imports it when it runs (cli/cluster.py): patched where it lives
    monkeypatch.setattr(workload_module, "prepare_workload", tampered)
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER, result.output
    (line,) = [ln for ln in error_lines(result.stderr) if ln.startswith("error: ")]
    assert line.startswith(f"error: cluster: admission denied {PROFILE}: spec.pytorchReplicaSpecs.")
    assert line.endswith(
        ".template.spec.containers[pytorch].resources.limits.nvidia.com/gpu: must be '8' (preset h200-2x8-ib)"
    )
    assert jobs(policed) == []


def test_a_denial_with_reason_invalid_is_not_read_as_a_schema_error() -> None:
    message = (
        "pytorchjobs.kubeflow.org \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with "
        "binding 'b' denied request: spec.nprocPerNode: must be 8 (preset h200-8gpu)"
    )
    denied = admission_denied(status_body(422, "Invalid", message), "pytorchjobs/ns/x")
    assert denied is not None
    assert (denied.policy, denied.binding, denied.denied_field) == ("p", "b", "spec.nprocPerNode")
    assert denied.for_file("p.yaml").lines()[0] == (
        "error: cluster: admission denied p.yaml: spec.nprocPerNode: must be 8 (preset h200-8gpu)"
    )
    assert (
        admission_denied(
            status_body(403, "Forbidden", 'pytorchjobs is forbidden: User "alice" cannot create'), "r"
        )
        is None
    )


def test_a_tampered_smoke_test_stores_neither_its_config_map_nor_its_job(
    policed: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two objects: every one is dry-run applied (and judged) before the first is stored."""
    from runai_spec.cli import cluster as cli_cluster

    real = cli_cluster.smoke_manifests

    def tampered(workload: Any) -> list[dict[str, Any]]:
        manifests = [dict(m) for m in real(workload)]
        assert [m["kind"] for m in manifests] == ["ConfigMap", "PyTorchJob"]  # the map goes first
        for container in pytorch_containers(manifests[1]):
            container["resources"]["limits"]["nvidia.com/gpu"] = 9
        return manifests

    before = stored_configmaps(policed)
    monkeypatch.setattr(cli_cluster, "smoke_manifests", tampered)
    result = run("submit", "--smoke", PROFILE)
    assert result.exit_code == EXIT_CLUSTER, result.output
    assert f"error: cluster: admission denied {PROFILE}: spec.pytorchReplicaSpecs." in result.stderr
    assert jobs(policed) == [] and stored_configmaps(policed) == before
    monkeypatch.setattr(cli_cluster, "smoke_manifests", real)
    result = run("submit", "--smoke", PROFILE)  # the smoke test as rendered is admitted
    assert result.exit_code == 0, result.output
    assert [j["metadata"]["name"] for j in jobs(policed)] == [f"{NAME}-smoke"]
    assert len(stored_configmaps(policed)) == len(before) + 1


def test_submit_dry_run_server_shows_the_denial_of_a_tampered_manifest(
    policed: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`submit --dry-run=server`: the API server runs admission on a dry run too; the denial
    is the same one line, and nothing is stored."""
    from runai_spec.pipeline import workload as workload_module

    real = workload_module.prepare_workload

    def tampered(path: Path) -> Any:
        workload = real(path)
        manifests = [dict(m) for m in workload.manifests]
        for role in manifests[0]["spec"]["pytorchReplicaSpecs"].values():
            role["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
        return workload._replace(manifests=tuple(manifests))

    # the command imports it when it runs (cli/cluster.py): patched where it lives
    monkeypatch.setattr(workload_module, "prepare_workload", tampered)
    result = run("submit", PROFILE, "--dry-run=server")
    assert result.exit_code == EXIT_CLUSTER, result.output
    (line,) = [ln for ln in error_lines(result.stderr) if ln.startswith("error: ")]
    assert line.startswith(f"error: cluster: admission denied {PROFILE}: spec.pytorchReplicaSpecs.")
    assert line.endswith(
        ".template.spec.tolerations: not allowed: the preset's render has none (preset h200-2x8-ib)"
    ), line
    assert jobs(policed) == []
    assert any("dryRun" in r.query for r in policed.kube.requests)
