"""diff PROFILE... --live: a server-side dry-run apply against the live objects, through the
CLI, the real kubernetes client and the fake API server; same formats and exit codes as
the offline diff."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kube_helpers import NAME, NS, PROFILE, Sleeps, error_lines, live_job, put_foreign_job, run
from kubeapi import KubeAPI
from runai_spec import cluster
from runai_spec.outputs.diff import MASK, diff_live, ordered_like

pytest_plugins = ("kube_fixtures",)

SINGLE = str(ROOT / "examples" / "single-gpu" / "profile.yaml")
KEY = f"PyTorchJob/{NS}/{NAME}"
SECRET = "hf_live0nlyS3cretValue"


def worker_container(job: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ][0]
    return container


def submitted(api: KubeAPI) -> dict[str, Any]:
    result = run("submit", PROFILE)
    assert result.exit_code == 0, result.output
    return live_job(api)


# --- exit codes and what shows ---------------------------------------------------------


def test_nothing_live_is_added_and_exits_1(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("diff", PROFILE, "--live", "--kubeconfig", str(kubeconfig), "--format", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert (data["profiles"], data["changed"], data["objects_differing"]) == (1, 1, 1)
    (obj,) = data["results"][0]["objects"]
    assert obj["key"] == KEY and obj["status"] == "added"
    assert data["results"][0]["committed"] == "live"
    assert f'+  name: "{NAME}"' in obj["diff"]
    assert api.kube.count("pytorchjobs") == 0 and api.kube.writes() == []


def test_after_submit_there_is_no_difference(api: KubeAPI, kubeconfig: Path) -> None:
    job = submitted(api)
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    writes = len(api.kube.writes())
    result = run("diff", PROFILE, "--live")  # KUBECONFIG from the environment
    assert result.exit_code == 0, result.output
    assert result.stdout == "1 profile(s), 0 changed, 0 object(s) differ\n"
    assert len(api.kube.writes()) == writes  # a diff stores nothing
    patches = api.kube.sent("PATCH")[1:]  # [0] is the submit
    assert patches and all(r.query["dryRun"] == ["All"] for r in patches)


def test_fields_another_manager_set_and_key_order_are_not_differences(api: KubeAPI, kubeconfig: Path) -> None:
    job = submitted(api)
    # what a defaulting webhook or controller adds under its own field manager: the dry-run
    # apply keeps it too, so both sides have it
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "nlp-lab"}
    api.kube.owners[("pytorchjobs", NS, NAME)]["defaulter"] = {
        ("spec", "runPolicy", "schedulingPolicy", "queue")
    }
    # a server keeps its own key order, which need not be the render's
    for part in (job, job["spec"], job["metadata"]):
        items = list(part.items())
        part.clear()
        part.update(reversed(items))
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 0, result.output
    assert result.stdout == "1 profile(s), 0 changed, 0 object(s) differ\n"


def test_a_change_on_the_cluster_shows_as_a_unified_diff(api: KubeAPI, kubeconfig: Path) -> None:
    container = worker_container(submitted(api))
    container["command"][-1] = "/scratch/elsewhere"
    container["env"].append({"name": "EXTRA_FLAG", "value": "on"})
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert out.startswith(f"--- live ({KEY})\n+++ dry-run apply {PROFILE} ({KEY})\n@@ ")
    assert '-                - "/scratch/elsewhere"\n+                - "/checkpoints"\n' in out
    assert '-                - name: "EXTRA_FLAG"\n' in out
    assert out.endswith("1 profile(s), 1 changed, 1 object(s) differ\n")
    assert api.kube.get("pytorchjobs", NS, NAME) is not None
    assert worker_container(live_job(api))["command"][-1] == "/scratch/elsewhere"  # untouched


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_secret_looking_values_are_masked_in_every_format(api: KubeAPI, kubeconfig: Path, fmt: str) -> None:
    worker_container(submitted(api))["env"].append({"name": "HF_TOKEN", "value": SECRET})
    result = run("diff", PROFILE, "--live", "--format", fmt)
    assert result.exit_code == 1, result.output
    assert SECRET not in result.output
    text = result.stdout
    if fmt == "json":
        data = json.loads(result.stdout)
        (obj,) = data["results"][0]["objects"]
        assert obj["status"] == "changed" and data["errors"] == []
        text = obj["diff"]
    assert f'-                - name: "HF_TOKEN"\n-                  value: "{MASK}"\n' in text
    if fmt == "markdown":
        assert result.stdout.startswith("## runai-spec diff\n")
        assert f"{KEY} (changed)</summary>" in result.stdout and "```diff\n---" in result.stdout


def test_several_profiles_in_one_session(
    api: KubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted(api)
    api.kube.namespaces.add("runai-vision-lab")
    sessions: list[cluster.Session] = []

    class Counted(cluster.Session):
        def __init__(self, target: cluster.Target) -> None:
            super().__init__(target)
            sessions.append(self)

    monkeypatch.setattr(cluster.submit, "Session", Counted)  # where live_objects_all looks it up
    result = run("diff", PROFILE, SINGLE, "--live", "--format", "json")
    assert result.exit_code == 1, result.output
    assert len(sessions) == 1
    data = json.loads(result.stdout)
    assert [(r["profile"], r["changed"]) for r in data["results"]] == [(PROFILE, False), (SINGLE, True)]
    assert data["results"][1]["objects"][0]["status"] == "added"


def test_an_object_runai_spec_did_not_create_is_noted(api: KubeAPI, kubeconfig: Path) -> None:
    put_foreign_job(api)
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 1, result.output
    assert f"note: pytorchjobs/{NS}/{NAME}: exists and was not created by runai-spec" in result.stderr
    assert '+    app.kubernetes.io/managed-by: "runai-spec"' in result.stdout


# --- refusals: nothing sent, one line ----------------------------------------------------


@pytest.mark.parametrize("args", [["--live", "--against", "."], [], ["--against", ".", "--context", "fake"]])
def test_usage_errors_exit_2_with_one_line_and_a_hint(
    api: KubeAPI, kubeconfig: Path, args: list[str]
) -> None:
    result = run("diff", PROFILE, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: --") and lines[1].startswith("hint: ")
    assert result.stdout == "" and api.kube.requests == []


def test_a_profile_with_error_findings_sends_nothing(
    api: KubeAPI, kubeconfig: Path, base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["env"] = {"NCCL_SOCKET_IFNAME": "eth0"}
    bad = write_profile(base_profile)
    result = run("diff", PROFILE, str(bad), "--live", "--format", "json")
    assert result.exit_code == 1, result.output
    assert "[nccl-transport-env]" in result.stderr or "[reserved-field]" in result.stderr
    assert result.stderr.startswith("error: ")
    # CI reading --format json still gets a JSON object, with what stopped the diff
    report = json.loads(result.stdout)
    assert report["results"] == [] and len(report["errors"]) == 1
    assert "[nccl-transport-env]" in report["errors"][0]
    assert api.kube.requests == []


def test_bad_input_exits_2_and_sends_nothing(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    result = run("diff", PROFILE, str(tmp_path / "missing.yaml"), "--live")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {tmp_path / 'missing.yaml'}")
    assert api.kube.requests == []
    as_json = run("diff", PROFILE, str(tmp_path / "missing.yaml"), "--live", "--format", "json")
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["errors"][0].startswith(f"error: {tmp_path / 'missing.yaml'}")
    assert api.kube.requests == []


@pytest.mark.parametrize("verb", ["get", "patch"])
def test_forbidden_exits_3_with_one_line(api: KubeAPI, kubeconfig: Path, verb: str) -> None:
    api.kube.forbidden.add((verb, "pytorchjobs"))
    result = run("diff", PROFILE, "--live", "--debug")
    assert result.exit_code == 3, result.output
    lines = error_lines(result.stderr)
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert lines[0].startswith(f"error: cluster: pytorchjobs/{NS}/{NAME}: forbidden: ")
    assert "Traceback" not in result.output and api.kube.token not in result.output
    assert "debug: runai_spec.cluster: GET /apis/kubeflow.org/v1" in result.stderr
    assert result.stdout == ""


def test_a_cluster_without_the_crd_exits_3(api: KubeAPI, kubeconfig: Path) -> None:
    api.kube.crd_installed = False
    result = run("diff", PROFILE, "--live")
    assert result.exit_code == 3, result.output
    assert "does not serve kubeflow.org/v1 pytorchjobs" in error_lines(result.stderr)[0]
    assert result.stdout == "" and api.kube.writes() == []


def test_unreachable_cluster_exits_3_without_a_traceback(
    unreachable: tuple[Path, str], cli_sleeps: Sleeps
) -> None:
    config, _ = unreachable
    result = run("diff", PROFILE, "--live", "--kubeconfig", str(config))
    assert result.exit_code == 3, result.output
    lines = error_lines(result.stderr)
    assert len(lines) == 2 and lines[0].startswith("error: cluster: cannot connect to http://127.0")
    assert "Traceback" not in result.output and cli_sleeps == []  # refused: not retried


def test_unauthorised_exits_3(api: KubeAPI, tmp_path: Path) -> None:
    config = api.kubeconfig(tmp_path / "kc", token="not-the-token")
    result = run("diff", PROFILE, "--live", "--kubeconfig", str(config))
    assert result.exit_code == 3, result.output
    assert error_lines(result.stderr)[0] == (
        "error: cluster: unauthorised: the API server refused the credentials"
    )
    assert "not-the-token" not in result.output


# --- the comparison itself ---------------------------------------------------------------


def test_key_order_follows_the_render_then_sorted() -> None:
    like = {"b": 1, "a": {"y": 1, "x": 2}, "l": [{"n": 1, "m": 2}]}
    value = {"z": 0, "a": {"x": 2, "w": 3, "y": 1}, "b": 1, "l": [{"m": 2, "n": 1}, {"q": 1, "p": 2}]}
    out = ordered_like(value, like)
    assert list(out) == ["b", "a", "l", "z"] and list(out["a"]) == ["y", "x", "w"]
    assert [list(i) for i in out["l"]] == [["n", "m"], ["p", "q"]] and out == value


def test_diff_live_reports_added_changed_and_nothing_for_equal_objects() -> None:
    job = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "n"},
        "data": {"k": "1"},
    }
    other = dict(job, metadata={"name": "b", "namespace": "n"})
    changed = dict(job, data={"k": "2"})
    result = diff_live("p.yaml", [job, other], [(dict(job), job), (None, other)])
    assert [(o.key, o.status) for o in result.objects] == [("ConfigMap/n/b", "added")]
    result = diff_live("p.yaml", [job], [(changed, job)])
    assert [o.status for o in result.objects] == ["changed"] and '-  k: "2"' in result.objects[0].diff
