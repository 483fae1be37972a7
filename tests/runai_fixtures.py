"""Fixtures and helpers of the Run:ai submission tests (a pytest plugin, as kube_fixtures is):
the fake control plane (runaiapi.py), a site that submits through it, an access key, and
sleeps recorded instead of slept."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from kube_helpers import Sleeps
from runai_helpers import CREDENTIAL_ENV, use_site
from runai_spec.cluster import runai_api
from runai_spec.cluster.runai_api import RunaiTarget
from runai_spec.load.site import RunaiControlPlane, SiteSubmit
from runaiapi import CLIENT_ID, CLIENT_SECRET, CLUSTER_NAME, RunaiAPI


@pytest.fixture
def plane() -> Iterator[RunaiAPI]:
    server = RunaiAPI()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    """The CLI's RunaiTarget sleeps into a list (its own retry policy, no real waiting)."""
    recorded = Sleeps()
    monkeypatch.setattr(runai_api, "RunaiTarget", functools.partial(RunaiTarget, sleep=recorded))
    return recorded


@pytest.fixture
def access_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(runai_api.ENV_CLIENT_ID, CLIENT_ID)
    monkeypatch.setenv(runai_api.ENV_CLIENT_SECRET, CLIENT_SECRET)


@pytest.fixture
def runai_site(
    plane: RunaiAPI, monkeypatch: pytest.MonkeyPatch, access_key: None, sleeps: Sleeps
) -> RunaiAPI:
    """A site that submits through the fake control plane, by the cluster's name."""
    use_site(
        monkeypatch, SiteSubmit(via="runai", runai=RunaiControlPlane(url=plane.url, cluster=CLUSTER_NAME))
    )
    return plane
