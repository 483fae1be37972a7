"""The cluster commands end to end: profile -> CLI -> real kubernetes client -> fake API server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kube_helpers import NAME, NS, PROFILE, Sleeps, error_lines, run
from kubeapi import KubeAPI

pytest_plugins = ("kube_fixtures",)


def test_submit_then_resubmit_then_status_logs_delete(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    first = run("submit", PROFILE, "--kubeconfig", str(kubeconfig))
    assert first.exit_code == 0, first.output
    assert f"created: pytorchjobs/{NS}/{NAME}" in first.stderr
    again = run("submit", PROFILE)  # KUBECONFIG from the environment
    assert again.exit_code == 0 and f"unchanged: pytorchjobs/{NS}/{NAME}" in again.stderr
    assert api.kube.count("pytorchjobs") == 1

    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.add_pod(NAME, NS, "worker", 0, phase="Pending")
    api.kube.add_event(NS, f"{NAME}-worker-0", "Unschedulable", "project nlp-lab is over quota")
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "epoch 1\n"
    status = run("status", NAME, "--project", "nlp-lab")
    assert status.exit_code == 0, status.output
    assert f"{NAME} ({NS}): Pending" in status.stdout
    assert "pending: llm-7b-fsdp-worker-0: over the project's GPU quota" in status.stdout
    as_json = run("status", PROFILE, "--format", "json")
    assert as_json.exit_code == 0 and '"phase": "Pending"' in as_json.stdout

    saved = run("logs", PROFILE, "--out", str(tmp_path / "logs"))
    assert saved.exit_code == 0, saved.output
    assert (tmp_path / "logs" / f"{NAME}-master-0.log").read_text() == "epoch 1\n"
    assert f"skipped {NAME}-worker-0" in saved.stderr

    refused = run("delete", NAME, "--project", "nlp-lab")  # no TTY, no --yes
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --yes: ")
    assert api.kube.count("pytorchjobs") == 1 and api.kube.sent("DELETE") == []
    deleted = run("delete", PROFILE, "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert f"deleted: pytorchjobs/{NS}/{NAME}" in deleted.stderr
    assert api.kube.count("pytorchjobs") == 0


def test_submit_dry_run_server_prints_what_the_server_would_store(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("submit", PROFILE, "--dry-run", "server")
    assert result.exit_code == 0, result.output
    assert "would create" in result.stderr and 'kind: "PyTorchJob"' in result.stdout
    assert "managedFields" not in result.stdout and api.kube.count("pytorchjobs") == 0


@pytest.mark.parametrize(
    ("breakage", "code", "words"),
    [
        ("nccl-env", 1, "[nccl-transport-env]"),
        ("tag-only-image", 1, "[image-digest]"),
        ("not-yaml", 2, "not valid YAML"),
        ("unknown-preset", 2, "unknown preset 'h200-64x8-dreams'"),
    ],
)
def test_submit_of_an_invalid_profile_sends_no_request(
    api: KubeAPI,
    kubeconfig: Path,
    base_profile: dict[str, Any],
    write_profile: Callable[..., Path],
    breakage: str,
    code: int,
    words: str,
) -> None:
    if breakage == "nccl-env":
        base_profile["env"] = {"NCCL_SOCKET_IFNAME": "eth0"}
    elif breakage == "tag-only-image":
        base_profile["image"] = "registry.scc.example.org/team-a/train:1.0"
    elif breakage == "unknown-preset":
        base_profile["preset"] = "h200-64x8-dreams"
    path = write_profile("name: [unclosed\n" if breakage == "not-yaml" else base_profile)
    result = run("submit", str(path), "--kubeconfig", str(kubeconfig))
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error: ") and words in result.stderr.splitlines()[0]
    assert api.kube.requests == []


def test_cluster_refusals_exit_3_with_one_error_line_and_a_hint(api: KubeAPI, kubeconfig: Path) -> None:
    api.kube.forbidden.add(("patch", "pytorchjobs"))
    result = run("submit", PROFILE, "--debug")
    assert result.exit_code == 3
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert (
        errors
        == [
            line
            for line in errors
            if line.startswith(f"error: cluster: pytorchjobs/{NS}/{NAME}: forbidden: ")
        ]
        and len(errors) == 1
    )
    assert "hint: " in result.stderr
    assert api.kube.token not in result.output
    assert "Traceback" not in result.output


def test_a_name_needs_a_project_and_must_be_a_name(api: KubeAPI, kubeconfig: Path) -> None:
    no_project = run("status", NAME)
    assert no_project.exit_code == 2 and no_project.stderr.startswith("error: --project: ")
    bad_name = run("status", "Bad/Name", "--project", "nlp-lab")
    assert bad_name.exit_code == 2
    assert bad_name.stderr.startswith("error: NAME: 'Bad/Name' is neither a profile file nor")
    assert api.kube.requests == []


def test_unreachable_cluster_exits_3(unreachable: tuple[Path, str], cli_sleeps: Sleeps) -> None:
    config, _ = unreachable
    result = run("status", NAME, "--project", "nlp-lab", "--kubeconfig", str(config))
    assert result.exit_code == 3 and "cannot connect to http://127.0.0.1:" in result.stderr
    # one error line and its hint (debug lines appear when an earlier test enabled --debug)
    lines = error_lines(result.stderr)
    assert len(lines) == 2 and lines[0].endswith("connection refused")
    assert lines[1].startswith("hint: check the kubeconfig context")
    assert cli_sleeps == []  # nothing listens there: retrying cannot help, so no silent waiting


def test_declining_the_delete_question_deletes_nothing_and_exits_0(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    monkeypatch.setattr("runai_spec.cli.common.stdin_is_terminal", lambda: True)
    declined = run("delete", PROFILE, input="n\n")
    assert declined.exit_code == 0, declined.output
    assert declined.stderr.splitlines()[-1] == "aborted: nothing deleted"
    assert api.kube.count("pytorchjobs") == 1
    accepted = run("delete", PROFILE, input="y\n")
    assert accepted.exit_code == 0 and f"deleted: pytorchjobs/{NS}/{NAME}" in accepted.stderr
    assert api.kube.count("pytorchjobs") == 0


def test_an_unknown_context_is_bad_input(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("status", NAME, "--project", "nlp-lab", "--context", "prod")
    assert result.exit_code == 2, result.output
    assert "context 'prod' not in the kubeconfig" in result.stderr
    assert api.kube.requests == []


def test_submit_with_findings_says_nothing_was_sent(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    bad = tmp_path / "profile.yaml"
    text = Path(PROFILE).read_text(encoding="utf-8")
    bad.write_text(text.replace("  global: 512\n", "  global: 500\n"), encoding="utf-8")
    result = run("submit", str(bad))
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1].endswith(": nothing was sent")
    assert api.kube.requests == []


def test_status_watch_polls_until_running_bounded(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:  # the operator reports it running after the second pause
            job = api.kube.get("pytorchjobs", NS, NAME)
            assert job is not None
            job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    watched = run("status", PROFILE, "--watch", "--interval", "2")
    assert watched.exit_code == 0, watched.output
    assert slept == [2.0, 2.0] and "Running" in watched.stdout
    slept.clear()
    job = api.kube.get("pytorchjobs", NS, NAME)
    assert job is not None
    job["status"] = {}
    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", slept.append)
    gave_up = run("status", PROFILE, "--watch", "--interval", "1", "--watch-timeout", "3")
    assert gave_up.exit_code == 3 and "still Pending after 3 s" in gave_up.stderr
    assert slept == [1.0, 1.0, 1.0]


def test_logs_to_stdout_one_pod(api: KubeAPI, kubeconfig: Path) -> None:
    assert run("submit", PROFILE).exit_code == 0
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.add_pod(NAME, NS, "worker", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "epoch 1\n"
    api.kube.logs[(NS, f"{NAME}-worker-0", False)] = "epoch 1 worker\n"
    both = run("logs", PROFILE, "--out", "-")
    assert both.exit_code == 0, both.output
    assert f"==> {NAME}-master-0 <==\nepoch 1\n" in both.stdout
    assert f"==> {NAME}-worker-0 <==\nepoch 1 worker\n" in both.stdout
    one = run("logs", PROFILE, "--out", "-", "--pod", f"{NAME}-worker-0")
    assert one.exit_code == 0 and one.stdout == "epoch 1 worker\n"
    wrong = run("logs", PROFILE, "--out", "-", "--pod", "nope")
    assert wrong.exit_code == 2 and "is not a pod of" in wrong.stderr


def _set_phase(api: KubeAPI, phase: str) -> None:
    job = api.kube.get("pytorchjobs", NS, NAME)
    assert job is not None
    job["status"] = {"conditions": [{"type": phase, "status": "True"}]}


def test_submit_wait_polls_until_running(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:  # the operator reports it running after the second pause
            _set_phase(api, "Running")

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    waited = run("submit", PROFILE, "--wait", "--interval", "2")
    assert waited.exit_code == 0, waited.output
    assert slept == [2.0, 2.0] and "Running" in waited.stdout and "Pending" in waited.stdout
    assert api.kube.count("pytorchjobs") == 1
    slept.clear()
    again = run("submit", PROFILE)  # without --wait: no polling, no status lines
    assert again.exit_code == 0 and again.stdout == "" and slept == []


def test_submit_wait_exits_3_when_failed_or_not_running_in_time(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", slept.append)
    gave_up = run("submit", PROFILE, "--wait", "--interval", "1", "--watch-timeout", "2")
    assert gave_up.exit_code == 3, gave_up.output
    assert error_lines(gave_up.stderr)[-2].endswith(f"{NAME}: still Pending after 2 s")
    assert slept == [1.0, 1.0] and api.kube.count("pytorchjobs") == 1
    _set_phase(api, "Failed")
    failed = run("submit", PROFILE, "--wait")
    assert failed.exit_code == 3, failed.output
    assert error_lines(failed.stderr)[-2].endswith(f"{NAME}: Failed (the status above says why)")
    assert "Failed" in failed.stdout
    dry = run("submit", PROFILE, "--wait", "--dry-run", "server")
    assert dry.exit_code == 2 and "--wait goes without --dry-run" in dry.stderr


def test_each_command_loads_the_kubeconfig_once(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit --wait checked the cluster, applied and polled, each in a session of its own:
    the kubeconfig (and an exec plugin's login) was loaded three times or more."""
    from runai_spec import cluster

    loads: list[Path | None] = []
    load = cluster.session._api_client

    def counted(target: cluster.Target, library: Any) -> Any:
        loads.append(target.kubeconfig)
        return load(target, library)

    monkeypatch.setattr(cluster.session, "_api_client", counted)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        _set_phase(api, "Running")

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    waited = run("submit", PROFILE, "--wait", "--interval", "1")
    assert waited.exit_code == 0, waited.output
    assert slept == [1.0] and len(loads) == 1
    for args in (("status", PROFILE, "--watch", "--interval", "1"), ("delete", PROFILE, "--yes")):
        loads.clear()
        assert run(*args).exit_code == 0
        assert len(loads) == 1, args


def _terminate(api: KubeAPI, pod: str, phase: str = "Succeeded") -> None:
    stored = api.kube.get("pods", NS, pod)
    assert stored is not None
    stored["status"]["phase"] = phase
    stored["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}


def test_logs_follow_prints_new_lines_until_the_pods_end(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    master, worker = f"{NAME}-master-0", f"{NAME}-worker-0"
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.add_pod(NAME, NS, "worker", 0)
    api.kube.logs[(NS, master, False)] = "step 1\n"
    api.kube.logs[(NS, worker, False)] = "w 1\n"
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the logs grow between polls, then the pods end
        slept.append(seconds)
        api.kube.logs[(NS, master, False)] += f"step {len(slept) + 1}\n"
        if len(slept) == 2:
            api.kube.logs[(NS, worker, False)] += "w 2\n"
            _terminate(api, master)
            _terminate(api, worker)

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    followed = run("logs", PROFILE, "--out", "-", "-f", "--interval", "3")
    assert followed.exit_code == 0, followed.output
    assert slept == [3.0, 3.0]
    assert followed.stdout == (
        f"==> {master} <==\nstep 1\n==> {worker} <==\nw 1\n"
        f"==> {master} <==\nstep 2\nstep 3\n==> {worker} <==\nw 2\n"
    )
    slept.clear()
    one = run("logs", PROFILE, "--out", "-", "--follow", "--pod", worker, "--tail", "1")
    assert one.exit_code == 0 and one.stdout == "w 2\n" and slept == []  # ended: no polling


def test_logs_follow_is_bounded_and_needs_out_dash(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "step 1\n"
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the container restarts: its new log is shorter
        slept.append(seconds)
        if len(slept) == 1:
            api.kube.logs[(NS, f"{NAME}-master-0", False)] = "again\n"

    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", sleep)
    gave_up = run("logs", PROFILE, "--out", "-", "-f", "--interval", "1", "--watch-timeout", "2")
    assert gave_up.exit_code == 3, gave_up.output
    assert gave_up.stdout == "step 1\nagain\n" and slept == [1.0, 1.0]
    assert error_lines(gave_up.stderr)[0].endswith(f"{NAME}: its pods still run after 2 s")
    to_dir = run("logs", PROFILE, "--out", "somewhere", "--follow")
    assert to_dir.exit_code == 2
    assert error_lines(to_dir.stderr)[0] == (
        "error: --follow: --follow goes with --out - and without --previous"
    )


def test_logs_follow_of_a_job_without_pods_or_not_there(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", slept.append)
    missing = run("logs", PROFILE, "--out", "-", "-f")
    assert missing.exit_code == 3 and slept == []
    assert error_lines(missing.stderr)[0].endswith(f"{NAME}: not found")
    assert run("submit", PROFILE).exit_code == 0
    none_yet = run("logs", PROFILE, "--out", "-", "-f", "--interval", "1", "--watch-timeout", "1")
    assert none_yet.exit_code == 3 and slept == [1.0] and none_yet.stdout == ""
    assert error_lines(none_yet.stderr)[0].endswith(f"{NAME}: has no pods yet after 1 s")
