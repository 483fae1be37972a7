"""The CLI habits people bring: -h and --version everywhere, completion, `-` and folders as
profiles, kubectl's -o, and help that matches behaviour."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from conftest import ROOT, run
from runai_spec import __version__
from runai_spec.cli import app
from runai_spec.cli.common import polish

MULTI = ROOT / "examples" / "multi-node"


def command_paths() -> list[list[str]]:
    """Every command and group, as the words that name it."""
    root = get_command(app)
    found: list[list[str]] = [[]]

    def walk(cmd: Any, words: list[str]) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            found.append([*words, name])
            walk(sub, [*words, name])

    walk(root, [])
    return found


@pytest.mark.parametrize("words", command_paths(), ids=lambda w: " ".join(w) or "root")
def test_every_command_has_h_version_and_clean_help(words: list[str]) -> None:
    short = run(*words, "-h", env={"COLUMNS": "100"})
    assert short.exit_code == 0, short.output
    assert "Usage:" in short.stdout
    assert "<bool>" not in short.stdout  # a flag takes no value
    long = run(*words, "--help", env={"COLUMNS": "100"})
    assert long.stdout == short.stdout
    version = run(*words, "--version")
    assert version.exit_code == 0 and version.stdout == f"{__version__}\n"


@pytest.mark.parametrize("words", command_paths()[1:], ids=lambda w: " ".join(w))
def test_help_text_has_no_hard_line_breaks(words: list[str]) -> None:
    cmd: Any = get_command(app)
    polish(cmd)  # what the root group does before it parses
    for word in words:
        cmd = cmd.commands[word]
    for text in [cmd.help, *(getattr(p, "help", None) for p in cmd.params)]:
        for paragraph in (text or "").split("\n\n"):
            assert "\n" not in paragraph, paragraph


def test_shell_completion_is_offered() -> None:
    help_text = run("--help", env={"COLUMNS": "100"}).stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text


def test_a_folder_means_its_profile_yaml() -> None:
    result = run("validate", str(MULTI))
    assert result.exit_code == 0, result.output
    assert f"ok: {MULTI / 'profile.yaml'}:" in result.stderr


def test_dash_reads_the_profile_from_stdin() -> None:
    text = (MULTI / "profile.yaml").read_text(encoding="utf-8")
    rendered = run("render", "-", input=text)
    assert rendered.exit_code == 0, rendered.output
    assert rendered.stdout == (MULTI / "manifest.yaml").read_text(encoding="utf-8")
    bad = run("validate", "-", input=text.replace("global: 512", "global: 500"))
    assert bad.exit_code == 1
    assert "error: <stdin>:" in bad.stderr


def test_render_o_is_the_format_and_d_the_folder(tmp_path: Path) -> None:
    as_json = run("render", str(MULTI), "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    listed = json.loads(as_json.stdout)
    assert listed["kind"] == "List" and listed["items"][0]["kind"] == "PyTorchJob"
    assert not Path("json").exists()
    as_yaml = run("render", str(MULTI), "-o", "yaml")
    assert as_yaml.stdout == (MULTI / "manifest.yaml").read_text(encoding="utf-8")
    written = run("render", str(MULTI), "-d", str(tmp_path / "d"))
    assert written.exit_code == 0 and (tmp_path / "d" / "llm-7b-fsdp.yaml").is_file()
    assert "deprecated" not in written.stderr


def test_render_o_dir_still_works_with_a_deprecation_line(tmp_path: Path) -> None:
    old = run("render", str(MULTI), "-o", str(tmp_path / "old"))
    assert old.exit_code == 0, old.output
    assert (tmp_path / "old" / "llm-7b-fsdp.yaml").is_file()
    assert re.search(r"^warning: `-o .*` as a folder is deprecated; use `--out-dir", old.stderr, re.M)


@pytest.mark.parametrize(
    ("command", "refused"), [("explain", "markdown"), ("plan", "text"), ("status", "markdown")]
)
def test_only_the_formats_each_command_has_are_offered(command: str, refused: str) -> None:
    help_text = run(command, "--help", env={"COLUMNS": "200"}).stdout
    assert refused not in re.findall(r"<([a-z|]+)>", help_text)[0].split("|")
    result = run(command, str(MULTI), "--format", refused)
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
