"""docs/rules.md is generated from the one rule registry and stays in step with it."""

from __future__ import annotations

import json

from conftest import ROOT, run
from runai_spec.check.catalogue import RULES
from runai_spec.check.rules import REGISTRY, declared
from runai_spec.outputs.report import catalogue, rules_markdown

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


def test_every_registered_rule_has_a_section_summary_and_details() -> None:
    text = rules_markdown()
    listed = [r.id for r in catalogue()]
    assert sorted(listed) == sorted(REGISTRY), "a registered rule is missing from `rules` and docs/rules.md"
    for rule in REGISTRY.values():
        assert f"\n## {rule.id}\n" in text
        assert rule.summary and rule.doc, rule.id


def test_catalogue_covers_the_issue_rule_ids() -> None:
    assert set(RULES) >= ISSUE_RULES


def test_rules_command_lists_every_rule_as_json_the_live_checks_marked_live() -> None:
    result = run("rules", "--format", "json")
    assert result.exit_code == 0
    listed = json.loads(result.stdout)
    assert [r["id"] for r in listed] == [r.id for r in catalogue()]
    live = {r["id"] for r in listed if r["live"]}
    assert live == {r.id for r in declared("live")}
    assert {"live-pvc", "live-forbidden", "live-crd-schema"} <= live
    assert not live & set(RULES)
    assert {r["runs"] for r in listed if r["live"]} == {"validate --live, submit"}


def test_rules_text_marks_the_live_checks() -> None:
    result = run("rules")
    lines = {ln.split()[0]: ln for ln in result.stdout.splitlines()}
    assert "[live] " in lines["live-queue"] and "error/warning" in lines["live-queue"]
    assert "[live]" not in lines["image-digest"]
