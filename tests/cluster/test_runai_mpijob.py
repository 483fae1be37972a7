"""submit --via runai of `launcher: mpi` (issue 39 item 4): Workloads V2 takes the rendered MPIJob
as it is (Run:ai's "Supported Workload Types" registers Kubeflow's MPIJob beside PyTorchJob)."""

from __future__ import annotations

from pathlib import Path

import yaml

import runai_schemas
from kube_helpers import run
from mpi_presets import mpi_presets, mpi_profile
from runaiapi import RunaiAPI

pytest_plugins = ("kube_fixtures", "runai_fixtures")


def test_submit_via_runai_sends_the_rendered_mpijob_unchanged(
    runai_site: RunaiAPI, presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    mpi_presets(presets_dir, _engineer_key)
    profile = str(mpi_profile(tmp_path))
    rendered = run("render", profile)
    assert rendered.exit_code == 0, rendered.stderr
    (job,) = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "MPIJob"]
    result = run("submit", profile)
    assert result.exit_code == 0, result.stderr
    assert runai_site.state.only()["rawManifest"] == job
    (post,) = runai_site.state.sent("POST", "/api/v2/workloads")
    assert runai_schemas.errors(runai_schemas.WORKLOAD_V2_CREATE, post.body) == []
