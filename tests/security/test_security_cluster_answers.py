"""Issue 23, items 2 and 6: a hostile cluster answer (an odd replica-index label, a pod name
or log line chosen by the server) never makes `status` or `logs` exit 70, and `logs --out
DIR` never writes through a link planted in DIR nor outside DIR."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.test_cluster_ops import running_job
from conftest import examples
from kube_helpers import NAME, NS, PROFILE, Render, run
from kubeapi import KubeAPI
from runai_spec.cluster.objects import replica_index
from runai_spec.errors import EXIT_INTERNAL

pytest_plugins = ("kube_fixtures",)

INDEX_LABEL = "training.kubeflow.org/replica-index"
TYPE_LABEL = "training.kubeflow.org/replica-type"


# --- item 6: a replica-index label that str.isdigit accepts and int() does not ------------


@pytest.mark.parametrize(
    ("label", "index"),
    [("²", 0), ("١", 0), ("٣٤", 0), ("𝟘", 0), ("3", 3), ("", 0), ("-1", 0), (" 2", 0), ("9" * 5000, 0)],
)
def test_a_replica_index_that_is_no_ascii_number_reads_as_zero(label: str, index: int) -> None:
    assert replica_index({INDEX_LABEL: label}) == index


@pytest.mark.parametrize("command", ["status", "logs"])
def test_a_superscript_replica_index_label_is_no_internal_error(
    api: KubeAPI, kubeconfig: Path, rendered: Render, tmp_path: Path, command: str
) -> None:
    running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    worker = api.kube.add_pod(NAME, NS, "worker", 0)
    worker["metadata"]["labels"][INDEX_LABEL] = "²"
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "[rank0]:epoch 1\n"
    args = [command, PROFILE] + (["--out", str(tmp_path / "logs")] if command == "logs" else [])
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


# --- item 2: logs --out DIR never writes through a link planted in DIR --------------------


def _one_pod_with_rank_lines(api: KubeAPI, rendered: Render) -> str:
    running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    pod = f"{NAME}-master-0"
    api.kube.logs[(NS, pod, False)] = "agent line\n[rank0]:hello 0\n[rank1]:hello 1\n"
    return pod


def test_logs_never_write_rank_files_through_a_link_planted_as_the_pod_folder(
    api: KubeAPI, kubeconfig: Path, rendered: Render, tmp_path: Path
) -> None:
    pod = _one_pod_with_rank_lines(api, rendered)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rank-0.log").write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / pod).symlink_to(elsewhere)
    result = run("logs", PROFILE, "--out", str(out))
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: {out / pod}: is a link or not a folder; no rank log is written through it"], (
        result.stderr
    )
    assert "\nhint: " in result.stderr and "Traceback" not in result.output
    assert sorted(p.name for p in elsewhere.iterdir()) == ["rank-0.log"]
    assert (elsewhere / "rank-0.log").read_text() == "precious\n"


def test_logs_replace_a_link_planted_at_a_rank_file_instead_of_writing_through_it(
    api: KubeAPI, kubeconfig: Path, rendered: Render, tmp_path: Path
) -> None:
    pod = _one_pod_with_rank_lines(api, rendered)
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    hard = tmp_path / "hard.txt"
    hard.write_text("hard\n")
    out = tmp_path / "out"
    (out / pod).mkdir(parents=True)
    (out / pod / "rank-0.log").symlink_to(precious)
    os.link(hard, out / pod / "rank-1.log")  # a hard link: written in place, it changes hard.txt
    result = run("logs", PROFILE, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert precious.read_text() == "precious\n" and hard.read_text() == "hard\n"
    assert not (out / pod / "rank-0.log").is_symlink()
    assert (out / pod / "rank-0.log").read_text() == "hello 0\n"
    assert (out / pod / "rank-1.log").read_text() == "hello 1\n"
    assert sorted(p.name for p in (out / pod).iterdir()) == ["rank-0.log", "rank-1.log"]


# --- property: whatever the server names its pods, labels them and logs, no exit 70 and no
# file outside --out ------------------------------------------------------------------------

HOSTILE = [
    "../",
    "..",
    "/",
    ".",
    "\x00",
    "\n",
    "\r",
    "\x1b[2J",
    "\u2028",
    "\u202e",
    "²",
    "١",
    "[rank",
    "]:",
    "[rank0]:",
    "[rank../../x]:",
    "[rank999999]:",
    "[rank²]:",
    "%2F",
    "rank-0.log",
    "-",
    "a",
    "0",
    " ",
    "\\",
    "~",
    "$(HOME)",
    "{{x}}",
    "é",
    "\t",
]
hostile_text = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=4), max_size=8).map("".join)
pod_names = st.one_of(
    hostile_text,
    st.sampled_from(
        [
            f"{NAME}-master-0",
            "../escape",
            "/tmp/abs",
            "a/b",
            "..",
            ".",
            "x" * 300,
            "ok.name",
            "-bad",
            "rank-0.log",
        ]
    ),
)
log_lines = st.lists(
    st.one_of(
        hostile_text,
        st.builds("[rank{}]:{}".format, st.integers(0, 10**7) | st.text(max_size=3), hostile_text),
    ),
    max_size=12,
).map("\n".join)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=pod_names, index=st.sampled_from(HOSTILE) | hostile_text, role=hostile_text, log=log_lines)
def test_hostile_pod_names_labels_and_log_lines_never_crash_nor_escape_the_folder(
    api: KubeAPI,
    kubeconfig: Path,
    rendered: Render,
    tmp_path: Path,
    name: str,
    index: str,
    role: str,
    log: str,
) -> None:
    with api.kube.lock:
        for key in [k for k in api.kube.objects if k[0] == "pods"]:
            del api.kube.objects[key]
        api.kube.logs.clear()
    if api.kube.get("pytorchjobs", NS, NAME) is None:
        running_job(api, rendered)
    api.kube.add_pod(NAME, NS, "master", 0)
    pod = api.kube.add_pod(NAME, NS, "worker", 0)
    api.kube.objects.pop(("pods", NS, pod["metadata"]["name"]))
    pod["metadata"].update(name=name)
    pod["metadata"]["labels"].update({INDEX_LABEL: index, TYPE_LABEL: role})
    api.kube.put("pods", pod, manager="kubelet")
    api.kube.logs[(NS, name, False)] = log
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = log

    base = tmp_path / "case"
    base.mkdir(exist_ok=True)
    before = set(tmp_path.rglob("*")) - set(base.rglob("*")) - {base}
    out = base / "out"
    for args in (
        ["status", PROFILE],
        ["logs", PROFILE, "--out", str(out)],
        ["logs", PROFILE, "--out", "-"],
        ["logs", PROFILE, "--out", "-", "--follow", "--watch-timeout", "0"],
    ):
        result = run(*args)
        assert result.exit_code != EXIT_INTERNAL, (args, result.output)
        assert result.exit_code in (0, 2, 3), (args, result.output)
        assert "Traceback" not in result.output
    after = set(tmp_path.rglob("*")) - set(base.rglob("*")) - {base}
    assert after == before  # nothing written beside the folder
    for path in base.rglob("*"):
        assert path == out or out in path.parents, path
        assert not path.is_symlink()
