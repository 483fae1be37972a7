"""`validate --live` checks the KAI Topology object the site's placement names (issue 25 item 5),
against the fake API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kube_helpers import run
from kubeapi import KubeAPI, seed_site
from runai_spec.load.registry import PresetRegistry

pytest_plugins = ("kube_fixtures",)
MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"
SINGLE = ROOT / "examples" / "single-node" / "profile.yaml"
NAME = PresetRegistry().site().topology.name  # type: ignore[union-attr]
TOPOLOGY = f"/apis/kai.scheduler/v1alpha1/topologies/{NAME}"


@pytest.fixture
def site(api: KubeAPI, kubeconfig: Path, cli_sleeps: Any) -> KubeAPI:
    seed_site(api.kube)
    return api


def _live_lines(profile: Path) -> tuple[int, list[str]]:
    result = run("validate", "--live", str(profile))
    return result.exit_code, [x for x in result.output.splitlines() if "[live-" in x]


def test_a_missing_topology_is_an_error_for_multi_node_jobs_only(site: KubeAPI) -> None:
    assert _live_lines(MULTI) == (0, [])
    del site.kube.site_objects[TOPOLOGY]
    code, lines = _live_lines(MULTI)
    assert code == 1 and len(lines) == 1, lines
    assert (
        f"topology/{NAME}: the Topology {NAME} (topologies.kai.scheduler, what KAI v0.17.0 reads) "
        "does not exist [live-topology]"
    ) in lines[0]
    assert _live_lines(SINGLE) == (0, [])  # one pod: no placement, nothing to check
    assert not site.kube.writes()


def test_a_placement_level_the_topology_lacks_is_an_error(site: KubeAPI) -> None:
    site.kube.site_objects[TOPOLOGY]["spec"]["levels"] = [{"nodeLabel": "kubernetes.io/hostname"}]
    code, lines = _live_lines(MULTI)
    assert code == 1 and len(lines) == 1 and "scc.example.org/ib-leaf is not a level" in lines[0], lines


def test_a_forbidden_topology_read_is_one_warning(site: KubeAPI) -> None:
    site.kube.denied.add("topologies.kai.scheduler")
    code, lines = _live_lines(MULTI)
    assert code == 0 and len(lines) == 1, lines
    assert "not checked: forbidden (topologies.kai.scheduler)" in lines[0]
