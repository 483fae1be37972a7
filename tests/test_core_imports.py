"""Import discipline: kubernetes and torch stay off the offline paths; layering holds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"
PROBE = """
import sys
from runai_spec.cli import main
for argv in {argvs!r}:
    sys.argv = argv
    try:
        main()
    except SystemExit:
        pass
    bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'torch', 'jsonschema'))
    print('IMPORTED:' + ' '.join(argv[1:3]) + ':' + ','.join(bad))
"""
MULTI = str(ROOT / "examples/multi-node/profile.yaml")
OFFLINE = [
    ["runai-spec", "--help"],
    ["runai-spec", "validate", MULTI],
    ["runai-spec", "render", MULTI],
    ["runai-spec", "render", MULTI, "--explain"],
    ["runai-spec", "render", MULTI, "--smoke"],
    ["runai-spec", "plan", MULTI],
    ["runai-spec", "diff", "--help"],
    ["runai-spec", "diff", MULTI, "--against", str(ROOT)],
    ["runai-spec", "presets", "verify"],
    *[["runai-spec", command, "--help"] for command in
      ("submit", "status", "logs", "delete", "rehearse", "init")],
]


def test_offline_commands_and_every_help_never_import_kubernetes_or_torch() -> None:
    # One interpreter runs them in turn (imports only accumulate), printing after each
    # command what has been imported so far: the first offender is the first non-empty line.
    out = subprocess.run([sys.executable, "-c", PROBE.format(argvs=OFFLINE)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("IMPORTED:")]
    assert len(lines) == len(OFFLINE)
    assert [ln for ln in lines if not ln.endswith(":")] == []


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


def module_of(path: Path) -> str:
    """The top-level module a file belongs to: cli/offline.py is part of cli."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def test_third_party_imports_stay_in_their_module() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_of(path)
        for name in imports_of(path, top_level_only=False):
            owners = ALLOWED_THIRD_PARTY.get(name)
            assert owners is None or module in owners, f"{module}.py imports {name}"


def test_kubernetes_is_imported_only_inside_functions() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        assert "kubernetes" not in imports_of(path, top_level_only=True), path.name
