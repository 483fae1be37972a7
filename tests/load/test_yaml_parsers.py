"""The strict loader gives the same values, lines and refusals on libyaml's parser and on
PyYAML's pure-Python one (what it falls back to where PyYAML was built without libyaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import runai_spec.load.yaml as strict
from conftest import ROOT
from runai_spec.errors import InputError

PARSERS = {"libyaml": getattr(yaml, "CSafeLoader", None), "python": yaml.SafeLoader}
needs_libyaml = pytest.mark.skipif(PARSERS["libyaml"] is None, reason="PyYAML without libyaml")

# Every YAML file the project ships or commits: profiles, presets, site, ledger, manifests.
SHIPPED = sorted(
    [*ROOT.glob("examples/*/*.yaml"), *ROOT.glob("presets/*.yaml"), *ROOT.glob("examples/ci/*.yml")]
)

# Bad input: each of the loader's own refusals, and YAML that does not parse.
BAD = [
    "- a\n- b\n",
    "",
    "name: a\nname: b\n",
    "a: &x [1]\nb: *x\n",
    "a: [1]\nb: *x\n",
    "&x a: 1\n",
    "a: !!python/object/apply:os.system [ls]\n",
    "!!str a: 1\n",
    "a: !foo x\n",
    "a: !!binary aGVsbG8=\n",
    "<<: {name: x}\n",
    "a: {<<: {b: 1}}\n",
    "name: a\n---\nname: b\n",
    "name: [unclosed\n",
    'name: "bell\\a"\n',
    'a: "\\x85"\n',
    'a: "\\x1b[31m"\n',
    '"\\x07": 1\n',
    "a: 1e400\n",
    "1e400: a\n",
    "a: " + "1" * 70 + "\n",
    "a: -" + "9" * 64 + "\n",
    "{a: 1, [b]: 2}\n",
    "? {a: 1}\n: 2\n",
    "? [a, *b]\n: 2\n",
    "a:\n\tb: 1\n",
    "a: b\n\t- c\n",
    "a:\n  b: 1\n c: 2\n",
    "a: b: c\n",
    "a: @b\n",
    'a: "\\q"\n',
    "a: 'x\n",
    "a: " + "[" * 70 + "]" * 70 + "\n",
    "a:\n" + "".join(f"{'  ' * i}k{i}:\n" for i in range(1, 70)) + "  " * 70 + "x: 1\n",
    "true: 1\ntrue: 2\n",
    "1: a\n'1': b\n",
]

# Good input that exercises each conversion: numbers (kept with their text), YAML 1.1 words
# that stay strings, the non-specific tag, block scalars, flow and block collections.
GOOD = [
    "a: 1\nb: -2.50\nc: 1e3\nd: 0777\ne: 1:30\nf: no\ng: yes\nh: on\ni: ~\nj: null\nk:\nl: true\n",
    "a: ! 12\nb: ! true\nc: '12'\nd: \"1.10\"\n",
    "a: |\n  x\n  y\nb: >\n  folded\n  text\nc: |-\n  keep\n",
    "a: [1, 'x', {b: [c, d]}, []]\nb: {}\nc:\n  - d\n  - e: f\n    g: [h]\n",
    "1: a\ntrue: b\nnull: c\n2.5: d\n",
    "\ufeffa: \u00e9\u4e2d\n",
    "a: 1\r\nb: 2\r\n",
    "%YAML 1.1\n---\na: 1\n...\n",
    "? a\n: 1\n",
    'a: "\\t tab and \\n newline"\n',
    "a: b[0]\nb: [x]\nb[0]: y\n",
    "---\n",
    "# only a comment\n",
    "null: a\n~: b\n",
]


def _exact(value: Any) -> Any:
    """VALUE with each number's type and text spelt out (1 == 1.0 == True for ==)."""
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return (type(value).__name__, value, getattr(value, "text", None))


def _outcome(text: str, *, literal: bool, track: bool = True) -> Any:
    try:
        if track:
            docs, lines = strict._parse(text, "f.yaml", literal=literal)
        else:
            docs, lines = strict.parse_documents(text, "f.yaml"), {}
    except InputError as exc:
        return ("refused", exc.message, exc.line, exc.field, exc.hint)
    return ("loaded", _exact(docs), lines)


def _both(monkeypatch: pytest.MonkeyPatch, text: str, **options: Any) -> list[Any]:
    seen = []
    for parser in PARSERS.values():
        monkeypatch.setattr(strict, "_Loader", parser)
        seen.append(_outcome(text, **options))
    return seen


@needs_libyaml
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_file_loads_the_same_on_both_parsers(
    monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    text = path.read_text(encoding="utf-8")
    for literal in (True, False):
        c_side, python_side = _both(monkeypatch, text, literal=literal)
        assert c_side[0] == "loaded"
        assert c_side == python_side


@needs_libyaml
@pytest.mark.parametrize("text", GOOD)
def test_each_conversion_is_the_same_on_both_parsers(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    for options in ({"literal": True}, {"literal": False}, {"literal": False, "track": False}):
        c_side, python_side = _both(monkeypatch, text, **options)
        assert c_side[0] == "loaded", c_side
        assert c_side == python_side


@needs_libyaml
@pytest.mark.parametrize("text", BAD)
def test_bad_input_is_refused_alike_on_both_parsers(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Refused by both, on the same line with the same hint; the loader's own refusals
    (aliases, anchors, tags, merge keys, duplicates, control characters, numbers, nesting)
    word for word. A syntax error's wording is the parser's own (libyaml `did not find
    expected ','`, the pure parser `expected ',' ... but got ...`)."""
    c_side, python_side = _both(monkeypatch, text, literal=True)
    if c_side[0] == "loaded":  # a top level that is no mapping, two documents: load_mapping_lines
        assert c_side == python_side
        with pytest.raises(InputError):
            strict.load_mapping_lines(text, "f.yaml")
        return
    assert python_side[0] == "refused"
    _, message, line, field, hint = c_side
    assert (python_side[2], python_side[3], python_side[4]) == (line, field, hint)
    if message.startswith("not valid YAML: "):
        assert python_side[1].startswith("not valid YAML: ")
    else:
        assert python_side[1] == message


@needs_libyaml
def test_too_many_nodes_is_refused_alike_on_both_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strict, "MAX_NODES", 20)
    for text in ("a: [" + ", ".join("x" * 30) + "]\n", "".join(f"k{i}: {i}\n" for i in range(30))):
        c_side, python_side = _both(monkeypatch, text, literal=True)
        assert c_side[:2] == ("refused", "more than 20 YAML nodes")
        assert c_side == python_side


def test_the_loader_uses_libyaml_where_pyyaml_has_it() -> None:
    assert strict._Loader is (PARSERS["libyaml"] or yaml.SafeLoader)


# Scalars that sit at each edge of what a plain scalar means: words, numbers, `<<`, control
# and non-printable characters, each written plain, quoted and as a block where YAML allows.
EDGES = ["a", "null", "Null", "~", "true", "false", "yes", "<<", "1", "-1", "1.5", "1e400", "-x", "0x1"]
EDGES += ["é", "\u2028x", "a\u00a0b", "a b", "<", "=", "12ab", "-", ".5", "1" * 70]


def _docs_with_edges() -> list[str]:
    docs = []
    for text in EDGES:
        for written in (text, f"'{text}'", f'"{text}"', f"|\n  {text}\n"):
            docs += [f"k: {written}\n", f"k:\n  - {written}\n  - x\n", f"{written}: v\n"]
        docs += [f"k: [{text}, {text}]\n", f"{{{text}: 1}}\n", f'"\\x07{text}": 1\n', f'k: "\\x07{text}"\n']
    return docs


@needs_libyaml
@pytest.mark.parametrize(
    "options", [{"literal": True}, {"literal": False}, {"literal": False, "track": False}]
)
def test_the_builders_fast_path_changes_no_outcome(monkeypatch: pytest.MonkeyPatch, options: Any) -> None:
    """The loops take a scalar as its own text when _Builder.as_is says so; every document
    loads (or is refused) the same with that fast path off."""
    texts = [*(p.read_text(encoding="utf-8") for p in SHIPPED), *GOOD, *BAD, *_docs_with_edges()]
    fast = [_outcome(text, **options) for text in texts]
    monkeypatch.setattr(strict._Builder, "as_is", lambda self, event, depth: False)
    assert [_outcome(text, **options) for text in texts] == fast


@needs_libyaml
def test_the_fast_path_keeps_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = ["a: [x, y, z, w]\n", "".join(f"k{i}: v\n" for i in range(8)), "a:\n  b:\n    c: d\n"]
    for nodes, depth in ((3, 64), (5, 64), (100, 1), (100, 2)):
        monkeypatch.setattr(strict, "MAX_NODES", nodes)
        monkeypatch.setattr(strict, "MAX_DEPTH", depth)
        fast = [_outcome(doc, literal=True) for doc in docs]
        with monkeypatch.context() as slow:
            slow.setattr(strict._Builder, "as_is", lambda self, event, depth: False)
            assert [_outcome(doc, literal=True) for doc in docs] == fast
        assert any(outcome[0] == "refused" for outcome in fast)
