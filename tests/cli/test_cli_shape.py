"""Issue 10: the CLI parses, calls and prints; no command function is longer than about 15
lines (its docstring left out). The logic lives in the pipeline, `report`, `cluster/` and
`rehearse/`, where it is tested without Typer."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

CLI = ROOT / "src" / "runai_spec" / "cli"
MAX_BODY = 15


def is_command(node: ast.FunctionDef) -> bool:
    """Decorated with `@<typer app>.command(...)` or `@<typer app>.command`."""
    for dec in node.decorator_list:
        func = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(func, ast.Attribute) and func.attr == "command":
            return True
    return False


def body_lines(node: ast.FunctionDef) -> int:
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # the docstring is the command's --help, not logic
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def commands(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (f"{path.name}:{n.name}", body_lines(n))
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and is_command(n)
    ]


def test_every_cli_command_is_short() -> None:
    found = [c for path in sorted(CLI.glob("*.py")) for c in commands(path)]
    names = {name.split(":")[1] for name, _ in found}
    # the walk sees the commands (a check that finds none cannot fail)
    assert {"render", "validate", "diff", "submit", "logs", "rehearse", "status", "delete"} <= names
    assert [(name, n) for name, n in found if n > MAX_BODY] == []


def test_the_check_counts_a_long_command(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY + 1))
    path = tmp_path / "long.py"
    path.write_text(f'@app.command()\ndef long() -> None:\n    """Help."""\n{body}\n')
    assert commands(path) == [("long.py:long", MAX_BODY + 1)]
