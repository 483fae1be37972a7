"""What the cluster tests share besides fixtures (kube_fixtures): the multi-node example's
render, the names and CLI runner of conftest, and reading the fake server's state."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import NAME as NAME  # the cluster tests' job name and namespace: conftest's
from conftest import NS as NS
from conftest import ROOT
from conftest import run as run  # the cluster tests' runner: conftest's
from kubeapi import KubeAPI
from runai_spec.cluster import MANAGED_BY_LABEL
from runai_spec.pipeline.workload import prepare_workload

EXAMPLE = ROOT / "examples" / "multi-node" / "profile.yaml"
PROFILE = str(EXAMPLE)
Render = Callable[[], list[dict[str, Any]]]


def error_lines(stderr: str) -> list[str]:
    """stderr without --debug lines (an earlier test's --debug may still be on)."""
    return [ln for ln in stderr.splitlines() if not ln.startswith("debug: ")]


class Sleeps(list[float]):
    """An injected sleep that records instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def render_example(path: Path = EXAMPLE) -> list[dict[str, Any]]:
    key = str(path)
    if key not in _RENDERED:
        _RENDERED[key] = [dict(m) for m in prepare_workload(path).manifests]
    return copy.deepcopy(_RENDERED[key])


def put_foreign_job(api: KubeAPI) -> dict[str, Any]:
    """The example's job stored by another client: without runai-spec's managed-by label."""
    foreign = render_example()[0]
    del foreign["metadata"]["labels"][MANAGED_BY_LABEL]
    return api.kube.put("pytorchjobs", foreign)


def live_job(api: KubeAPI) -> dict[str, Any]:
    """The example's job as the server stores it (it must exist)."""
    job = api.kube.get("pytorchjobs", NS, NAME)
    assert job is not None, f"pytorchjobs/{NS}/{NAME} is not on the server"
    return job
