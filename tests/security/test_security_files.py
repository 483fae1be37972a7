"""Files and names from outside (a merge request's committed folder, the API server) are
never followed, printed or written where they should not be (issue 12, items 3, 11, 13)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.test_cluster_ops import running_job
from conftest import ROOT, run_module
from kube_helpers import NAME, NS, Render
from kubeapi import KubeAPI
from runai_spec.cluster import Target, save_logs
from runai_spec.errors import ClusterError

pytest_plugins = ("kube_fixtures",)

KEY = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLXNlY3JldC1rZXktZGF0YQ=="
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters: []
users:
- name: ci
  user:
    client-key-data: {KEY}
"""
PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"


def committed(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    return folder, folder / f"{NAME}.yaml"


def test_diff_against_never_follows_a_committed_symlink(tmp_path: Path) -> None:
    folder, target = committed(tmp_path)
    secret = tmp_path / "kubeconfig"
    secret.write_text(KUBECONFIG)
    target.symlink_to(secret)
    for fmt in ("text", "markdown", "json"):
        result = run_module("diff", str(PROFILE), "--against", str(folder), "--format", fmt)
        assert result.returncode == 2, result.stderr
        assert KEY not in result.stdout + result.stderr
        assert "is a symbolic link" in result.stderr


def test_diff_against_never_prints_a_file_that_is_not_a_manifest_of_ours(tmp_path: Path) -> None:
    folder, target = committed(tmp_path)
    target.write_text(KUBECONFIG)
    result = run_module("diff", str(PROFILE), "--against", str(folder), "--format", "markdown")
    assert result.returncode == 2
    assert KEY not in result.stdout + result.stderr
    assert "is not a manifest runai-spec renders" in result.stderr


def test_a_committed_render_still_diffs_clean(tmp_path: Path) -> None:
    folder, target = committed(tmp_path)
    shutil.copy(ROOT / "examples" / "multi-node" / "manifest.yaml", target)
    result = run_module("diff", str(PROFILE), "--against", str(folder))
    assert result.returncode == 0, result.stderr


def test_a_fifo_as_the_profile_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    result = run_module("validate", str(fifo), timeout=30)  # blocked forever before the fix
    assert result.returncode == 2
    assert "is not a regular file" in result.stderr


def test_a_profile_through_a_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "profile.yaml"
    link.symlink_to(PROFILE)
    result = run_module("validate", str(link))
    assert result.returncode == 2 and "is a symbolic link" in result.stderr


@pytest.mark.parametrize("evil", ["../escaped", "/tmp/absolute", "a/../../b"])
def test_logs_never_write_outside_the_folder_for_a_server_chosen_pod_name(
    api: KubeAPI, target: Target, rendered: Render, tmp_path: Path, evil: str
) -> None:
    running_job(api, rendered)
    pod = api.kube.add_pod(NAME, NS, "master", 0)
    pod["metadata"]["name"] = evil
    api.kube.logs[(NS, evil, False)] = "pwned\n"
    out = tmp_path / "deep" / "logs"
    with pytest.raises(ClusterError) as info:
        save_logs(NAME, NS, out, target)
    assert "which is not a pod name" in info.value.lines()[0]
    written = [p for p in tmp_path.rglob("*.log")]
    assert written == [] and not Path("/tmp/absolute.log").exists()


def test_render_reads_and_writes_no_bytecode_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    poisoned = cache / "runai-spec" / "jinja-0.1.0"
    poisoned.mkdir(parents=True)
    for name in ("__jinja2_poison.cache", "x.cache"):
        (poisoned / name).write_bytes(b"hostNetwork: true\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "runai_spec", "render", str(PROFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (ROOT / "examples" / "multi-node" / "manifest.yaml").read_text()
    assert sorted(p.name for p in poisoned.iterdir()) == ["__jinja2_poison.cache", "x.cache"]
