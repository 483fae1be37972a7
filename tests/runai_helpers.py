"""Helpers of the Run:ai submission tests: the project the example profile names, a site that
submits through a fake control plane, the render, the error lines, and the credentials check."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kube_helpers import PROFILE, error_lines, run
from runai_spec.cluster import runai_api
from runai_spec.load.registry import ApprovedSite, PresetRegistry
from runai_spec.load.site import SiteSubmit
from runaiapi import CLIENT_SECRET, RunaiAPI

PROJECT, PROJECT_ID = "nlp-lab", "8"  # the multi-node example's project, as the fake seeds it
CREDENTIAL_ENV = (
    runai_api.ENV_CLIENT_ID,
    runai_api.ENV_CLIENT_SECRET,
    runai_api.ENV_ACCESS_KEY_FILE,
    runai_api.ENV_CLI,
)


def use_site(monkeypatch: pytest.MonkeyPatch, submit: SiteSubmit) -> None:
    """The shipped (signed) site, with SUBMIT as its submit field."""
    original = PresetRegistry.approved_site

    def approved_site(self: PresetRegistry) -> ApprovedSite:
        approved = original(self)
        return approved._replace(site=approved.site.model_copy(update={"submit": submit}))

    monkeypatch.setattr(PresetRegistry, "approved_site", approved_site)


def rendered_job() -> dict[str, Any]:
    """`runai-spec render`'s PyTorchJob, as its stdout has it."""
    result = run("render", PROFILE)
    assert result.exit_code == 0, result.stderr
    (job,) = [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "PyTorchJob"]
    return dict(job)


def problems(stderr: str) -> list[str]:
    """The lines from the first `error:` on (the render's info findings come first)."""
    lines = [ln for ln in error_lines(stderr) if not ln.startswith(("note:", "info:"))]
    first = next((i for i, ln in enumerate(lines) if ln.startswith("error:")), len(lines))
    return lines[first:]


def credentials_absent(text: str, plane: RunaiAPI) -> None:
    assert CLIENT_SECRET not in text
    for token in plane.state.tokens | plane.state.static_tokens:
        assert token not in text
