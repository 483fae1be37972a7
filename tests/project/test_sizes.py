"""The size limits of issue 28, over the formatted tree: a module reads in one sitting, a function
on one screen, a call without counting its arguments."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8
# Shipped into every pod and run there alone, one file by design; its bytes are part of every
# committed smoke manifest (examples/*/smoke.yaml), which stay byte-identical.
ONE_FILE_BY_DESIGN = {PACKAGE / "preflight.py"}
# Generated from templates/ by render.compile_templates, never edited by hand.
GENERATED = PACKAGE / "render" / "compiled"

MODULES = sorted(
    p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and not p.is_relative_to(GENERATED)
)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    count = (
        len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    )
    first = (a.posonlyargs + a.args)[:1]
    return count - (1 if first and first[0].arg in ("self", "cls") else 0)


def over_the_limits(path: Path, source: str | None = None) -> list[str]:
    text = source if source is not None else path.read_text(encoding="utf-8")
    found = []
    lines = text.count("\n")
    if lines > MAX_MODULE_LINES and path not in ONE_FILE_BY_DESIGN:
        found.append(f"{lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and path not in ONE_FILE_BY_DESIGN:
                found.append(f"{node.name}: {length} lines")
            if parameters(node) > MAX_PARAMETERS:
                found.append(f"{node.name}: {parameters(node)} parameters")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_functions_and_parameter_lists_stay_small(path: Path) -> None:
    assert over_the_limits(path) == []


def test_the_limits_are_measured() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long_function = f"def f(a, b, c, d, e, f, g, h, i):\n{body}"
    assert over_the_limits(PACKAGE / "x.py", long_function) == [
        f"f: {MAX_FUNCTION_LINES + 1} lines",
        "f: 9 parameters",
    ]
    method = "class C:\n    def m(self, a, b, c, d, e, f, g, h):\n        pass\n"
    assert over_the_limits(PACKAGE / "x.py", method) == []
    assert over_the_limits(PACKAGE / "x.py", "x = 1\n" * (MAX_MODULE_LINES + 1)) == [
        f"{MAX_MODULE_LINES + 1} lines"
    ]
