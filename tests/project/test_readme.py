"""The README is the first thing people copy: every profile block in it validates clean, and
every `runai-spec` command of its code blocks runs (issue 16, item 9).

How each command is run:
- offline commands (validate, plan, explain, render, rules, schema, presets ...) run as
  written, in a folder holding the README's own profile as `profile.yaml` and a copy of
  `examples/`; `presets approve` runs against a copy of `presets/`;
- cluster commands (submit, status, logs, delete) run against the fake API server of
  tests/kube_fixtures.py, in the README's order;
- `init` runs on a pseudo-terminal (tests/outputs/test_init.py's), each question answered, in an
  empty folder; the profile it writes validates;
- `rehearse` commands: only their arguments are checked (parsed and handed to the rehearsal
  as written); the rehearsal itself is covered by tests/rehearse/test_rehearse_cpu.py and
  tests/rehearse/test_rehearse_cli.py, and would cost half a minute per README line here.
Commands that are not runai-spec's (venv, pip, ruff, mypy, pytest) are listed in NOT_RUN with
the reason; a new README command of any other kind fails test_every_command_is_classified.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from conftest import ENGINEER, ROOT, allow_signer
from kubeapi import KubeAPI
from outputs.test_init import IMAGE, interview
from runai_spec import rehearse as rehearse_module
from runai_spec.cli import app
from runai_spec.load.registry import PresetRegistry
from runai_spec.rehearse import RehearseResult

pytest_plugins = ("kube_fixtures",)

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
runner = CliRunner()

OFFLINE = {"validate", "plan", "explain", "render", "rules", "schema", "presets", "diff", "version"}
CLUSTER = {"submit", "status", "logs", "delete"}
REHEARSE = {"rehearse"}
INTERACTIVE = {"init"}
# What the README's code blocks run besides runai-spec, and why this test does not run it.
NOT_RUN = {
    "python3": "creates the virtual environment the README starts from (CI does this)",
    ".venv/bin/pip": "installs packages from the network: CI's own first step",
    ".venv/bin/ruff": "CI runs it (the test command)",
    ".venv/bin/mypy": "CI runs it (the test command)",
    ".venv/bin/python": "this is the test suite itself (`python -m pytest`)",
}


def blocks(lang: str) -> list[str]:
    return [body for fence, body in FENCE.findall(README.read_text(encoding="utf-8")) if fence == lang]


def profile_blocks() -> list[str]:
    return [
        body for body in blocks("yaml") if isinstance(doc := yaml.safe_load(body), dict) and "preset" in doc
    ]


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    stdout_to: str | None  # `> FILE`

    @property
    def runai_spec(self) -> bool:
        return self.argv[0].rsplit("/", 1)[-1] == "runai-spec"

    def __str__(self) -> str:
        return shlex.join(self.argv) + (f" > {self.stdout_to}" if self.stdout_to else "")


def commands() -> list[Command]:
    """Every command of the README's `sh` blocks: one per line, split at `&&`, comments off."""
    out: list[Command] = []
    for body in blocks("sh"):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            while words:
                part = words[: words.index("&&")] if "&&" in words else words
                words = words[len(part) + 1 :]
                target = None
                if ">" in part:
                    at = part.index(">")
                    part, target = part[:at], part[at + 1]
                out.append(Command(tuple(part), target))
    return out


def of_kind(kind: set[str]) -> list[Command]:
    return [c for c in commands() if c.runai_spec and c.argv[1] in kind]


def test_the_readme_has_what_this_test_runs() -> None:
    assert len(profile_blocks()) >= 1
    assert of_kind(OFFLINE) and of_kind(CLUSTER) and of_kind(REHEARSE) and of_kind(INTERACTIVE)


def test_every_command_is_classified() -> None:
    for command in commands():
        if command.runai_spec:
            assert command.argv[1] in OFFLINE | CLUSTER | REHEARSE | INTERACTIVE, str(command)
        else:
            assert command.argv[0] in NOT_RUN, f"{command}: run it here or say why not"


@pytest.mark.parametrize("index", range(len(profile_blocks())))
def test_every_profile_block_validates_clean(index: int, tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(profile_blocks()[index], encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "error:" not in result.stderr and "warning:" not in result.stderr, result.stderr


@pytest.fixture
def readme_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where a reader runs the README: their profile.yaml (the README's), and examples/."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "profile.yaml").write_text(profile_blocks()[0], encoding="utf-8")
    shutil.copytree(ROOT / "examples", work / "examples")
    monkeypatch.chdir(work)
    return work


def invoke(command: Command, key: Path | None = None) -> Any:
    """The command as written; `~/.ssh/id_ed25519` (the engineer's key) becomes KEY."""
    argv = [str(key) if key is not None and a == "~/.ssh/id_ed25519" else a for a in command.argv[1:]]
    result = runner.invoke(app, argv)
    if command.stdout_to:
        Path(command.stdout_to).write_text(result.stdout, encoding="utf-8")
    return result


def test_every_offline_command_runs(readme_folder: Path, presets_dir: Path, _engineer_key: Path) -> None:
    # the engineer runs `presets approve ... --dir presets/` in the presets repository's
    # checkout: a copy here, whose allowed_signers lists the engineer's (throwaway) key
    shutil.copytree(presets_dir, readme_folder / "presets")
    allow_signer(readme_folder / "presets", _engineer_key, ENGINEER)
    ran = []
    for command in of_kind(OFFLINE):
        result = invoke(command, _engineer_key)
        assert result.exit_code == 0, f"{command}: {result.output}"
        ran.append(command.argv[1:3])
        if command.argv[1:2] == ("render",) and command.argv[2].startswith("examples/"):
            golden = readme_folder / Path(command.argv[2]).parent / "manifest.yaml"
            assert result.stdout == golden.read_text(encoding="utf-8")
        if command.stdout_to:
            assert (readme_folder / command.stdout_to).read_text().startswith("# Review request")
        if command.argv[1:3] == ("presets", "approve"):
            approved = PresetRegistry(readme_folder / "presets").get(command.argv[3]).approval
            assert approved.approved_by == ENGINEER and approved.signature
    assert ("validate", "profile.yaml") in ran and ("plan", "profile.yaml") in ran


def test_every_cluster_command_runs_against_the_fake_api(
    readme_folder: Path, api: KubeAPI, kubeconfig: Path
) -> None:
    # the README's resubmit (`delete ... && submit ...`) is for a job already submitted
    assert runner.invoke(app, ["submit", "profile.yaml"]).exit_code == 0
    for command in of_kind(CLUSTER):
        result = invoke(command)
        assert result.exit_code == 0, f"{command}: {result.output}"
    assert api.kube.objects, "submit stored nothing"


def test_every_rehearse_command_parses_and_reaches_the_rehearsal(
    readme_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # arguments only (see the module's docstring): the rehearsal is the slow tests' subject
    calls: list[dict[str, Any]] = []

    def rehearse_manifests(manifests: list[Any], spec: Any) -> RehearseResult:
        calls.append(vars(spec))
        return RehearseResult(True, (), (), readme_folder / "logs", 4, "gloo", False)

    monkeypatch.setattr(rehearse_module, "rehearse_manifests", rehearse_manifests)
    for command in of_kind(REHEARSE):
        result = invoke(command)
        assert result.exit_code == 0, f"{command}: {result.output}"
        kw = calls.pop()
        argv = command.argv
        if "--procs-per-pod" in argv:
            assert kw["procs_per_pod"] == int(argv[argv.index("--procs-per-pod") + 1])
        assert kw["restart_after_checkpoint"] == ("--restart-after-checkpoint" in argv)
        assert kw["network"] == (argv[argv.index("--network") + 1] if "--network" in argv else "auto")


def test_every_interactive_command_runs_on_a_terminal(tmp_path: Path) -> None:
    answers = {
        "Run:ai project": "nlp-lab",
        "Layout": "h200-2x8-ib",
        "Workload name": "readme",
        "Image": IMAGE,
        "Entry point": "train.py --config c.yaml",
        "Model size": "7B",
        "local batch": "4",
        "accumulation": "8",
        "Parallelism": "fsdp",
    }
    for command in of_kind(INTERACTIVE):
        folder = tmp_path / command.argv[1]
        folder.mkdir()
        code, shown = interview([sys.executable, "-m", "runai_spec", *command.argv[1:]], folder, answers)
        assert code == 0, shown
        result = runner.invoke(app, ["validate", str(folder / "profile.yaml")])
        assert result.exit_code == 0 and "warning:" not in result.stderr, result.output
