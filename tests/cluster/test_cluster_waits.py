"""The cluster commands' waits (issue 26 item 6): a request timeout and a line per retry, the
same answer for Pending pods from `logs --out DIR` and `--out -`, `--follow` saying Pending,
and `delete` asking only after it has read the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import NAME, NS
from kube_helpers import PROFILE, Sleeps, error_lines, run
from kubeapi import KubeAPI

pytest_plugins = ("kube_fixtures",)


def test_a_server_that_never_answers_is_bounded_by_request_timeout_and_says_so(
    api: KubeAPI, kubeconfig: Path, cli_sleeps: Sleeps
) -> None:
    api.kube.inject(method="GET", path_contains="/pytorchjobs/", delay=5.0, keep=True)
    result = run("status", NAME, "--project", "nlp-lab", "--request-timeout", "0.3")
    assert result.exit_code == 3, result.output
    notes = [ln for ln in error_lines(result.stderr) if ln.startswith("note: ")]
    assert len(notes) == len(cli_sleeps) >= 1, result.stderr
    assert notes[0].startswith(
        f"note: GET /apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs/"
        f"{NAME}: no answer from http://127.0.0.1:"
    )
    assert notes[0].endswith(
        f"within 0.3 s (--request-timeout); retrying in {cli_sleeps[0]:g} s (attempt 2 of at most 5)"
    ), notes[0]
    errors = [ln for ln in error_lines(result.stderr) if ln.startswith("error: ")]
    assert len(errors) == 1 and "gave up after" in errors[0] and "within 0.3 s" in errors[0]


def test_request_timeout_goes_with_the_cluster(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("diff", PROFILE, "--against", ".", "--request-timeout", "1")
    assert result.exit_code == 2 and "--request-timeout" in result.stderr
    assert run("validate", "--live", PROFILE, "--request-timeout", "5").exit_code == 0


def test_logs_of_pending_pods_is_exit_3_whether_saved_or_printed(
    api: KubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    assert run("submit", PROFILE).exit_code == 0
    api.kube.add_pod(NAME, NS, "master", 0, phase="Pending")
    api.kube.add_pod(NAME, NS, "worker", 0, phase="Pending")
    saved = run("logs", PROFILE, "--out", str(tmp_path / "logs"))
    printed = run("logs", PROFILE, "--out", "-")
    assert saved.exit_code == printed.exit_code == 3, printed.output
    for result in (saved, printed):
        lines = error_lines(result.stderr)
        assert [ln.split(":")[0] for ln in lines if ln.startswith("skipped")] == [
            f"skipped {NAME}-master-0",
            f"skipped {NAME}-worker-0",
        ]
        assert "no pod had a log to" in lines[-2] and lines[-1].startswith("hint: `runai-spec status`")
    assert printed.stdout == ""
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "epoch 1\n"  # one has started: exit 0
    assert run("logs", PROFILE, "--out", "-").exit_code == 0
    assert run("logs", PROFILE, "--out", str(tmp_path / "logs")).exit_code == 0


def test_follow_says_pending_pods_are_pending(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", lambda seconds: None)
    assert run("submit", PROFILE).exit_code == 0
    api.kube.add_pod(NAME, NS, "master", 0, phase="Pending")
    api.kube.add_pod(NAME, NS, "worker", 0, phase="Pending")
    args = ("logs", PROFILE, "--out", "-", "-f", "--interval", "1", "--watch-timeout", "1")
    result = run(*args)
    assert result.exit_code == 3
    assert [ln for ln in error_lines(result.stderr) if ln.startswith("error")][0].endswith(
        f"{NAME}: its pods are still Pending after 1 s"
    ), result.stderr
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "epoch 1\n"
    result = run(*args)
    assert [ln for ln in error_lines(result.stderr) if ln.startswith("error")][0].endswith(
        f"{NAME}: 1 of its 2 pods are still Pending, the others still run after 1 s"
    )


def test_delete_asks_only_after_reading_the_cluster(
    api: KubeAPI, kubeconfig: Path, unreachable: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runai_spec.cli.common.stdin_is_terminal", lambda: True)
    config, _ = unreachable
    down = run("delete", PROFILE, "--kubeconfig", str(config), input="y\n")
    assert down.exit_code == 3 and "delete " not in down.output, down.output
    missing = run("delete", PROFILE, input="y\n")
    assert missing.exit_code == 3 and "not found" in missing.stderr
    assert "delete " not in missing.output and api.kube.sent("DELETE") == []
    assert run("submit", PROFILE).exit_code == 0
    declined = run("delete", PROFILE, input="n\n")
    assert declined.exit_code == 0 and f"delete pytorchjobs/{NS}/{NAME}" in declined.output
    assert api.kube.count("pytorchjobs") == 1 and api.kube.sent("DELETE") == []
