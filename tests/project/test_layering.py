"""The import direction of STYLE.md, walked with `ast` in folder order: no stage imports a later
one, no package has a cycle inside, the outputs never import one another, and each third-party
library has its one owner."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache, lru_cache
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"

# The stages in order (docs/architecture.md draws the same list): a module may import its own
# stage or an earlier one. A new top-level module or folder must be placed here.
STAGES: list[set[str]] = [
    {"errors", "findings", "records", "text"},  # no imports of ours but each other
    {"secrets", "resources", "files"},  # what every stage may need: masking, shipped data, writes
    {"facts"},  # other systems' behaviour, pure and versioned
    {"load"},  # files -> validated models
    {"plan"},  # models -> Plan (pure)
    {"render"},  # Plan -> manifests
    {"check"},  # Plan + manifests -> findings
    {"pipeline"},  # profile paths -> workloads, streaming
    {"cluster", "rehearse"},  # where a workload goes: a cluster, or this machine
    {"outputs"},  # every text, JSON and Markdown result, the admission policy
    {"cli"},  # parse, call, print
]
LAYERS: dict[str, int] = {name: i for i, names in enumerate(STAGES) for name in names}
# Run inside each rank with only torch: import nothing of ours.
SELF_CONTAINED = {"preflight", "audit"}
# The package's own __init__ (its version) and `python -m`.
OUTSIDE = {"__init__", "__main__"}
# Siblings that must not import one another (each output stands alone on the stages below).
NO_SIBLING_IMPORTS = {"outputs"}

# Each library that shapes how the tool starts or what it can reach, and the only folders that
# may import it.
OWNERS: dict[str, set[str]] = {
    "typer": {"cli"},
    "click": {"cli"},
    "jinja2": {"render"},
    "kubernetes": {"cluster"},
    "torch": {"preflight", "audit"},
    "rich": {"cli", "outputs", "rehearse"},
}


def module_name(path: Path) -> str:
    """runai_spec.load.presets for src/runai_spec/load/presets.py; a package is its __init__."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _exists(name: str) -> bool:
    base = PACKAGE.parent / Path(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


@cache
def _parsed(path: Path) -> ast.Module:
    """PATH's syntax tree, parsed once a process: the sources do not change while the suite
    runs, and callers only read it (five tests of each module parsed it, 600 parses a run:
    issue 29)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, full module name of ours) for every import in the file: `from . import x` names
    module x when x is one, else the package whose attribute it takes."""
    tree = ast.parse(source) if source is not None else _parsed(path)
    me = module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "runai_spec")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
                if base.split(".")[0] != "runai_spec":
                    continue
            else:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((node.lineno, full if _exists(full) else base))
    return found


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_edges(path: Path, source: str | None = None) -> list[str]:
    me = stage_of(module_name(path))
    problems = []
    for line, target_module in imported_modules(path, source):
        target = stage_of(target_module)
        if target == me or target in OUTSIDE or me in OUTSIDE:
            continue
        if me in SELF_CONTAINED:
            problems.append(f"{path.name}:{line}: {me} must import nothing of ours, imports {target}")
        elif target in SELF_CONTAINED:
            continue  # read as a data file, never imported for code
        elif LAYERS[target] > LAYERS[me]:
            problems.append(
                f"{path.name}:{line}: {me} (stage {LAYERS[me]}) imports {target} (stage {LAYERS[target]})"
            )
    return problems


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_stage() -> None:
    unplaced = {stage_of(module_name(p)) for p in MODULES} - set(LAYERS) - SELF_CONTAINED - OUTSIDE
    assert not unplaced, f"place these in STAGES: {sorted(unplaced)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_later_stage(path: Path) -> None:
    assert upward_edges(path) == []


@lru_cache(maxsize=1)
def _graph() -> dict[str, set[str]]:
    """Every module's imports of ours, parsed once a process (the sources do not change while
    the suite runs; callers only read it)."""
    return {module_name(p): {t for _, t in imported_modules(p)} for p in MODULES}


def _cycle_from(graph: dict[str, set[str]], start: str, inside: str) -> list[str] | None:
    """A cycle through start among the modules of the package `inside`, or None."""

    def within(m: str) -> bool:
        return m.startswith(inside + ".") or m == inside

    stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
    path = [start]
    seen = {start}
    while stack:
        node, children = stack[-1]
        for child in children:
            if not within(child) or child == node:
                continue
            if child == start:
                return [*path, start]
            if child not in seen:
                seen.add(child)
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
                break
        else:
            stack.pop()
            path.pop()
    return None


PACKAGES = sorted(module_name(p) for p in MODULES if p.name == "__init__.py" and p.parent != PACKAGE)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_cycle_inside_a_package(package: str) -> None:
    graph = _graph()
    depth = package.count(".") + 1
    members = sorted(
        m for m in graph if m == package or m.startswith(package + ".") and m.count(".") == depth
    )
    cycles = [c for m in members if (c := _cycle_from(graph, m, package))]
    assert cycles == [], " -> ".join(cycles[0])


def test_outputs_never_import_one_another() -> None:
    for folder in NO_SIBLING_IMPORTS:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            mine = module_name(path).split(".")[:3]
            for line, target in imported_modules(path):
                parts = target.split(".")
                if parts[1] == folder and len(parts) > 2:
                    assert parts[:3] == mine, f"{path.relative_to(PACKAGE)}:{line} imports {target}"


@cache
def third_party_imports(path: Path, *, top_level_only: bool = False) -> frozenset[str]:
    """The top-level names PATH imports (absolute imports), once a process per file: the
    owner test asks it once per library."""
    tree = _parsed(path)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return frozenset(names)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_owner_imports_each_library(path: Path) -> None:
    me = stage_of(module_name(path))
    wrong = {lib for lib, owners in OWNERS.items() if lib in third_party_imports(path) and me not in owners}
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {sorted(wrong)}"


def test_kubernetes_is_imported_only_inside_functions() -> None:
    for path in MODULES:
        assert "kubernetes" not in third_party_imports(path, top_level_only=True), path.name


# The one module of cluster/ the CLI may import: the back-end interface (it re-exports what the
# commands need). A back-end (cluster/kubernetes.py, cluster/runai_backend.py, a new one) is
# reached by name through its registry, never imported by the CLI.
CLI_SEAMS = {"cluster": "runai_spec.cluster.backend"}


def seam_breaches(path: Path, source: str | None = None) -> list[str]:
    """The imports of PATH (a cli module) into a seamed stage other than through its seam."""
    problems = []
    for line, target in imported_modules(path, source):
        seam = CLI_SEAMS.get(stage_of(target))
        if seam is not None and target != seam:
            problems.append(f"{path.name}:{line}: imports {target}; the CLI imports only {seam}")
    return problems


CLI_MODULES = [p for p in MODULES if stage_of(module_name(p)) == "cli"]


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_cli_reaches_the_cluster_only_through_the_backend_interface(path: Path) -> None:
    assert seam_breaches(path) == []


def test_the_checker_sees_the_cli_import_a_back_end() -> None:
    cli = PACKAGE / "cli" / "cluster.py"
    for bad in (
        "from ..cluster.runai import submit_workload\n",
        "from ..cluster import kubernetes\n",
        "import runai_spec.cluster.runai_backend\n",
        "from .. import cluster\n",
        "from ..cluster.session import Session\n",
    ):
        assert seam_breaches(cli, bad) != [], bad
    assert seam_breaches(cli, "from ..cluster.backend import open_backend\n") == []
    assert seam_breaches(cli, "from ..cluster import backend\n") == []


def test_the_checker_sees_an_upward_edge() -> None:
    # plan (stage 4) importing the CLI, spelled both ways: relative and absolute.
    plan = PACKAGE / "plan" / "plan.py"
    assert len(upward_edges(plan, "from ..cli import app\nimport runai_spec.cli\n")) == 2
    nested = PACKAGE / "cluster" / "session.py"
    assert upward_edges(nested, "from ..outputs import report\n") != []
    assert upward_edges(nested, "from . import submit\nfrom ..errors import InputError\n") == []


def test_the_checker_sees_a_cycle() -> None:
    graph = {"runai_spec.x.a": {"runai_spec.x.b"}, "runai_spec.x.b": {"runai_spec.x.a", "runai_spec.y"}}
    assert _cycle_from(graph, "runai_spec.x.a", "runai_spec.x") == [
        "runai_spec.x.a",
        "runai_spec.x.b",
        "runai_spec.x.a",
    ]
    assert _cycle_from({"runai_spec.x.a": {"runai_spec.y.b"}}, "runai_spec.x.a", "runai_spec.x") is None
