"""The import direction of STYLE.md, walked with `ast`: no module imports a higher layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"

# STYLE.md: cli -> {report, explain, diff, cluster, rehearse} -> pipeline -> {render, policy}
# -> plan -> {presets, profile, manifests, kubeflow} -> loading -> {errors, findings}.
# A module may import its own layer or any lower one. A new module must be placed here.
LAYERS: dict[str, int] = {
    "errors": 0, "findings": 0,
    "loading": 1, "resources": 1, "secrets": 1,
    "presets": 2, "profile": 2, "manifests": 2, "kubeflow": 2, "signing": 2, "launcher": 2,
    "plan": 3,
    "render": 4, "policy": 4, "crd": 4,
    "pipeline": 5, "workload": 5, "admission": 5, "admission_rules": 5, "admission_shape": 5,
    "admission_cel": 5, "smoke": 5, "checklist": 5,
    "report": 6, "explain": 6, "diff": 6, "cluster": 6, "rehearse": 6,
    "review": 6, "init": 6, "rehearsals": 6,
    "cli": 7,
}
# Runs inside each rank with only torch: imports nothing of ours.
SELF_CONTAINED = {"preflight", "audit"}
# Top-level modules outside the layering (version and `python -m`).
OUTSIDE = {"__init__", "__main__"}

ONLY_IMPORTER = {"typer": "cli", "click": "cli", "jinja2": "render", "kubernetes": "cluster"}


def top_module(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _module_or_init(name: str) -> str:
    """`from . import x`: x is a module of ours, or a name the package's __init__ defines."""
    return name if (PACKAGE / f"{name}.py").exists() or (PACKAGE / name).is_dir() else "__init__"


def project_imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, top-level module of ours) for every import in the file, relative or absolute."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    package_parts = path.relative_to(PACKAGE).parts[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "runai_spec" and len(parts) > 1:
                    found.append((node.lineno, parts[1]))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != "runai_spec":
                    continue
                targets = [parts[1]] if len(parts) > 1 else [_module_or_init(a.name) for a in node.names]
            else:
                base = list(package_parts[: len(package_parts) - (node.level - 1)])
                mod = (node.module or "").split(".") if node.module else []
                full = base + mod
                targets = [full[0]] if full else [_module_or_init(a.name) for a in node.names]
            found.extend((node.lineno, t) for t in targets)
    return found


def third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def upward_edges(path: Path, source: str | None = None) -> list[str]:
    me = top_module(path)
    problems = []
    for line, target in project_imports(path, source):
        if target == me or target in OUTSIDE or me in OUTSIDE:
            continue
        if me in SELF_CONTAINED:
            problems.append(f"{path.name}:{line}: {me} must import nothing of ours, imports {target}")
        elif target in SELF_CONTAINED:
            continue  # read as a data file, never imported for code; allowed either way
        elif LAYERS[target] > LAYERS[me]:
            problems.append(f"{path.name}:{line}: {me} (layer {LAYERS[me]}) imports {target} "
                            f"(layer {LAYERS[target]})")
    return problems


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = {top_module(p) for p in MODULES} - set(LAYERS) - SELF_CONTAINED - OUTSIDE
    assert not unplaced, f"place these modules in LAYERS: {sorted(unplaced)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_upward(path: Path) -> None:
    assert upward_edges(path) == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_owner_imports_typer_jinja2_and_kubernetes(path: Path) -> None:
    me = top_module(path)
    wrong = {lib for lib, owner in ONLY_IMPORTER.items()
             if lib in third_party_imports(path) and me != owner}
    assert not wrong, f"{path.name} imports {sorted(wrong)}"


def test_the_checker_sees_an_upward_edge() -> None:
    # plan (layer 3) importing the CLI (layer 7), spelled both ways: relative and absolute.
    plan = PACKAGE / "plan.py"
    assert len(upward_edges(plan, "from .cli import app\nimport runai_spec.cli\n")) == 2
    nested = PACKAGE / "cluster" / "session.py"
    assert upward_edges(nested, "from ..cli import app\n") != []
    assert upward_edges(nested, "from . import submit\nfrom ..errors import InputError\n") == []
