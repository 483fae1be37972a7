"""Another Jinja installed (pyproject allows any from 3.1): render goes through Jinja itself, its
output byte for byte the goldens, and says so under --debug; render/runtime.py, which follows
Jinja 3.1.6, stands in only for that version (issue 37 item 4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest

from conftest import EXAMPLES, ROOT, run
from kubeapi import KubeAPI
from runai_spec import render
from runai_spec.render import runtime

pytest_plugins = ("kube_fixtures",)

OTHER = "3.2.0"
NOTE = (
    f"debug: runai_spec.render.runtime: the installed Jinja is {OTHER}, not the "
    f"{runtime.JINJA_VERSION} that render/runtime.py follows: the templates render through Jinja itself"
)


def golden(example: str, name: str) -> str:
    return (ROOT / "examples" / example / name).read_text(encoding="utf-8")


def clear_caches() -> None:
    runtime.stands_for_installed_jinja.cache_clear()
    render.template.cache_clear()
    render.environment.cache_clear()


@pytest.fixture
def other_jinja(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Jinja OTHER installed, as render sees it; yields the templates render_compiled was asked for."""
    monkeypatch.setattr(runtime, "installed_jinja", lambda: OTHER)
    monkeypatch.setattr(jinja2, "__version__", OTHER)  # the compiled modules' stamps say 3.1.6
    asked: list[str] = []
    compiled = render.render_compiled

    def spy(name: str, **context: Any) -> str:
        asked.append(name)
        return compiled(name, **context)

    monkeypatch.setattr(render, "render_compiled", spy)
    clear_caches()
    yield asked
    clear_caches()


@pytest.mark.parametrize("example", EXAMPLES)
def test_another_jinja_renders_each_example_and_smoke_test_through_jinja_as_the_goldens(
    example: str, other_jinja: list[str]
) -> None:
    path = str(ROOT / "examples" / example / "profile.yaml")
    job, smoke = run("render", path), run("render", "--smoke", path)
    assert job.exit_code == 0 and smoke.exit_code == 0, job.output + smoke.output
    assert job.stdout == golden(example, "manifest.yaml")
    assert smoke.stdout == golden(example, "smoke.yaml")
    assert other_jinja == []  # runtime.py was not asked: Jinja rendered each template


def test_the_runtime_stands_in_for_its_own_jinja(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "installed_jinja", lambda: runtime.JINJA_VERSION)
    runtime.stands_for_installed_jinja.cache_clear()
    try:
        assert runtime.stands_for_installed_jinja()
        monkeypatch.setattr(runtime, "installed_jinja", lambda: None)  # none, or not written out
        runtime.stands_for_installed_jinja.cache_clear()
        assert not runtime.stands_for_installed_jinja()
    finally:
        runtime.stands_for_installed_jinja.cache_clear()


def test_another_jinja_is_a_note_under_debug_once(
    api: KubeAPI, kubeconfig: Path, other_jinja: list[str]
) -> None:
    debug = run(
        "submit", str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--dry-run", "server", "--debug"
    )
    assert debug.exit_code == 0, debug.output
    assert debug.stderr.splitlines().count(NOTE) == 1, debug.stderr
    assert 'kind: "PyTorchJob"' in debug.stdout and other_jinja == []


def test_another_jinja_says_nothing_without_debug(
    api: KubeAPI, kubeconfig: Path, other_jinja: list[str]
) -> None:
    quiet = run("submit", str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--dry-run", "server")
    assert quiet.exit_code == 0, quiet.output
    assert "debug: " not in quiet.stderr and other_jinja == [], quiet.stderr


def a_jinja_of_version(folder: Path, version: str) -> Path:
    """The installed jinja2 package copied into FOLDER, declaring VERSION: a fresh install of
    another Jinja, as far as render's choice of path can tell."""
    source = Path(jinja2.__file__).parent
    shutil.copytree(source, folder / "jinja2", ignore=shutil.ignore_patterns("__pycache__"))
    init = folder / "jinja2" / "__init__.py"
    text = init.read_text(encoding="utf-8")
    declared = f'\n__version__ = "{jinja2.__version__}"\n'
    assert text.count(declared) == 1
    init.write_text(text.replace(declared, f'\n__version__ = "{version}"\n'), encoding="utf-8")
    return folder


# In a process of its own: the CLI's render and render --smoke of every example, with --debug's
# log handler on; then the Jinja it imported.
CHILD = """
import contextlib, io, json, sys
from runai_spec.cli import main
from runai_spec.cluster.backend import enable_debug
enable_debug()
texts = []
for args in sys.argv[1:]:
    sys.argv = ["runai-spec", "render", *args.split()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
    texts.append(out.getvalue())
import jinja2
print(json.dumps([texts, jinja2.__version__, jinja2.__file__]))
"""


def test_a_fresh_install_of_another_jinja_renders_the_goldens_with_a_debug_note(tmp_path: Path) -> None:
    site = a_jinja_of_version(tmp_path, OTHER)
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in EXAMPLES]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *profiles, *(f"--smoke {p}" for p in profiles)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    texts, version, location = json.loads(done.stdout)
    assert (version, Path(location).parent) == (OTHER, site / "jinja2")
    expected = [golden(e, "manifest.yaml") for e in EXAMPLES] + [golden(e, "smoke.yaml") for e in EXAMPLES]
    assert texts == expected
    notes = [line for line in done.stderr.splitlines() if line.startswith("debug: ")]
    assert notes == [NOTE], done.stderr
