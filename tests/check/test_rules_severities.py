"""`rules` lists every severity a rule reports, and validate reports no other (issue 26
item 9): a rule that warns for a milder case says so in the catalogue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from check.test_rules_cases import CASE_FILES, case_id, findings_of
from conftest import EXAMPLES as SHIPPED_EXAMPLES
from conftest import ROOT, run

EXAMPLES = [ROOT / "examples" / e / "profile.yaml" for e in SHIPPED_EXAMPLES]


@pytest.fixture(scope="module")
def listed() -> dict[str, list[str]]:
    result = run("rules", "--format", "json")
    assert result.exit_code == 0
    return {r["id"]: r["severities"] for r in json.loads(result.stdout)}


@pytest.mark.parametrize(
    "path", [*CASE_FILES, *EXAMPLES], ids=[*map(case_id, CASE_FILES), *(p.parent.name for p in EXAMPLES)]
)
def test_validate_reports_only_the_severities_rules_lists(listed: dict[str, list[str]], path: Path) -> None:
    findings, _ = findings_of(path)
    wrong = [
        f"{f.rule}: {f.severity} (rules lists {listed[f.rule]})"
        for f in findings
        if f.rule in listed and f.severity not in listed[f.rule]
    ]
    assert wrong == []


def test_the_text_and_markdown_catalogues_show_the_milder_severities() -> None:
    text = run("rules").stdout
    assert any(ln.startswith("global-batch") and " error/warning " in ln for ln in text.splitlines()), text
    markdown = run("rules", "--format", "markdown").stdout
    assert "| [`global-batch`](#global-batch) | error (or warning) |" in markdown


def test_an_unapproved_data_source_is_its_own_rule(tmp_path: Path) -> None:
    result = run("validate", str(ROOT / "tests" / "rules" / "data-source" / "fail.yaml"))
    assert "'my-bucket' is not an approved data source [data-source]" in result.stderr
    assert "[checkpoint-on-pvc]" not in result.stderr
