"""Start-up (issue 29 item 1): a run imports only what its command needs. Checked by the
modules a fresh interpreter holds after the command, never by time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PROBE = """
import contextlib, io, json, sys
sys.argv = ["runai-spec", *json.loads(sys.argv[1])]
from runai_spec.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
print(json.dumps({"out": out.getvalue(), "modules": sorted(sys.modules)}))
"""
MULTI = str(ROOT / "examples" / "multi-node" / "profile.yaml")


def loaded(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    result = json.loads(done.stdout)
    return result["out"], set(result["modules"])


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_version_is_answered_before_typer_or_pydantic_load(args: list[str]) -> None:
    out, modules = loaded(*args)
    assert out.strip() and not {"typer", "pydantic", "jinja2"} & modules


def test_help_loads_no_model_and_piped_no_rich() -> None:
    out, modules = loaded("--help")
    assert "Commands:" in out and "render" in out and "presets" in out
    assert not {"runai_spec.load.profile", "runai_spec.load.presets", "pydantic.main", "rich"} & modules


def test_a_command_imports_only_its_own_module_of_the_cli() -> None:
    out, modules = loaded("render", MULTI)
    assert 'kind: "PyTorchJob"' in out
    assert {m for m in modules if m.startswith("runai_spec.cli.")} == {
        "runai_spec.cli.common",
        "runai_spec.cli.offline",
    }
    # the shipped compiled template, run on render/runtime.py: no jinja2 (tests/render/test_render_runtime.py)
    assert "runai_spec.render.runtime" in modules and "jinja2" not in modules


def test_render_never_imports_pydantics_plugin_loader() -> None:
    # pydantic's loader imports importlib.metadata (and email, csv) before it reads
    # PYDANTIC_DISABLE_PLUGINS; runai_spec imports it only where plugins may be on
    _, modules = loaded("render", MULTI)
    assert "pydantic.main" in modules
    assert not {"importlib.metadata", "email"} & modules


def test_render_finds_the_shipped_data_without_importlibs_readers() -> None:
    # resources.PACKAGE is the folder importlib.resources.files would give, without importing
    # importlib.readers and zipfile
    from importlib import resources as stdlib_resources
    from pathlib import Path

    from runai_spec import resources

    assert Path(str(stdlib_resources.files("runai_spec"))) == resources.PACKAGE
    _, modules = loaded("render", MULTI)
    assert not {"importlib.readers", "zipfile"} & modules


def test_a_named_command_is_built_without_the_roots_completion_options() -> None:
    from typer.main import get_command

    from runai_spec.cli import load_commands, only

    def options(app: object) -> set[str]:
        return {o for p in get_command(app).params for o in p.opts}  # type: ignore[arg-type]

    assert "--install-completion" in options(load_commands())
    assert not {"--install-completion", "--show-completion"} & options(
        only(load_commands(["render"]), "render")
    )


PLUGINS = """
import json, sys
import runai_spec
from pydantic import BaseModel
from pydantic.plugin import _loader

class One(BaseModel):
    x: int

print(json.dumps({
    "plugins": list(_loader.get_plugins()),
    "loader": "importlib.metadata" in sys.modules,
    "group": getattr(_loader, "PYDANTIC_ENTRY_POINT_GROUP", None),
    "valid": One(x=1).x,
}))
"""


@pytest.mark.parametrize(
    ("setting", "loads"), [(None, False), ("__all__", False), ("1", False), ("", True), ("other", True)]
)
def test_pydantics_plugin_loader_is_imported_only_where_plugins_may_be_on(
    setting: str | None, loads: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting
    done = subprocess.run(
        [sys.executable, "-c", PLUGINS], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    result = json.loads(done.stdout)
    # the same answer as pydantic's own loader (no plugin is installed here); where plugins may
    # be on, pydantic's loader itself answers, its other names included
    assert result["plugins"] == [] and result["valid"] == 1
    assert result["loader"] is loads
    assert result["group"] == "pydantic"
