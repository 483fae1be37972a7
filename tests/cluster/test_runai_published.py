"""Run:ai submission as the published API is (issue 43): dry runs that cannot create, token v2,
deletion as a state, every phase, the update call's limits, credentials, a lost create's
answer. Against the fake control plane (tests/runaiapi.py), through the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

import runai_schemas
from conftest import NAME, NS
from kube_helpers import PROFILE, Sleeps, run
from kubeapi import KubeAPI
from runai_helpers import PROJECT, credentials_absent, problems, use_site
from runai_spec.cluster import runai_api
from runai_spec.errors import EXIT_CLUSTER, EXIT_INPUT
from runai_spec.facts.runai_api import (
    DRY_RUN_VERSIONS,
    PHASES,
    TOKEN_V1_PATH,
    TOKEN_V2_PATH,
    documents_dry_run,
)
from runai_spec.load.site import RunaiControlPlane, SiteSubmit
from runaiapi import CLIENT_ID, CLIENT_SECRET, CLUSTER_NAME, RunaiAPI

pytest_plugins = ("kube_fixtures", "runai_fixtures")


def set_version(plane: RunaiAPI, version: str | None) -> None:
    plane.state.clusters[0]["version"] = version


# -- 1. a dry run that can never create ---------------------------------------------------


@pytest.mark.parametrize("version", ["2.23.4", "2.26.0", None])
def test_a_dry_run_on_a_cluster_whose_version_does_not_document_dry_run_is_refused_and_sends_nothing(
    runai_site: RunaiAPI, version: str | None
) -> None:
    runai_site.state.honours_dry_run = False  # as a control plane that does not know dryRun
    set_version(runai_site, version)
    for args in (("submit", PROFILE, "--dry-run", "server"), ("diff", PROFILE, "--live")):
        result = run(*args)
        assert result.exit_code == EXIT_CLUSTER, result.stderr
        (error, hint) = problems(result.stderr)[:2]
        assert "documents dryRun" in error and f"version {version or 'none'}" in error
        assert "--via kubernetes" in hint and "dryRun=All" in hint
    assert runai_site.state.workloads == {}
    assert not runai_site.state.sent("POST", "/api/v2/workloads")


def test_status_never_writes_on_a_control_plane_that_ignores_dry_run(runai_site: RunaiAPI) -> None:
    runai_site.state.honours_dry_run = False
    set_version(runai_site, None)
    result = run("status", NAME, "--project", PROJECT)
    assert result.exit_code == EXIT_CLUSTER and "not found" in result.stderr
    assert runai_site.state.workloads == {} and not runai_site.state.writes()


@pytest.mark.parametrize("version", ["2.24.7", "v3.0.1"])
def test_a_dry_run_goes_through_run_ai_where_the_version_documents_it(
    runai_site: RunaiAPI, version: str
) -> None:
    set_version(runai_site, version)
    result = run("submit", PROFILE, "--dry-run", "server")
    assert result.exit_code == 0, result.stderr
    assert runai_site.state.workloads == {}
    (post,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert post.query["dryRun"] == ["true"]


@pytest.mark.parametrize("args", [("submit", PROFILE, "--dry-run", "server"), ("diff", PROFILE, "--live")])
def test_a_documented_version_that_still_stores_the_dry_run_is_said_not_reported_as_a_dry_run(
    runai_site: RunaiAPI, args: tuple[str, ...]
) -> None:
    runai_site.state.honours_dry_run = False  # version 2.24.7: documented, yet ignored
    result = run(*args)
    assert result.exit_code == EXIT_CLUSTER
    assert "stored the workload although the request said dryRun=true" in result.stderr
    assert "would create" not in result.stderr


def test_the_dry_run_versions_are_read_by_major_and_minor() -> None:
    assert DRY_RUN_VERSIONS == ("2.24", "3.0")
    assert [documents_dry_run(v) for v in ("2.24.0", "2.24", "v3.0.2", "3.00.1")] == [True] * 4
    assert [documents_dry_run(v) for v in ("2.25.1", "2.2.4", "latest", "", None, "12.24.0")] == [False] * 6


# -- 2. tokens ----------------------------------------------------------------------------


def test_the_token_comes_from_api_v2_token_form_encoded_and_v1_is_not_asked(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    (token,) = runai_site.state.sent("POST", "/api/")[:1]
    assert token.path == TOKEN_V2_PATH
    assert token.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert f"client_id={CLIENT_ID}" in token.body and "grant_type=client_credentials" in token.body
    assert not runai_site.state.sent("POST", TOKEN_V1_PATH)


def test_a_control_plane_without_v2_token_gets_the_v1_request(runai_site: RunaiAPI) -> None:
    runai_site.state.token_v2 = False
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert [r.path for r in runai_site.state.sent("POST", "/token")] == [TOKEN_V2_PATH, TOKEN_V1_PATH]
    (v1,) = runai_site.state.sent("POST", TOKEN_V1_PATH)
    assert runai_schemas.errors(runai_schemas.TOKEN_REQUEST, v1.body) == []
    assert len(runai_site.state.workloads) == 1


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_token_endpoint_is_retried_honouring_retry_after(
    runai_site: RunaiAPI, sleeps: Sleeps, status: int
) -> None:
    runai_site.state.inject(status, method="POST", path_contains=TOKEN_V2_PATH, retry_after="3")
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert list(sleeps) == [3.0] and "retrying in 3 s" in result.stderr
    assert len(runai_site.state.workloads) == 1


def test_a_token_endpoint_that_stays_unavailable_gives_up_bounded(
    runai_site: RunaiAPI, sleeps: Sleeps
) -> None:
    runai_site.state.inject(503, method="POST", path_contains=TOKEN_V2_PATH, keep=True)
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER and "gave up after" in result.stderr
    assert 1 <= len(sleeps) < runai_api.RunaiTarget(url="", cluster="").retry.attempts
    assert runai_site.state.workloads == {}


# -- 3. deletion takes time ---------------------------------------------------------------


def test_deletion_is_a_state_status_shows_deleting_and_submit_waits_for_it_to_end(
    runai_site: RunaiAPI,
) -> None:
    runai_site.state.deletion_reads = 4
    assert run("submit", PROFILE).exit_code == 0
    deleted = run("delete", PROFILE, "--yes")
    assert deleted.exit_code == 0, deleted.stderr
    assert f"deleting: runai workload {PROJECT}/{NAME}" in deleted.stderr
    status = run("status", NAME, "--project", PROJECT)
    assert status.exit_code == 0 and f"{NAME} " in status.stdout and ": Deleting" in status.stdout
    resubmit = run("submit", PROFILE)
    assert resubmit.exit_code == EXIT_CLUSTER
    assert "is being deleted" in problems(resubmit.stderr)[0] and "--wait" in resubmit.stderr
    assert "unchanged" not in resubmit.stderr
    waited = run("delete", PROFILE, "--yes", "--wait", "--interval", "1")
    assert waited.exit_code == 0, waited.stderr
    assert f"deleted: runai workload {PROJECT}/{NAME}" in waited.stderr
    assert len(runai_site.state.sent("DELETE")) == 1  # one already Deleting is not deleted again
    assert runai_site.state.workloads == {}
    again = run("submit", PROFILE)
    assert again.exit_code == 0 and "created" in again.stderr


def test_delete_wait_gives_up_after_the_watch_timeout(runai_site: RunaiAPI, sleeps: Sleeps) -> None:
    runai_site.state.deletion_reads = 1000
    assert run("submit", PROFILE).exit_code == 0
    result = run("delete", PROFILE, "--yes", "--wait", "--interval", "1", "--watch-timeout", "3")
    assert result.exit_code == EXIT_CLUSTER
    assert "still Deleting after 3 s" in result.stderr and list(sleeps) == [1.0, 1.0, 1.0]


# -- 4. every phase -----------------------------------------------------------------------


def test_the_phase_table_covers_every_documented_phase() -> None:
    assert set(PHASES) == set(runai_schemas.PHASES) and len(PHASES) == 14


@pytest.mark.parametrize("phase", runai_schemas.PHASES)
def test_status_watch_ends_on_a_settling_or_failing_phase_and_waits_on_the_others(
    runai_site: RunaiAPI, phase: str
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    runai_site.state.only()["phase"] = phase
    result = run("status", NAME, "--project", PROJECT, "--watch", "--watch-timeout", "0")
    if PHASES[phase][0] == "wait":
        assert result.exit_code == EXIT_CLUSTER and f"still {phase} after 0 s" in result.stderr
    else:
        assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("phase", [p for p in runai_schemas.PHASES if p != "Deleting"])
def test_submit_wait_settles_fails_or_waits_on_each_phase_as_the_table_says(
    runai_site: RunaiAPI, phase: str
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()
    stored["phase"], stored["phaseMessage"] = phase, None
    result = run("submit", PROFILE, "--wait", "--watch-timeout", "0")
    outcome = PHASES[phase][0]
    shown = "Succeeded" if phase == "Completed" else phase
    assert f": {shown}" in result.stdout
    if outcome == "settle":
        assert result.exit_code == 0, result.stderr
    elif outcome == "fail":
        assert result.exit_code == EXIT_CLUSTER and f"{shown}" in result.stdout
        assert "Failed (the status above says why)" in result.stderr
        assert PHASES[phase][1] in result.stdout
    else:
        assert result.exit_code == EXIT_CLUSTER and f"still {phase}" in result.stderr


# -- 5. --replace is Run:ai's update call -------------------------------------------------


def test_replace_refuses_a_preemptibility_the_update_call_cannot_change(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    meta = runai_site.state.only()["metadata"]
    meta["preemptibility"] = (
        "preemptible" if meta["preemptibility"] == "non-preemptible" else "non-preemptible"
    )
    result = run("submit", PROFILE, "--replace")
    assert result.exit_code == EXIT_CLUSTER
    error, hint = problems(result.stderr)[:2]
    assert (
        "preemptibility" in error and "update call changes only the manifest, priority and category" in error
    )
    assert "delete PROFILE --wait --yes" in hint
    assert not runai_site.state.sent("PUT")


def test_a_changed_priority_alone_is_a_difference_and_replace_sends_it(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()["metadata"]
    preset_priority = stored["priority"]
    stored["priority"] = "very-low"
    refused = run("submit", PROFILE)
    assert refused.exit_code == EXIT_CLUSTER and "priority very-low" in refused.stderr
    replaced = run("submit", PROFILE, "--replace")
    assert replaced.exit_code == 0, replaced.stderr
    (put,) = runai_site.state.sent("PUT")
    assert put.body["metadata"]["priority"] == preset_priority and set(put.body["metadata"]) <= {
        "priority",
        "category",
    }
    assert runai_site.state.only()["metadata"]["priority"] == preset_priority


def test_a_category_left_to_run_ai_s_default_is_no_difference(
    plane: RunaiAPI, monkeypatch: pytest.MonkeyPatch, access_key: None, sleeps: Sleeps
) -> None:
    use_site(
        monkeypatch,
        SiteSubmit(via="runai", runai=RunaiControlPlane(url=plane.url, cluster=CLUSTER_NAME, category=None)),
    )
    assert run("submit", PROFILE).exit_code == 0
    plane.state.only()["metadata"]["category"] = "Train"  # the workload type's default, as stored
    again = run("submit", PROFILE)
    assert again.exit_code == 0 and "unchanged" in again.stderr, again.stderr


def test_an_existing_workload_s_dry_run_sends_nothing_and_needs_no_documented_dry_run(
    runai_site: RunaiAPI,
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    set_version(runai_site, "2.23.0")
    result = run("submit", PROFILE, "--dry-run", "server")
    assert result.exit_code == 0, result.stderr
    assert "unchanged" in result.stderr and len(runai_site.state.sent("POST", "/api/v2/workloads")) == 1


def test_an_update_whose_manifest_was_not_applied_is_said_not_reported_as_replaced(
    runai_site: RunaiAPI,
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    runai_site.state.update_applies_manifest = False
    stored = runai_site.state.only()
    stored["rawManifest"]["metadata"]["annotations"]["runai-spec/profile-sha256"] = "f" * 64
    result = run("submit", PROFILE, "--replace")
    assert result.exit_code == EXIT_CLUSTER
    assert "the manifest was not applied" in result.stderr and "replaced:" not in result.stderr


def test_submit_help_says_what_replace_does_per_path() -> None:
    result = run("submit", "--help")
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "Via kubernetes: delete it and create this one" in text
    assert "Via runai: Run:ai's update call (PUT)" in text


# -- 6. credentials -----------------------------------------------------------------------


def test_a_401_that_echoes_an_opaque_access_key_token_never_prints_it(runai_site: RunaiAPI) -> None:
    runai_site.state.inject(401, path_contains="/api/v1/org-unit/projects", keep=True, echo=True)
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == EXIT_CLUSTER and "unauthorised" in result.stderr
    assert runai_site.state.issued == 2  # renewed once: both tokens were echoed
    credentials_absent(result.stdout + result.stderr, runai_site)
    assert "(token ***)" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "large", "directory"])
def test_the_access_key_file_must_be_a_small_regular_file(
    runai_site: RunaiAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.delenv(runai_api.ENV_CLIENT_ID)
    monkeypatch.delenv(runai_api.ENV_CLIENT_SECRET)
    path = tmp_path / "key"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a plain open would block forever
    elif kind == "device":
        path = Path(os.devnull)
    elif kind == "large":  # a valid key, padded past the limit
        padding = "#" * 100 + "\n"
        path.write_text(
            f"clientId: {CLIENT_ID}\nclientSecret: {CLIENT_SECRET}\n" + padding * 700, encoding="utf-8"
        )
    else:
        path.mkdir()
    monkeypatch.setenv(runai_api.ENV_ACCESS_KEY_FILE, str(path))
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_INPUT, result.stderr
    assert runai_api.ENV_ACCESS_KEY_FILE in result.stderr
    assert ("larger than 64 KiB" if kind == "large" else "regular file") in result.stderr
    assert runai_site.state.workloads == {} and not runai_site.state.sent("POST")


@pytest.mark.parametrize("url", ["http://runai.example.org", "http://10.0.0.8:8080", "http://127.evil.org"])
def test_plain_http_is_refused_for_any_host_but_a_loopback_address(url: str) -> None:
    with pytest.raises(ValidationError, match="in clear"):
        RunaiControlPlane(url=url, cluster=CLUSTER_NAME)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080", "http://localhost", "http://[::1]:9", "https://runai.example.org"]
)
def test_https_and_a_loopback_http_address_are_accepted(url: str) -> None:
    assert RunaiControlPlane(url=url, cluster=CLUSTER_NAME).url == url


# -- 7. a stored create whose answer was lost ---------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_a_create_stored_but_answered_busy_is_reconciled_as_created(
    runai_site: RunaiAPI, sleeps: Sleeps, status: int
) -> None:
    runai_site.state.inject(status, method="POST", path_contains="/api/v2/workloads", after=True)
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert f"created: runai workload {PROJECT}/{NAME}" in result.stderr
    assert "conflict" not in result.stderr
    assert len(runai_site.state.sent("POST", "/api/v2/workloads")) == 2
    assert len(runai_site.state.workloads) == 1


def test_a_conflict_with_a_workload_that_is_not_this_render_stays_a_conflict(
    runai_site: RunaiAPI, sleeps: Sleeps
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    stored = runai_site.state.only()
    stored["rawManifest"]["metadata"]["annotations"]["runai-spec/profile-sha256"] = "f" * 64
    runai_site.state.inject(None, method="GET", path_contains="/api/v1/workloads", body={"workloads": []})
    runai_site.state.faults[-1].status = 200  # the first lookup misses it: the POST meets it
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER and "conflict" in result.stderr


# -- 8. restarts --------------------------------------------------------------------------


def test_status_says_restarts_unknown_where_run_ai_reports_none(runai_site: RunaiAPI) -> None:
    assert run("submit", PROFILE).exit_code == 0
    workload_id = runai_site.state.only()["metadata"]["id"]
    runai_site.state.pods[workload_id] = [{"name": f"{NAME}-worker-0", "k8sPhase": "Running"}]
    result = run("status", NAME, "--project", PROJECT)
    assert result.exit_code == 0, result.stderr
    assert "restarts unknown" in result.stdout and "restarts 0" not in result.stdout


def test_status_reads_restart_counts_from_the_kubernetes_api_where_the_kubeconfig_reaches_it(
    runai_site: RunaiAPI, api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    workload_id = runai_site.state.only()["metadata"]["id"]
    runai_site.state.pods[workload_id] = [
        {"name": f"{NAME}-master-0", "k8sPhase": "Running"},
        {"name": f"{NAME}-worker-0", "k8sPhase": "Running"},
    ]
    api.kube.add_pod(NAME, NS, "worker", 0, restarts=3)  # CrashLoopBackOff thrice, as the kubelet says
    result = run("status", NAME, "--project", PROJECT)
    assert result.exit_code == 0, result.stderr
    assert f"{NAME}-worker-0  Worker 0  Running  not started  restarts 3" in result.stdout
    assert f"{NAME}-master-0  Master 0  Running  not started  restarts unknown" in result.stdout


# -- 9. the metadata's namespace ----------------------------------------------------------


def test_a_render_whose_namespace_is_not_the_projects_run_ai_namespace_is_refused(
    runai_site: RunaiAPI,
) -> None:
    project = next(p for p in runai_site.state.projects if p["name"] == PROJECT)
    project["status"]["namespace"] = "lab-nlp"
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    assert "'lab-nlp'" in problems(result.stderr)[0] and "namespace pattern" in result.stderr
    assert runai_site.state.workloads == {}


def test_a_project_without_a_reported_namespace_is_sent_as_rendered_and_said(runai_site: RunaiAPI) -> None:
    project = next(p for p in runai_site.state.projects if p["name"] == PROJECT)
    del project["status"]
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert f"Run:ai reports no namespace for project {PROJECT}" in result.stderr
    assert len(runai_site.state.workloads) == 1


def test_no_credential_reaches_the_output_of_any_of_these_paths(runai_site: RunaiAPI) -> None:
    runai_site.state.inject(403, method="POST", path_contains="/api/v2/workloads", echo=True)
    result = run("submit", PROFILE)
    assert result.exit_code == EXIT_CLUSTER
    credentials_absent(result.stdout + result.stderr, runai_site)
