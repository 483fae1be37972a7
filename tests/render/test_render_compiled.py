"""The shipped templates' compiled modules: current, used, and never trusted for other text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest

from conftest import ROOT
from runai_spec import render
from runai_spec.render import runtime

REFRESH = ".venv/bin/python -c 'from runai_spec.render import write_compiled_templates as w; w()'"
NAMES = sorted(p.name for p in (ROOT / "templates").glob("*.j2"))


@pytest.fixture
def fresh_templates() -> Iterator[None]:
    render.template.cache_clear()
    render.environment.cache_clear()
    yield
    render.template.cache_clear()
    render.environment.cache_clear()


# The Jinja the shipped modules were compiled by (and runtime.py follows): only it can write
# them again; the constraints file pins it for CI.
THE_RUNTIMES_JINJA = jinja2.__version__ == runtime.JINJA_VERSION


@pytest.mark.parametrize("name", NAMES)
def test_each_compiled_module_stands_for_the_current_template(name: str) -> None:
    path = Path(render.__file__).parent / "compiled" / f"{render.compiled_module_name(name)}.py"
    assert path.is_file(), f"no compiled module for {name}; refresh with: {REFRESH}"
    stamp = render.compiled_stamp((ROOT / "templates" / name).read_bytes(), runtime.JINJA_VERSION)
    assert f"\nSTAMP = {stamp!r}\n" in path.read_text(encoding="utf-8"), (
        f"{path.name} is stale; refresh with: {REFRESH}"
    )


@pytest.mark.skipif(not THE_RUNTIMES_JINJA, reason=f"only Jinja {runtime.JINJA_VERSION} writes the modules")
@pytest.mark.parametrize("name", NAMES)
def test_each_compiled_module_is_the_current_template_compiled(name: str) -> None:
    path = Path(render.__file__).parent / "compiled" / f"{render.compiled_module_name(name)}.py"
    assert path.read_text(encoding="utf-8") == render.compiled_source(name), (
        f"{path.name} is stale; refresh with: {REFRESH}"
    )


@pytest.mark.parametrize("name", NAMES)
def test_jinja_uses_the_compiled_module_only_where_it_is_the_jinja_that_wrote_it(
    name: str, fresh_templates: None
) -> None:
    module = render.template(name).root_render_func.__module__
    compiled = f"{render.COMPILED_PACKAGE}.{render.compiled_module_name(name)}"
    assert (module == compiled) == THE_RUNTIMES_JINJA, module


def test_jinja_compiles_a_template_from_its_text_for_another_jinja(
    monkeypatch: pytest.MonkeyPatch, fresh_templates: None
) -> None:
    # the compiled modules say 3.1.6: Jinja 3.2 compiles each template from its text
    monkeypatch.setattr(jinja2, "__version__", "3.2.0")
    for name in NAMES:
        compiled = render.template(name)
        assert (
            compiled.root_render_func.__module__
            != f"{render.COMPILED_PACKAGE}.{render.compiled_module_name(name)}"
        )
        assert compiled.filename == str(ROOT / "templates" / name)


def test_a_template_that_differs_from_its_compiled_module_is_compiled_from_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_templates: None
) -> None:
    # what render emits follows the template's text, whatever compiled module is present
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "configmap.json.j2").write_text("changed {{ config_map }}\n")
    monkeypatch.setattr(render, "shipped_dir", lambda name: tmp_path / name)
    assert render.template("configmap.json.j2").render(config_map="x") == 'changed "x"\n'
