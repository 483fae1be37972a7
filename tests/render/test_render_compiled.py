"""The shipped templates' compiled modules: current, used, and never trusted for other text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT
from runai_spec import render

REFRESH = ".venv/bin/python -c 'from runai_spec.render import write_compiled_templates as w; w()'"
NAMES = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))


@pytest.fixture
def fresh_templates() -> Iterator[None]:
    render.template.cache_clear()
    render.environment.cache_clear()
    yield
    render.template.cache_clear()
    render.environment.cache_clear()


@pytest.mark.parametrize("name", NAMES)
def test_each_compiled_module_is_the_current_template_compiled(name: str) -> None:
    path = Path(render.__file__).parent / "compiled" / f"{render.compiled_module_name(name)}.py"
    assert path.is_file(), f"no compiled module for {name}; refresh with: {REFRESH}"
    assert path.read_text(encoding="utf-8") == render.compiled_source(name), (
        f"{path.name} is stale; refresh with: {REFRESH}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_render_uses_the_compiled_module(name: str, fresh_templates: None) -> None:
    module = render.template(name).root_render_func.__module__
    assert module == f"{render.COMPILED_PACKAGE}.{render.compiled_module_name(name)}"


def test_a_template_that_differs_from_its_compiled_module_is_compiled_from_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_templates: None
) -> None:
    # what render emits follows the template's text, whatever compiled module is present
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "configmap.json.j2").write_text("changed {{ config_map }}\n")
    monkeypatch.setattr(render, "shipped_dir", lambda name: tmp_path / name)
    assert render.template("configmap.json.j2").render(config_map="x") == 'changed "x"\n'
