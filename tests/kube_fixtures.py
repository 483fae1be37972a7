"""Fixtures for the cluster tests: the fake API server, a kubeconfig for it, a fast Target."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeapi import KubeAPI
from runai_spec.cluster import RetryPolicy, Target
from runai_spec.workload import prepare_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "multi-node" / "profile.yaml"


class Sleeps(list[float]):
    """An injected sleep that records instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def api() -> Iterator[KubeAPI]:
    server = KubeAPI()
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
    return Target(kubeconfig=kubeconfig, timeout=(2.0, 0.5), sleep=sleeps,
                  retry=RetryPolicy(attempts=4, base_delay=0.1, max_delay=2.0, max_total=5.0))


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def render_example(path: Path = EXAMPLE) -> list[dict[str, Any]]:
    key = str(path)
    if key not in _RENDERED:
        _RENDERED[key] = [dict(m) for m in prepare_workload(path).manifests]
    return copy.deepcopy(_RENDERED[key])


@pytest.fixture
def rendered() -> Callable[..., list[dict[str, Any]]]:
    """A fresh copy of the multi-node example's manifests on each call."""
    return render_example
