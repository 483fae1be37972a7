"""docs/architecture.md is drawn from the tree: its map is every package and module of
src/runai_spec with its own one-line docstring, in the stages' order, and every file it names
exists. Refresh the map after moving code: .venv/bin/python tests/project/test_architecture_doc.py"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from project.test_layering import STAGES  # noqa: E402

PACKAGE = ROOT / "src" / "runai_spec"
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- map: begin -->", "<!-- map: end -->"
SKIP = {"__pycache__", "compiled"}
REFRESH = ".venv/bin/python tests/project/test_architecture_doc.py"


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def _entries(folder: Path, depth: int) -> list[str]:
    lines = []
    for path in sorted(folder.iterdir()):
        if path.name in SKIP or path.name.startswith("."):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            lines.append(f"{'  ' * depth}{path.name + '/':<22} {first_line(path / '__init__.py')}".rstrip())
            lines.extend(_entries(path, depth + 1))
        elif path.is_dir() and path.name == "audit":
            lines.append(f"{'  ' * depth}{path.name + '/':<22} {first_line(path / 'sitecustomize.py')}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            lines.append(f"{'  ' * depth}{path.name:<22} {first_line(path)}".rstrip())
    return lines


def stage_rank(name: str) -> int:
    stem = name.removesuffix(".py")
    for i, names in enumerate(STAGES):
        if stem in names:
            return i
    return len(STAGES)  # preflight.py, audit/, __main__.py: outside the stages


def drawn_map() -> str:
    """The map, top-level entries in stage order (alphabetical within a stage)."""
    top = sorted(
        (
            p
            for p in PACKAGE.iterdir()
            if p.name not in SKIP
            and not p.name.startswith(".")
            and p.name != "__init__.py"
            and (p.suffix == ".py" or p.is_dir())
        ),
        key=lambda p: (stage_rank(p.name), p.name),
    )
    lines = ["src/runai_spec/"]
    for path in top:
        if path.is_dir():
            doc = (
                first_line(path / "__init__.py")
                if (path / "__init__.py").exists()
                else first_line(path / "sitecustomize.py")
            )
            lines.append(f"  {path.name + '/':<22} {doc}".rstrip())
            if (path / "__init__.py").exists():
                lines.extend(_entries(path, 2))
        else:
            lines.append(f"  {path.name:<22} {first_line(path)}".rstrip())
    return "\n".join(["```text", *lines, "```"])


def current_map(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def test_the_map_is_the_tree() -> None:
    expected = drawn_map()
    assert current_map(DOC.read_text(encoding="utf-8")) == expected, (
        f"docs/architecture.md's map is not the tree; refresh it with: {REFRESH}"
    )


def test_every_file_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8").split(BEGIN)[0] + DOC.read_text(encoding="utf-8").split(END)[1]
    named = set(re.findall(r"`((?:src/runai_spec|tests|templates|presets|docs)/[\w./-]+)`", text))
    assert named, "the page names no files"
    assert sorted(n for n in named if not (ROOT / n).exists()) == []


def test_each_newcomer_question_names_at_most_three_files() -> None:
    text = DOC.read_text(encoding="utf-8")
    answers = re.findall(r"^### (.+?)\n(.*?)(?=^### |^## |\Z)", text, re.M | re.S)
    questions = [(q, body) for q, body in answers if q.startswith("Where do I add")]
    assert [q for q, _ in questions if "launcher" in q or "back-end" in q] == [
        "Where do I add a launcher?",
        "Where do I add a back-end?",
    ]
    for question, body in questions:
        answer = body.strip().split("\n\n")[0]  # the first paragraph answers; later ones detail
        touched = set(re.findall(r"`((?:src/runai_spec|templates|presets)/[\w./-]+)`", answer))
        assert 1 <= len(touched) <= 3, (question, sorted(touched))


def test_every_module_opens_with_a_one_line_summary() -> None:
    # the map shows the first line: it must be the whole summary, a sentence of its own
    cut_short = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if SKIP & set(path.parts):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        summary = doc.split("\n\n")[0]
        if not summary or "\n" in summary or not summary.endswith((".", ")")) or "TODO" in summary:
            cut_short.append(str(path.relative_to(PACKAGE)))
    assert cut_short == []


if __name__ == "__main__":
    page = DOC.read_text(encoding="utf-8")
    head, rest = page.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{drawn_map()}\n{END}{tail}", encoding="utf-8")
    print(f"wrote the map of {DOC.relative_to(ROOT)}")
