"""docs/reference/ (the command line and the engineers' file fields) is generated from the code, and a
stale committed page fails here, as docs/rules.md does in tests/check/test_rules_docs.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from runai_spec.cli import COMMANDS
from runai_spec.cli.reference import GENERATOR, cli_markdown, main, references
from runai_spec.load.presets import Preset, Rendezvous
from runai_spec.load.profile import Profile
from runai_spec.load.site import Site
from runai_spec.outputs.model_fields import fields_markdown, profile_fields_markdown

REFERENCE = ROOT / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(references()))
def test_the_committed_reference_is_what_the_code_generates(name: str) -> None:
    committed = (REFERENCE / name).read_text(encoding="utf-8")
    assert committed == references()[name], f"docs/reference/{name} is stale; refresh with:\n  {GENERATOR}"


def test_check_names_a_stale_page_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 0
    assert main([str(tmp_path), "--check"]) == 0
    page = tmp_path / "cli.md"
    page.write_text(page.read_text(encoding="utf-8").replace("--crd", "--crd-file"), encoding="utf-8")
    assert main([str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"error: {page}: stale" in err and GENERATOR in err


def test_every_command_and_option_is_in_the_cli_reference() -> None:
    text = cli_markdown()
    for name in COMMANDS:
        assert f"## `runai-spec {name}" in text, name
    for sub in ("list", "show", "approve", "verify", "policy"):
        assert f"## `runai-spec presets {sub}`" in text
    assert "- `--request-timeout SECONDS`:" in text
    assert "- `--kill POD[@checkpoint|@SECONDS]`:" in text


def test_every_preset_and_site_field_is_in_the_fields_reference() -> None:
    text = fields_markdown()
    for name in Preset.model_fields:
        assert f"| `{name}` |" in text, name
    for name in Rendezvous.model_fields:
        assert f"| `rendezvous.{name}` |" in text, name
    for name in Site.model_fields:
        assert f"| `{name}` |" in text, name
    assert "| `data_sources.<key>.claim` |" in text


def test_the_fields_reference_says_defaults_and_bounds_as_the_model_checks_them() -> None:
    rows = {line.split(" | ")[0][3:-1]: line for line in fields_markdown().splitlines() if line[:3] == "| `"}
    assert "| `900` |" in rows["rendezvous.join_timeout_seconds"]
    assert "> 0" in rows["rendezvous.join_timeout_seconds"]
    assert "| required |" in rows["layout"] and '"single-gpu"' in rows["layout"]
    assert "| null |" in rows["elastic"]
    # every shipped preset sets only fields the reference lists
    for path in (ROOT / "presets").glob("h200-*.yaml"):
        for key in yaml.safe_load(path.read_text(encoding="utf-8")):
            assert key in rows, (path.name, key)


def test_the_profile_reference_spells_fields_as_the_file_does() -> None:
    text = profile_fields_markdown()
    for name, info in Profile.model_fields.items():
        assert f"| `{info.alias or name}` |" in text, name
    assert "| `batch.global` |" in text and "global_" not in text  # the alias, not Python's name
    assert "| `data[].path` |" in text  # an item of a list
    assert "at most 63 character(s)" in text  # a string's length, not items
    rows = {line.split(" | ")[0][3:-1] for line in text.splitlines() if line[:3] == "| `"}
    for path in (ROOT / "examples").glob("*/profile.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for key, value in doc.items():
            assert key in rows, (path, key)
            nested = any(row.startswith(f"{key}.") for row in rows)  # a mapping of fields, not `env`
            for sub in value if isinstance(value, dict) and nested else ():
                assert f"{key}.{sub}" in rows, (path, key, sub)
