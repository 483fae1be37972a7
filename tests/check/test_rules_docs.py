"""docs/rules.md is generated from the code and stays in step with it."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from conftest import ROOT
from runai_spec.check.catalogue import RULES
from runai_spec.cli import app
from runai_spec.outputs.report import rules_markdown

runner = CliRunner()
ISSUE_RULES = {
    "image-digest",
    "reserved-field",
    "nccl-transport-env",
    "nccl-debug-temporary",
    "global-batch",
    "nproc-gpus",
    "checkpoint-on-pvc",
    "preemptible-needs-resume",
    "rank0-metrics",
    "ddp-replica-fits",
    "deepspeed-autotune",
    "strategy-allowed",
    "preset-expired",
    "name-length",
    "registry",
    "secret-env",
    "preset-not-granted",
}


def test_docs_rules_md_matches_the_code() -> None:
    committed = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == rules_markdown(), (
        "docs/rules.md is out of date; refresh with:\n  runai-spec rules --format markdown > docs/rules.md"
    )


def test_every_rule_has_a_section_summary_and_docstring() -> None:
    text = rules_markdown()
    for rule in RULES.values():
        assert f"\n## {rule.id}\n" in text
        assert rule.summary and rule.check.__doc__, rule.id


def test_catalogue_covers_the_issue_rule_ids() -> None:
    assert set(RULES) >= ISSUE_RULES


def test_rules_command_lists_every_rule_as_json() -> None:
    result = runner.invoke(app, ["rules", "--format", "json"])
    assert result.exit_code == 0
    assert [r["id"] for r in json.loads(result.stdout)] == list(RULES)
