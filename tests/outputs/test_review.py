"""plan PROFILE: the review request carries the numbers the engineer asks for.

In-process (conftest.run), not the executable (issue 29): tests/project/test_core_imports.py
runs `runai-spec plan` in a process of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, run


@pytest.mark.parametrize("layout", ["single-gpu", "single-node", "multi-node", "elastic"])
def test_plan_markdown_and_json(layout: str) -> None:
    profile = str(ROOT / "examples" / layout / "profile.yaml")
    res = run("plan", profile)
    assert res.exit_code == 0, res.output
    md = res.stdout
    for part in (
        "# Review request",
        "| world size |",
        "## Batch arithmetic",
        "## Memory estimate per GPU",
        "## Preset and approval",
        "```sh",
        "```mermaid",
        "## Validation checklist",
        "- [ ] ",
    ):
        assert part in md, part
    res = run("plan", profile, "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["world_size"] == data["pods"] * data["processes_per_pod"]
    ranks = [r for pod in data["topology"] for r in pod["ranks"]]
    assert ranks == list(range(len(ranks)))
    assert data["preset"]["approved_by"]


def test_plan_bad_input_exits_2(tmp_path: Path) -> None:
    res = run("plan", str(tmp_path / "nope.yaml"))
    assert res.exit_code == 2 and res.stderr.startswith("error:")
