"""submit, status and delete through Run:ai's Workloads V2 API (issue 27), against the fake
control plane (tests/runaiapi.py), driven by the tool's own HTTP client and CLI."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import runai_schemas
from conftest import NAME, NS, pytorch_container
from kube_helpers import PROFILE, Sleeps, run
from kubeapi import KubeAPI
from runai_helpers import (
    CREDENTIAL_ENV,
    PROJECT,
    PROJECT_ID,
    credentials_absent,
    problems,
    rendered_job,
    use_site,
)
from runai_spec.cluster import runai_api
from runai_spec.cluster.runai import WorkloadMetadata, submit_workload
from runai_spec.cluster.runai_api import RunaiTarget
from runai_spec.errors import EXIT_CLUSTER, EXIT_INPUT, ClusterError
from runai_spec.facts.runai_api import TOKEN_V1_PATH, TOKEN_V2_PATH
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.site import RunaiControlPlane, SiteSubmit
from runaiapi import CLIENT_ID, CLIENT_SECRET, CLUSTER_NAME, CLUSTER_UUID, RunaiAPI

pytest_plugins = ("kube_fixtures", "runai_fixtures")

# -- the call -----------------------------------------------------------------------------


def test_submit_stores_one_workload_whose_manifest_is_the_render_with_project_and_cluster_ids(
    runai_site: RunaiAPI,
) -> None:
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    stored = runai_site.state.only()
    assert stored["rawManifest"] == rendered_job()
    meta = stored["metadata"]
    assert (meta["name"], meta["projectId"], meta["clusterId"]) == (NAME, PROJECT_ID, CLUSTER_UUID)
    preset = PresetRegistry().get("h200-2x8-ib").preset
    assert meta["priority"] == preset.priority
    assert meta["preemptibility"] == ("preemptible" if preset.preemptible else "non-preemptible")
    assert meta["category"] == "Train"
    (post,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert runai_schemas.errors(runai_schemas.WORKLOAD_V2_CREATE, post.body) == []
    assert "dryRun" not in post.query
    assert f"created: runai workload {PROJECT}/{NAME}" in result.stderr
    credentials_absent(result.stdout + result.stderr, runai_site)


def test_project_and_cluster_are_resolved_by_name_through_the_documented_lists(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    (projects,) = runai_site.state.sent("GET", "/api/v1/org-unit/projects")
    assert projects.query["filterBy"] == [f"name=={PROJECT}"]
    assert runai_site.state.sent("GET", "/api/v1/clusters")


def test_a_cluster_given_by_id_is_not_looked_up(
    plane: RunaiAPI, monkeypatch: pytest.MonkeyPatch, access_key: None, sleeps: Sleeps
) -> None:
    use_site(
        monkeypatch,
        SiteSubmit(via="runai", runai=RunaiControlPlane(url=plane.url, cluster=CLUSTER_UUID, category=None)),
    )
    assert run("submit", PROFILE).exit_code == 0
    assert not plane.state.sent("GET", "/api/v1/clusters")
    assert "category" not in plane.state.only()["metadata"]


def test_resubmitting_the_same_render_says_unchanged_and_writes_nothing(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    before = len(runai_site.state.writes())
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert f"unchanged: runai workload {PROJECT}/{NAME}" in result.stderr
    assert len(runai_site.state.writes()) == before
    assert len(runai_site.state.workloads) == 1


def test_dry_run_server_stores_nothing_and_prints_what_run_ai_would_store(runai_site: RunaiAPI) -> None:
    result = run("submit", PROFILE, "--dry-run", "server")
    assert result.exit_code == 0, result.stderr
    assert runai_site.state.workloads == {}
    (post,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert post.query["dryRun"] == ["true"]
    assert "would create: runai workload" in result.stderr and "nothing stored" in result.stderr
    (shown,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert shown == rendered_job()


def test_a_different_render_is_refused_without_replace_and_updated_with_it(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()
    stored["rawManifest"]["metadata"]["annotations"]["runai-spec/profile-sha256"] = "f" * 64
    before = len(runai_site.state.writes())
    refused = run("submit", PROFILE)
    assert refused.exit_code == EXIT_CLUSTER
    assert "exists with a different render" in problems(refused.stderr)[0]
    assert "--replace" in refused.stderr and len(runai_site.state.writes()) == before
    replaced = run("submit", PROFILE, "--replace")
    assert replaced.exit_code == 0, replaced.stderr
    (put,) = runai_site.state.sent("PUT", "/api/v2/workloads/")
    assert runai_schemas.errors(runai_schemas.WORKLOAD_V2_UPDATE, put.body) == []
    assert runai_site.state.only()["rawManifest"] == rendered_job()
    assert "replaced: runai workload" in replaced.stderr


def test_a_workload_of_that_name_not_submitted_by_runai_spec_is_not_touched(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    del runai_site.state.only()["rawManifest"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    result = run("submit", PROFILE, "--replace")
    assert result.exit_code == EXIT_CLUSTER
    assert "not submitted by runai-spec; not touched" in result.stderr
    assert not runai_site.state.sent("PUT")


# -- refusals -----------------------------------------------------------------------------


def test_an_unknown_priority_refused_by_the_server_is_one_error_line_with_its_reason(
    runai_site: RunaiAPI,
) -> None:
    preset = PresetRegistry().get("h200-2x8-ib").preset
    runai_site.state.priorities = tuple(p for p in runai_schemas.PRIORITIES if p != preset.priority)
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    errors = [ln for ln in problems(result.stderr) if ln.startswith("error:")]
    assert len(errors) == 1
    assert f"priority {preset.priority!r} is not a valid priority class" in errors[0]
    assert runai_site.state.workloads == {}


@pytest.mark.parametrize(
    "status, words",
    [
        (403, "forbidden: injected 403"),
        (404, "not found: injected 404"),
        (409, "conflict: injected 409"),
        (422, "refused by Run:ai: injected 422"),
    ],
)
def test_a_refused_create_is_one_error_line_with_a_hint(
    runai_site: RunaiAPI, status: int, words: str
) -> None:
    runai_site.state.inject(status, method="POST", path_contains="/api/v2/workloads")
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    lines = problems(result.stderr)
    assert [ln for ln in lines if ln.startswith("error:")] == [lines[0]]
    assert words in lines[0] and lines[1].startswith("hint: ")


def test_a_401_after_renewing_the_token_is_exit_3_log_in_again_and_no_token_shown(
    runai_site: RunaiAPI,
) -> None:
    runai_site.state.inject(401, path_contains="/api/v1/org-unit/projects", keep=True)
    for args in (("submit", PROFILE), ("submit", PROFILE, "--debug")):
        result = run(*args)
        assert result.exit_code == EXIT_CLUSTER
        assert "unauthorised" in result.stderr and "log in again" in result.stderr
        assert "runai login" in result.stderr
        credentials_absent(result.stdout + result.stderr, runai_site)
    assert runai_site.state.issued >= 2  # renewed once before giving up


def test_an_expired_token_is_renewed_once_and_the_call_goes_on(runai_site: RunaiAPI) -> None:
    session_target = RunaiTarget(url=runai_site.url, cluster=CLUSTER_NAME)
    meta = WorkloadMetadata(NAME, PROJECT, "high", False)
    with runai_api.RunaiSession(session_target) as session:
        assert session.call("GET", "/api/v1/clusters")[0] == 200
        runai_site.state.revoke_tokens()
        assert session.call("GET", "/api/v1/clusters")[0] == 200
    assert runai_site.state.issued == 2
    submit_workload(rendered_job(), meta, session_target)
    assert len(runai_site.state.workloads) == 1


def test_a_token_near_its_end_is_renewed_before_use(runai_site: RunaiAPI) -> None:
    now = [0.0]
    target = RunaiTarget(url=runai_site.url, cluster=CLUSTER_NAME, clock=lambda: now[0])
    with runai_api.RunaiSession(target) as session:
        session.call("GET", "/api/v1/clusters")
        now[0] = runai_site.state.expires_in - runai_api.EXPIRY_MARGIN + 1
        session.call("GET", "/api/v1/clusters")
    assert runai_site.state.issued == 2
    assert not [
        r
        for r in runai_site.state.requests
        if r.path not in (TOKEN_V1_PATH, TOKEN_V2_PATH) and r.headers.get("Authorization") is None
    ]


def test_a_refused_access_key_is_exit_3_and_the_secret_never_shown(
    runai_site: RunaiAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(runai_api.ENV_CLIENT_SECRET, "wrong-" + CLIENT_SECRET)
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == EXIT_CLUSTER
    assert "refused the access key" in result.stderr and "log in again" in result.stderr
    assert CLIENT_SECRET not in result.stdout + result.stderr
    assert runai_site.state.workloads == {}


def test_the_access_key_may_come_from_a_file(
    runai_site: RunaiAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runai_api.ENV_CLIENT_ID)
    monkeypatch.delenv(runai_api.ENV_CLIENT_SECRET)
    key = tmp_path / "access-key.yaml"
    key.write_text(f"clientId: {CLIENT_ID}\nclientSecret: {CLIENT_SECRET}\n", encoding="utf-8")
    monkeypatch.setenv(runai_api.ENV_ACCESS_KEY_FILE, str(key))
    assert run("submit", PROFILE).exit_code == 0
    assert len(runai_site.state.workloads) == 1


def fake_cli(tmp_path: Path, token: str, code: int = 0) -> Path:
    script = tmp_path / "runai"
    script.write_text(
        f"#!/bin/sh\n[ \"$*\" = 'auth get-token --output plaintext' ] || exit 9\n"
        f"echo '{token}'\necho 'debug: {token}' >&2\nexit {code}\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_without_an_access_key_the_runai_cli_login_gives_the_token(
    runai_site: RunaiAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runai_api.ENV_CLIENT_ID)
    monkeypatch.delenv(runai_api.ENV_CLIENT_SECRET)
    runai_site.state.static_tokens.add("cli-login-token-0123456789")
    monkeypatch.setenv(runai_api.ENV_CLI, str(fake_cli(tmp_path, "cli-login-token-0123456789")))
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == 0, result.stderr
    assert "cli-login-token-0123456789" not in result.stdout + result.stderr
    assert runai_site.state.issued == 0


def test_a_failing_runai_cli_is_exit_3_without_its_output(
    runai_site: RunaiAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runai_api.ENV_CLIENT_ID)
    monkeypatch.delenv(runai_api.ENV_CLIENT_SECRET)
    monkeypatch.setenv(runai_api.ENV_CLI, str(fake_cli(tmp_path, "half-token-0123456789", code=1)))
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    assert "half-token-0123456789" not in result.stdout + result.stderr
    assert "log in again" in result.stderr


def test_without_any_credentials_it_says_how_to_get_some(
    runai_site: RunaiAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", os.defpath if "runai" not in os.defpath else "/nonexistent")
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    assert "no Run:ai credentials" in result.stderr and runai_api.ENV_CLIENT_ID in result.stderr


# -- faults -------------------------------------------------------------------------------


def test_429_and_503_are_retried_with_retry_after_then_succeed(runai_site: RunaiAPI, sleeps: Sleeps) -> None:
    runai_site.state.inject(429, method="GET", path_contains="/api/v1/clusters", retry_after="2")
    runai_site.state.inject(503, method="POST", path_contains="/api/v2/workloads")
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert sleeps[0] == 2.0 and len(sleeps) == 2
    assert result.stderr.count("retrying in") == 2
    assert len(runai_site.state.workloads) == 1


def test_a_control_plane_that_stays_busy_gives_up_after_bounded_attempts(
    runai_site: RunaiAPI, sleeps: Sleeps
) -> None:
    runai_site.state.inject(503, keep=True, path_contains="/api/v1/clusters")
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    assert "gave up after" in problems(result.stderr)[0]
    assert sum(sleeps) <= RunaiTarget(url="", cluster="").retry.max_total


def test_a_slow_create_is_read_back_and_a_resubmit_does_not_store_a_second(runai_site: RunaiAPI) -> None:
    runai_site.state.inject(None, method="POST", path_contains="/api/v2/workloads", delay=1.0)
    slow = run("submit", PROFILE, "--request-timeout", "0.3")
    assert slow.exit_code == EXIT_CLUSTER
    assert "no answer" in slow.stderr and "may still appear" in slow.stderr
    import time

    deadline = time.monotonic() + 5
    while not runai_site.state.workloads and time.monotonic() < deadline:
        time.sleep(0.05)
    again = run("submit", PROFILE)
    assert again.exit_code == 0, again.stderr
    assert "unchanged" in again.stderr and len(runai_site.state.workloads) == 1


def test_an_unreachable_control_plane_is_one_line_exit_3(
    monkeypatch: pytest.MonkeyPatch, access_key: None, sleeps: Sleeps
) -> None:
    gone = RunaiAPI()
    gone.stop()
    use_site(
        monkeypatch, SiteSubmit(via="runai", runai=RunaiControlPlane(url=gone.url, cluster=CLUSTER_UUID))
    )
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    assert len([ln for ln in problems(result.stderr) if ln.startswith("error: ")]) == 1


# -- the path per call, status, delete ----------------------------------------------------


def test_via_runai_without_a_configured_control_plane_is_bad_input() -> None:
    result = run("submit", PROFILE, "--via", "runai")
    assert result.exit_code == EXIT_INPUT
    assert "submit.runai" in result.stderr


def test_via_runai_overrides_a_kubernetes_site_per_call(
    plane: RunaiAPI, monkeypatch: pytest.MonkeyPatch, access_key: None, sleeps: Sleeps
) -> None:
    use_site(
        monkeypatch,
        SiteSubmit(via="kubernetes", runai=RunaiControlPlane(url=plane.url, cluster=CLUSTER_NAME)),
    )
    result = run("submit", PROFILE, "--via", "runai")
    assert result.exit_code == 0, result.stderr
    assert len(plane.state.workloads) == 1


def test_status_reads_the_phase_and_pods_run_ai_reports(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()
    runai_site.state.pods[stored["metadata"]["id"]] = [
        {
            "name": f"{NAME}-master-0",
            "k8sPhase": "Running",
            "nodeName": "h200-01",
            "containers": [{"name": "pytorch", "image": "x", "startedAt": "2026-12-04T10:00:00Z"}],
        },
        {"name": f"{NAME}-worker-0", "k8sPhase": "Pending", "containers": []},
    ]
    result = run("status", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert "Pending: Waiting for resources" in result.stdout
    assert (
        f"{NAME}-master-0  Master 0  Running  started 2026-12-04T10:00:00Z  restarts unknown  on h200-01"
    ) in result.stdout
    assert f"{NAME}-worker-0  Worker 0  Pending  not started" in result.stdout
    stored["phase"] = "Completed"
    by_name = run("status", NAME, "--project", PROJECT, "--watch")
    assert by_name.exit_code == 0 and "Succeeded" in by_name.stdout


def test_status_of_a_workload_that_is_not_there_is_exit_3(runai_site: RunaiAPI) -> None:
    result = run("status", NAME, "--project", PROJECT)
    assert result.exit_code == EXIT_CLUSTER and "not found" in result.stderr


def test_delete_removes_the_workload_through_the_workload_api(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    result = run("delete", PROFILE, "--yes", "--wait")
    assert result.exit_code == 0, result.stderr
    assert runai_site.state.workloads == {}
    (delete,) = runai_site.state.sent("DELETE", "/api/v2/workloads/")
    assert f"deleted: runai workload {PROJECT}/{NAME}" in result.stderr
    again = run("delete", PROFILE, "--yes")
    assert again.exit_code == EXIT_CLUSTER and "not found" in again.stderr


def test_the_module_api_raises_cluster_errors_with_the_server_reason(runai_site: RunaiAPI) -> None:
    target = RunaiTarget(url=runai_site.url, cluster="no-such-cluster")
    with pytest.raises(ClusterError) as info:
        submit_workload(rendered_job(), WorkloadMetadata(NAME, PROJECT, "high", False), target)
    assert "not known to the Run:ai control plane" in info.value.message
    assert CLUSTER_NAME in (info.value.hint or "")


def test_debug_shows_each_request_line_and_never_a_token(runai_site: RunaiAPI) -> None:
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == 0, result.stderr
    assert "runai POST /api/v2/workloads -> 202" in result.stderr
    assert f"runai POST {TOKEN_V2_PATH} -> 200" in result.stderr
    credentials_absent(result.stdout + result.stderr, runai_site)
    assert "Bearer" not in result.stderr


def test_the_smoke_test_goes_through_the_kubernetes_client_on_a_runai_site(
    runai_site: RunaiAPI, api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    result = run("submit", PROFILE, "--smoke")
    assert result.exit_code == 0, result.stderr
    assert "the smoke test goes through the Kubernetes client" in result.stderr
    assert api.kube.get("pytorchjobs", NS, f"{NAME}-smoke") is not None
    assert api.kube.get("configmaps", NS, f"{NAME}-smoke-preflight") is not None
    assert runai_site.state.workloads == {} and not runai_site.state.writes()


def test_submit_wait_polls_the_phase_run_ai_reports(runai_site: RunaiAPI) -> None:
    result = run("submit", PROFILE, "--wait", "--watch-timeout", "0")
    assert result.exit_code == EXIT_CLUSTER
    assert "Pending: Waiting for resources" in result.stdout
    assert "still Pending" in result.stderr
    runai_site.state.only()["phase"] = "Running"
    again = run("submit", PROFILE, "--wait", "--watch-timeout", "0")
    assert again.exit_code == 0, again.stderr
    assert "unchanged" in again.stderr and ": Running" in again.stdout


def test_one_token_serves_every_request_of_a_command(
    runai_site: RunaiAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit --wait sent its submit and each poll in a session of its own: a token each."""
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        runai_site.state.only()["phase"] = "Running"

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    result = run("submit", PROFILE, "--wait", "--interval", "1")
    assert result.exit_code == 0, result.stderr
    assert polls == [1.0] and runai_site.state.issued == 1


def test_delete_refuses_a_workload_runai_spec_did_not_submit(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    del runai_site.state.only()["rawManifest"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    result = run("delete", NAME, "--project", PROJECT, "--yes")
    assert result.exit_code == EXIT_CLUSTER and "not touched" in result.stderr
    assert len(runai_site.state.workloads) == 1 and not runai_site.state.sent("DELETE")


def test_the_shipped_site_submits_through_kubernetes_and_runai_needs_its_control_plane() -> None:
    assert PresetRegistry().site().submit == SiteSubmit()
    assert SiteSubmit().via == "kubernetes"
    with pytest.raises(ValidationError, match="submit.runai"):
        SiteSubmit(via="runai")
    with pytest.raises(ValidationError):
        RunaiControlPlane(url="ftp://runai.example.org", cluster=CLUSTER_NAME)
    with pytest.raises(ValidationError):
        SiteSubmit.model_validate({"via": "slurm"})


@pytest.mark.parametrize(
    "raw", [None, "text", {"metadata": "x"}, {"metadata": {"labels": ["app.kubernetes.io/managed-by"]}}]
)
def test_a_stored_manifest_of_another_shape_is_not_touched_and_no_traceback(
    runai_site: RunaiAPI, raw: Any
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    runai_site.state.only()["rawManifest"] = raw
    for args in (("submit", PROFILE, "--replace"), ("delete", PROFILE, "--yes")):
        result = run(*args)
        assert result.exit_code == EXIT_CLUSTER, result.stderr
        assert "not touched" in result.stderr and "Traceback" not in result.stderr
    assert not runai_site.state.sent("PUT") and not runai_site.state.sent("DELETE")


def test_fields_run_ai_adds_to_the_stored_manifest_still_read_as_unchanged(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()["rawManifest"]
    stored["metadata"].setdefault("labels", {})["run.ai/added"] = "by-the-control-plane"
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert "unchanged" in result.stderr and not runai_site.state.sent("PUT")


def test_diff_live_on_a_runai_site_compares_with_what_run_ai_holds(runai_site: RunaiAPI) -> None:
    absent = run("diff", PROFILE, "--live")
    assert absent.exit_code == 1, absent.stderr
    assert runai_site.state.workloads == {}
    (dry,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert dry.query["dryRun"] == ["true"]
    assert run("submit", PROFILE).exit_code == 0
    same = run("diff", PROFILE, "--live")
    assert same.exit_code == 0, same.stdout + same.stderr
    command = pytorch_container(runai_site.state.only()["rawManifest"], "Master")["command"]
    command.append("--changed-by-hand")
    changed = run("diff", PROFILE, "--live")
    assert changed.exit_code == 1
    assert "--changed-by-hand" in changed.stdout
    assert len(runai_site.state.workloads) == 1 and not runai_site.state.sent("PUT")


def test_a_server_that_echoes_the_credentials_in_its_error_never_gets_them_printed(
    runai_site: RunaiAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runai_api.ENV_CLIENT_ID)
    monkeypatch.delenv(runai_api.ENV_CLIENT_SECRET)
    token = "cli-login-token-0123456789"
    runai_site.state.static_tokens.add(token)
    monkeypatch.setenv(runai_api.ENV_CLI, str(fake_cli(tmp_path, token)))
    runai_site.state.inject(
        403,
        method="POST",
        body={"code": 403, "message": f"denied for Bearer {token}", "details": f"token={token}"},
    )
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == EXIT_CLUSTER
    assert token not in result.stdout + result.stderr
    assert "denied for Bearer ***" in result.stderr


def test_a_token_endpoint_that_echoes_the_secret_never_gets_it_printed(runai_site: RunaiAPI) -> None:
    runai_site.state.inject(
        401,
        path_contains=TOKEN_V2_PATH,
        body={"error": "invalid_client", "error_description": f"bad secret {CLIENT_SECRET}"},
    )
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER and "log in again" in result.stderr
    assert CLIENT_SECRET not in result.stdout + result.stderr
