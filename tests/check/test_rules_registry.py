"""One rule registry (issue 37 items 3, 5): every rule id a finding, a doc or a case folder
names is registered, and the live checks are registered without loading kubernetes."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT
from runai_spec.check.rules import REGISTRY, declared
from runai_spec.outputs.report import catalogue

PACKAGE = ROOT / "src" / "runai_spec"
# What names a finding's rule, and the position of the rule among its arguments:
# Finding(rule, ...), finding(ctx, rule, ...) (check/), _finding(workload, rule, ...) (cluster/).
RULE_ARGUMENT = {"Finding": 0, "finding": 1, "_finding": 1, "rule": 0, "declare": 0}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def rule_ids_in_code() -> Iterator[tuple[str, str]]:
    """(where, rule id) for every finding the package makes whose rule is a literal or a
    module-level constant; a rule passed on in a variable (stream.py's decode) is its maker's."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = None
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = str(getattr(func, "id", None) or getattr(func, "attr", ""))
            at = RULE_ARGUMENT.get(name)
            if at is None or len(node.args) <= at:
                continue
            arg = node.args[at]
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield where, arg.value
            elif isinstance(arg, ast.Name) and arg.id.isupper():
                module = module or importlib.import_module(_module_name(path))
                yield where, getattr(module, arg.id)


def test_every_rule_id_a_finding_names_in_the_code_is_registered() -> None:
    catalogue()  # every module that registers rules, the live checks' too
    found = list(rule_ids_in_code())
    assert len({rule for _, rule in found}) >= len(REGISTRY) - 1  # the scan sees the rules
    assert [f"{where}: {rule}" for where, rule in found if rule not in REGISTRY] == []


def test_every_live_rule_id_the_docs_name_is_registered_and_the_live_page_lists_them_all() -> None:
    catalogue()
    named = {
        (doc.name, token)
        for doc in sorted((ROOT / "docs").rglob("*.md"))
        for token in re.findall(r"\blive-[a-z]+(?:-[a-z]+)*\b", doc.read_text(encoding="utf-8"))
        if token not in ("live-checks",)  # the page's own name
    }
    assert sorted(f"{doc}: {token}" for doc, token in named if token not in REGISTRY) == []
    page = (ROOT / "docs" / "live-checks.md").read_text(encoding="utf-8")
    assert [r.id for r in declared("live") if f"`{r.id}`" not in page] == []


def test_every_case_folder_is_a_registered_site_rule_and_every_site_rule_has_one() -> None:
    folders = {p.name for p in (ROOT / "tests" / "rules").iterdir() if p.is_dir()}
    assert folders == {r.id for r in declared("site")}


def test_rules_lists_the_live_checks_without_importing_kubernetes() -> None:
    probe = (
        "import sys\nfrom runai_spec.cli import main\n"
        "sys.argv = ['runai-spec', 'rules', '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('KUBERNETES' if 'kubernetes' in sys.modules else 'CLEAN')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert '"live-forbidden"' in out
    assert out.rstrip().endswith("CLEAN")
