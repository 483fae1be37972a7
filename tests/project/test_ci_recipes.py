"""The CI recipes of examples/ci/: every command of each recipe, parsed out of the file, run
in a checkout laid out as the recipe says (a presets repository, a researcher repository):
all pass on a good checkout, and the step that should catch a bad one fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, allow_signer, make_key

CI = ROOT / "examples" / "ci"
LAYOUTS = ["single-gpu", "single-node", "multi-node", "elastic"]
RESEARCHER = ["researcher-repository.gitlab-ci.yml", "researcher-repository.github-actions.yml"]
PRESETS = "presets-repository.gitlab-ci.yml"


def recipe_commands(path: Path) -> list[str]:
    """The commands a recipe runs to check a merge request: GitLab's `script` of every job,
    GitHub's `run` steps but the install and the on-failure report."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    commands: list[str] = []
    if "jobs" in doc:  # GitHub Actions
        for job in doc["jobs"].values():
            commands += [
                step["run"]
                for step in job["steps"]
                if "run" in step and "if" not in step and not step["run"].startswith("pip install")
            ]
    else:  # GitLab CI: every mapping with a script is a job
        for job in doc.values():
            if isinstance(job, dict) and "script" in job:
                commands += job["script"]
    assert commands and all(isinstance(c, str) for c in commands), commands
    return commands


def run_recipe(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """COMMAND as the CI shell runs it, `runai-spec` being this checkout's."""
    if command.startswith("runai-spec "):
        command = f"{sys.executable} -m runai_spec {command.removeprefix('runai-spec ')}"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True)


def run_all(commands: list[str], cwd: Path) -> list[int]:
    return [run_recipe(c, cwd).returncode for c in commands]


def researcher_repository(tmp: Path) -> Path:
    repo = tmp / "researcher"
    (repo / "profiles").mkdir(parents=True)
    (repo / "manifests").mkdir()
    for layout in LAYOUTS:
        example = ROOT / "examples" / layout
        shutil.copy(example / "profile.yaml", repo / "profiles" / f"{layout}.yaml")
        name = yaml.safe_load((example / "profile.yaml").read_text())["name"]
        shutil.copy(example / "manifest.yaml", repo / "manifests" / f"{name}.yaml")
    return repo


@pytest.mark.parametrize("recipe", RESEARCHER)
def test_the_researcher_recipe_passes_and_catches_drift(recipe: str, tmp_path: Path) -> None:
    commands = recipe_commands(CI / recipe)
    assert [c.split()[:2] for c in commands] == [["runai-spec", "validate"], ["runai-spec", "diff"]]
    assert not any("presets" in c for c in commands)  # the presets repository's business
    repo = researcher_repository(tmp_path)
    for command in commands:
        done = run_recipe(command, repo)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert (repo / "drift.md").is_file()
    manifest = next((repo / "manifests").glob("*.yaml"))
    manifest.write_text(manifest.read_text().replace("backoffLimit: 3", "backoffLimit: 9"))
    assert "backoffLimit: 9" in manifest.read_text()
    assert run_all(commands, repo) == [0, 1]


def presets_repository(tmp: Path) -> Path:
    """The AI Engineers' repository: presets/ and the committed policy in deploy/."""
    repo = tmp / "presets-repo"
    shutil.copytree(ROOT / "presets", repo / "presets")
    done = run_recipe("runai-spec presets policy --dir presets/ -o deploy/", repo.parent / repo.name)
    assert done.returncode == 0, done.stderr
    return repo


@pytest.mark.heavy
def test_the_presets_recipe_passes_and_catches_what_it_should(tmp_path: Path) -> None:
    commands = recipe_commands(CI / PRESETS)
    assert [c.split()[:3] for c in commands] == [
        ["runai-spec", "presets", "verify"],
        ["runai-spec", "presets", "policy"],
        ["diff", "-ru", "deploy/"],
    ]
    assert all("--dir presets/" in c for c in commands[:2])
    repo = presets_repository(tmp_path)
    for command in commands:
        done = run_recipe(command, repo)
        assert done.returncode == 0, (command, done.stdout, done.stderr)

    # an approval merged without regenerating the committed policy: the diff step fails
    preset = repo / "presets" / "h200-8gpu.yaml"
    good = preset.read_text()
    preset.write_text(good.replace('cpu: "96"', 'cpu: "64"'))
    assert run_all(commands, repo)[0] == 1  # edited, not approved
    key = make_key(tmp_path, "engineer")
    allow_signer(repo / "presets", key, "engineer@scc.example.org")
    approved = run_recipe(f"runai-spec presets approve h200-8gpu --key {key} --dir presets/", repo)
    assert approved.returncode == 0, approved.stderr
    assert run_all(commands, repo) == [0, 0, 1]
    shutil.rmtree(repo / "deploy")
    (repo / "generated").rename(repo / "deploy")  # the engineers commit what was generated
    assert run_all(commands, repo) == [0, 0, 0]

    # a policy edited by hand in the repository: the diff step fails
    policy = repo / "deploy" / "policy.yaml"
    policy.write_text(policy.read_text().replace("terminationGracePeriodSeconds", "x", 1))
    assert run_all(commands, repo) == [0, 0, 1]


def test_the_presets_recipe_installs_ssh_keygen_for_the_signatures() -> None:
    doc = yaml.safe_load((CI / PRESETS).read_text())
    assert any("openssh-client" in line for line in doc["presets"]["before_script"])
    doc = yaml.safe_load((CI / RESEARCHER[0]).read_text())
    assert any("openssh-client" in line for line in doc["runai-spec"]["before_script"])
