"""The cluster tests' fixtures: the fake API server, a kubeconfig for it, a fast Target, a
server that does not answer, the example's render (a plugin: `pytest_plugins`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_helpers import Render, Sleeps, render_example
from kubeapi import KubeAPI, seed_site
from runai_spec import cluster
from runai_spec.cluster import RetryPolicy, Target


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    server = KubeAPI()
    seed_site(server.kube)  # a cluster matching the shipped site file (submit checks it first)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(api: KubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = api.kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def target(kubeconfig: Path, sleeps: Sleeps) -> Target:
    return Target(
        kubeconfig=kubeconfig,
        # a read timeout a loaded CI machine cannot reach by accident (the fake server is a
        # thread of the test's process, which a busy machine can pause for over a second)
        timeout=(2.0, 2.0),
        sleep=sleeps,
        retry=RetryPolicy(attempts=4, base_delay=0.1, max_delay=2.0, max_total=5.0),
    )


@pytest.fixture
def cli_sleeps(monkeypatch: pytest.MonkeyPatch, sleeps: Sleeps) -> Sleeps:
    """The CLI's Target sleeps into `sleeps` (its own retry policy, no real waiting)."""
    monkeypatch.setattr(cluster, "Target", functools.partial(cluster.Target, sleep=sleeps))
    return sleeps


@pytest.fixture
def unreachable(tmp_path: Path) -> tuple[Path, str]:
    """A kubeconfig (and its token) for a server that has stopped: connections are refused."""
    server = KubeAPI()
    config = server.kubeconfig(tmp_path / "unreachable-kubeconfig")
    server.stop()
    return config, server.kube.token


@pytest.fixture
def rendered() -> Render:
    """A fresh copy of the multi-node example's manifests on each call."""
    return render_example
