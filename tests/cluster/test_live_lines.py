"""validate --live (issue 40 item 6): each finding carries the profile's file:line of the field
its object comes from, and a pass lists the checks that ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kube_helpers import run
from kubeapi import KubeAPI, seed_site
from runai_spec.cluster.checks import LIVE_CHECKED
from runai_spec.load.profile import load_profile

pytest_plugins = ("kube_fixtures",)
MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"


@pytest.fixture
def site(api: KubeAPI, kubeconfig: Path, cli_sleeps: Any) -> KubeAPI:
    seed_site(api.kube)
    return api


def test_a_pass_lists_the_checks_that_ran(site: KubeAPI) -> None:
    result = run("validate", "--live", str(MULTI))
    assert result.exit_code == 0, result.output
    assert f"live checks run: {', '.join(LIVE_CHECKED)}" in result.output
    assert "topologies.kai.scheduler" in LIVE_CHECKED and "namespaces" in LIVE_CHECKED


def test_a_live_finding_names_the_line_of_its_field(site: KubeAPI) -> None:
    loaded = load_profile(MULTI)
    ns = [p for p in site.kube.site_objects if p.startswith("/api/v1/namespaces/") and p.count("/") == 4]
    for path in ns:
        del site.kube.site_objects[path]
    result = run("validate", "--live", str(MULTI))
    [line] = [x for x in result.output.splitlines() if "[live-namespace]" in x]
    assert line.startswith(f"error: {MULTI}:{loaded.line('project')}: namespace/"), line
