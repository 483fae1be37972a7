"""docs/presets-distribution.md runs as written: every command of its `sh` and `bash` blocks, in
the page's order, is the one path approve -> merge -> publish -> sync -> use.

The page's `sh` blocks also run in tests/project/test_readme.py (every docs page, offline); its
`bash` blocks need what only this test sets up: the engineer's key pinned by the installation
(the engineer approves, and researchers' tools trust that key), the merge request's files, and
the fake API server that `kubectl apply` writes to and `presets sync --from cluster` reads.
Commands that are not runai-spec's: `kubectl apply -f FILE` is played here (each document of
FILE stored on the fake API server); `git` is the presets repository's own workflow, not run.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, allow_signer, make_key, run
from kubeapi import KubeAPI
from runai_spec.load.registry import PresetRegistry, synced_presets_dir

pytest_plugins = ("kube_fixtures",)
pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

PAGE = ROOT / "docs" / "presets-distribution.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
RUN = ("sh", "bash")
NOT_RUN = {"git": "the presets repository's own workflow (commit, push, merge)"}
NEW = "h200-4gpu"  # the preset of the page's merge request


def commands() -> Iterator[list[str]]:
    """Every command of the page's sh and bash blocks, in order, comments off."""
    for fence, body in FENCE.findall(PAGE.read_text(encoding="utf-8")):
        if fence in RUN:
            for line in body.splitlines():
                if words := shlex.split(line, comments=True):
                    yield words


def test_the_page_shows_the_whole_path() -> None:
    ran = [tuple(words[1:3]) for words in commands() if words[0] == "runai-spec"]
    for step in (("presets", "approve"), ("presets", "publish"), ("presets", "sync"), ("presets", "list")):
        assert step in ran, step
    assert any(words[:2] == ["kubectl", "apply"] for words in commands())
    assert any("--project" in words for words in commands())
    assert {"--from", "cluster"} <= {w for words in commands() for w in words}


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, presets_dir: Path, engineer_key: Path) -> Path:
    """The engineer's and the researcher's folder: presets/ (the presets repository's checkout
    with the merge request's files: NEW, granted to nlp-lab) and profile.yaml on NEW."""
    work = tmp_path / "work"
    folder = work / "presets"
    shutil.copytree(presets_dir, folder)
    eight = (folder / "h200-8gpu.yaml").read_text()
    (folder / f"{NEW}.yaml").write_text(eight.replace("gpus_per_pod: 8", "gpus_per_pod: 4"))
    site = folder / "site.yaml"
    assert site.read_text().count("\n  nlp-lab: [") == 1  # the grant the merge request adds
    site.write_text(site.read_text().replace("\n  nlp-lab: [", f"\n  nlp-lab: [{NEW}, "))
    profile: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "single-node" / "profile.yaml").read_text())
    profile.update(project="nlp-lab", preset=NEW)
    batch = profile["batch"]
    batch["global"] = batch["local"] * 4 * batch.get("grad_accum", 1)
    (work / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    monkeypatch.chdir(work)
    return folder


def play(words: list[str], key: Path, api: KubeAPI) -> None:
    """One command of the page, as written (`~/.ssh/id_ed25519` is the engineer's key)."""
    if words[0] in NOT_RUN:
        return
    if words[:2] == ["kubectl", "apply"]:
        for document in yaml.safe_load_all(Path(words[words.index("-f") + 1]).read_text()):
            api.kube.put(document["kind"].lower() + "s", document)
        return
    assert words[0] == "runai-spec", f"{shlex.join(words)}: run it here or say why not"
    out = words.index(">") if ">" in words else None
    argv = [str(key) if w == "~/.ssh/id_ed25519" else w for w in words[1:out]]
    result = run(*argv)
    assert result.exit_code == 0, f"{shlex.join(words)}: {result.output}"
    if out is not None:
        Path(words[out + 1]).write_text(result.stdout, encoding="utf-8")
    if argv[:2] == ["presets", "list"]:
        assert result.stdout.splitlines()[0].split()[0] == "h200-1gpu"
        assert any(line.startswith(f"{NEW} ") for line in result.stdout.splitlines())


def test_every_command_of_the_page_runs(
    checkout: Path, engineer_key: Path, api: KubeAPI, kubeconfig: Path
) -> None:
    for words in commands():
        play(words, engineer_key, api)
    assert PresetRegistry().synced and PresetRegistry().get(NEW).preset.gpus_per_pod == 4
    assert (synced_presets_dir() / f"{NEW}.yaml").read_bytes() == (checkout / f"{NEW}.yaml").read_bytes()


def test_the_page_s_example_refusal_is_what_sync_prints(
    checkout: Path, engineer_key: Path, api: KubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    """The page's example: a preset published by an engineer whose key the installation does
    not pin, refused by `presets sync --from cluster` (the pinned file's path aside)."""
    example = [body for fence, body in FENCE.findall(PAGE.read_text(encoding="utf-8")) if "error: " in body]
    (shown,) = example
    rogue = make_key(tmp_path, "rogue")
    allow_signer(checkout, rogue, "rogue@example.org")
    registry = PresetRegistry(checkout)
    registry.approve("site", engineer_key)
    registry.approve(NEW, rogue)
    play(["runai-spec", "presets", "publish", "--dir", "presets/", ">", "files.yaml"], engineer_key, api)
    play(["kubectl", "apply", "-f", "files.yaml"], engineer_key, api)
    result = run("presets", "sync", "--from", "cluster")
    assert result.exit_code == 2
    pinned = str(PresetRegistry().allowed_signers_path)
    assert result.stderr.replace(pinned, "/opt/runai-spec/presets/allowed_signers") == shown
