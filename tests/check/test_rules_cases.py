"""Every rule has passing and failing case files under tests/rules/<rule>/; each file is a test.

Case files are real profiles. Header comments say what the case expects:
`# expect: <field path> <severity>` (one per finding the rule must report),
`# today: YYYY-MM-DD` (the registry's date), `# manifest-set: a.b = <json>` (tamper with the
rendered manifest, for rules that guard the renderer itself)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from runai_spec.check.catalogue import RULES, check_all
from runai_spec.check.rules import Context
from runai_spec.findings import Finding
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload

CASES = ROOT / "tests" / "rules"
CASE_FILES = sorted(CASES.glob("*/*.yaml"))
DIRECTIVE = re.compile(r"^# (expect|today|manifest-set): (.*)$")


def directives(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"expect": [], "today": [], "manifest-set": []}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        match = DIRECTIVE.match(line)
        if match:
            out[match.group(1)].append(match.group(2).strip())
    return out


def findings_of(path: Path) -> tuple[list[Finding], dict[str, int]]:
    spec = directives(path)
    today = dt.date.fromisoformat(spec["today"][0]) if spec["today"] else None
    registry = PresetRegistry(ROOT / "presets", today=today)
    workload = prepare_workload(path, registry)
    if not spec["manifest-set"]:
        return list(workload.findings), workload.loaded.lines
    manifests: list[dict[str, Any]] = json.loads(json.dumps(workload.manifests))
    for assignment in spec["manifest-set"]:
        dotted, value = (part.strip() for part in assignment.split("=", 1))
        target = manifests[0]
        *parents, leaf = dotted.split(".")
        for key in parents:
            target = target[key]
        target[leaf] = json.loads(value)
    ctx = Context(
        workload.loaded,
        workload.approved,
        workload.site,
        workload.plan,
        tuple(manifests),
        today=registry.today,
    )
    return check_all(ctx), workload.loaded.lines


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_every_rule_has_a_passing_and_a_failing_case() -> None:
    for rule_id in RULES:
        names = [p.stem for p in (CASES / rule_id).glob("*.yaml")]
        assert any(n.startswith("pass") for n in names), f"{rule_id}: no pass*.yaml"
        assert any(n.startswith("fail") for n in names), f"{rule_id}: no fail*.yaml"
    assert {p.parent.name for p in CASE_FILES} == set(RULES), "a case folder names no rule"


@pytest.mark.parametrize("path", CASE_FILES, ids=case_id)
def test_rule_case(path: Path) -> None:
    rule_id = path.parent.name
    expects = directives(path)["expect"]
    findings, lines = findings_of(path)
    mine = [f for f in findings if f.rule == rule_id]
    others = [f for f in findings if f.rule != rule_id and f.severity != "info"]
    # A case isolates its rule: no other rule may complain about it.
    assert others == [], "\n".join(line for f in others for line in f.lines())
    if path.stem.startswith("pass"):
        assert expects == [], "pass cases expect nothing"
        assert [f for f in mine if f.severity != "info"] == []
        return
    assert expects, f"{path}: a fail case needs `# expect:` lines"
    got = sorted((f.path, f.severity) for f in mine if f.severity != "info")
    wanted = sorted(tuple(e.rsplit(" ", 1)) for e in expects)
    assert got == wanted
    for finding in mine:
        assert finding.hint, f"{finding.rule} at {finding.path} has no hint"
        assert finding.file == str(path)
        if finding.path in lines:
            assert finding.line == lines[finding.path]
