"""Import discipline: kubernetes and torch stay off the offline paths; layering holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"
PROBE = """
import sys
sys.argv = {argv!r}
from runai_spec.cli import main
try:
    main()
except SystemExit:
    pass
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'torch', 'jsonschema'))
print('IMPORTED:' + ','.join(bad))
"""


@pytest.mark.parametrize("argv", [
    ["runai-spec", "--help"],
    ["runai-spec", "validate", str(ROOT / "examples/multi-node/profile.yaml")],
    ["runai-spec", "render", str(ROOT / "examples/multi-node/profile.yaml")],
    ["runai-spec", "presets", "verify"],
])
def test_offline_commands_never_import_kubernetes_or_torch(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    assert out.strip().splitlines()[-1] == "IMPORTED:"


ALLOWED_THIRD_PARTY = {
    "typer": {"cli"}, "jinja2": {"render"}, "kubernetes": {"cluster"}, "torch": {"preflight"},
    "rich": {"cli", "report", "diff", "rehearse"},
}


def imports_of(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_third_party_imports_stay_in_their_module() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        module = path.stem
        for name in imports_of(path, top_level_only=False):
            owners = ALLOWED_THIRD_PARTY.get(name)
            assert owners is None or module in owners, f"{module}.py imports {name}"


def test_kubernetes_is_imported_only_inside_functions() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        assert "kubernetes" not in imports_of(path, top_level_only=True), path.name
