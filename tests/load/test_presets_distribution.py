"""`presets sync` from a folder (the presets repository's checkout): the site's new presets reach
an installed tool, trusted only through the allowed_signers the installation pins, all or nothing,
and verified again on every read of the synced copy; `presets list --project`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ENGINEER, allow_signer, cli, make_key
from runai_spec.errors import EXIT_INPUT, EXIT_OK
from runai_spec.load.distribution import FROM_ENV
from runai_spec.load.registry import SYNC_RECORD, PresetRegistry, synced_presets_dir

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

NEW = "h200-4gpu"  # the preset the engineers merged after this installation was released


def problems(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(("error: ", "hint: "))]


def add_preset(folder: Path, key: Path, *, today: dt.date | None = None, expires: str | None = None) -> Path:
    """The engineers' merge in FOLDER: preset NEW (four GPUs), granted to nlp-lab in site.yaml,
    both approved with KEY (which FOLDER's own allowed_signers must list)."""
    eight = (folder / "h200-8gpu.yaml").read_text()
    path = folder / f"{NEW}.yaml"
    path.write_text(eight.replace("gpus_per_pod: 8", "gpus_per_pod: 4").replace("Eight", "Four"))
    site = folder / "site.yaml"
    assert site.read_text().count("\n  nlp-lab: [") == 1  # the grant the merge request adds
    site.write_text(site.read_text().replace("\n  nlp-lab: [", f"\n  nlp-lab: [{NEW}, "))
    registry = PresetRegistry(folder, today=today)
    registry.approve("site", key)
    registry.approve(NEW, key, expires=expires)
    return path


@pytest.fixture
def checkout(tmp_path: Path, presets_dir: Path, engineer_key: Path) -> Path:
    """The presets repository's presets/ after the merge of NEW (e.g. a checkout on NFS), its
    approvals signed by the engineer whose key this installation (presets_dir) pins."""
    folder = tmp_path / "nfs" / "presets"
    shutil.copytree(presets_dir, folder)
    add_preset(folder, engineer_key)
    return folder


@pytest.fixture
def profile(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> Path:
    """nlp-lab's profile on the new preset (one pod of four GPUs)."""
    base_profile.update(project="nlp-lab", preset=NEW)
    base_profile["batch"] = {"local": 4, "grad_accum": 2, "global": 32}
    return write_profile(base_profile)


def synced() -> dict[str, bytes]:
    folder = synced_presets_dir()
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def test_an_approved_merge_reaches_the_installed_tool(checkout: Path, profile: Path) -> None:
    code, _, stderr = cli("validate", str(profile))
    assert code == EXIT_INPUT and f"unknown preset '{NEW}'" in stderr  # before: the release's presets
    code, stdout, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_OK, stderr
    assert f"ok: {NEW}.yaml" in stdout.splitlines()
    assert stderr.startswith(f"synced 7 files from {checkout} into {synced_presets_dir()}; verified against ")
    code, _, stderr = cli("validate", str(profile))
    assert code == EXIT_OK, stderr
    assert PresetRegistry().get(NEW).preset.gpus_per_pod == 4
    assert (synced_presets_dir() / f"{NEW}.yaml").read_bytes() == (checkout / f"{NEW}.yaml").read_bytes()


def test_the_source_is_remembered_and_a_site_may_set_it(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, stderr = cli("presets", "sync")
    assert code == EXIT_INPUT
    assert problems(stderr)[0] == "error: --from: no presets source: this installation has never synced"
    monkeypatch.setenv(FROM_ENV, str(checkout))
    assert cli("presets", "sync")[0] == EXIT_OK
    monkeypatch.delenv(FROM_ENV)
    (checkout / f"{NEW}.yaml").unlink()  # a later merge removes a preset
    ledger = yaml.safe_load((checkout / "approvals.yaml").read_text())
    del ledger["approvals"][f"{NEW}.yaml"]
    (checkout / "approvals.yaml").write_text(yaml.safe_dump(ledger))
    code, stdout, stderr = cli("presets", "sync")  # the last sync's source
    assert code == EXIT_OK, stderr
    assert f"{NEW}.yaml" not in stdout and not (synced_presets_dir() / f"{NEW}.yaml").exists()
    record = json.loads((synced_presets_dir() / SYNC_RECORD).read_text())
    assert record["from"] == str(checkout)


def test_a_tampered_preset_is_refused_and_nothing_changes(checkout: Path, profile: Path) -> None:
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    before = synced()
    preset = checkout / "h200-8gpu.yaml"
    preset.write_text(preset.read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 64"))
    code, stdout, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT and stdout == ""
    assert problems(stderr) == [
        f"error: {preset}: sha256: edited since it was approved (sha256 differs from the ledger)",
        "hint: nothing was synced, the presets in use are unchanged; every approval must verify "
        f"against this installation's allowed_signers ({PresetRegistry().allowed_signers_path}): "
        "tell the SCC AI Engineers",
    ]
    assert synced() == before
    assert cli("validate", str(profile))[0] == EXIT_OK  # the set synced before stays in use


def test_a_forged_ledger_entry_is_refused(checkout: Path) -> None:
    preset = checkout / "h200-8gpu.yaml"
    preset.write_text(preset.read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 64"))
    ledger = yaml.safe_load((checkout / "approvals.yaml").read_text())
    ledger["approvals"]["h200-8gpu.yaml"]["sha256"] = hashlib.sha256(preset.read_bytes()).hexdigest()
    (checkout / "approvals.yaml").write_text(yaml.safe_dump(ledger))
    code, _, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT
    error = problems(stderr)[0]
    assert error.startswith(
        f"error: {preset}: signature: the signature of h200-8gpu.yaml's approval does not verify"
    )
    assert synced() == {}


def test_an_unknown_signer_is_refused_though_the_checkout_lists_it(
    tmp_path: Path, checkout: Path, presets_dir: Path
) -> None:
    """Trust is pinned: a key the checkout's own allowed_signers adds vouches for nothing."""
    rogue = make_key(tmp_path, "rogue")
    allow_signer(checkout, rogue, "rogue@example.org")
    PresetRegistry(checkout).approve(NEW, rogue)
    assert PresetRegistry(checkout).verify().problems == ()  # the checkout, by its own keys: fine
    code, _, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT
    (error, hint) = problems(stderr)
    assert error == (
        f"error: {checkout / (NEW + '.yaml')}: signature: the signature of {NEW}.yaml's approval does not "
        "verify for 'rogue@example.org' against allowed_signers (no line of allowed_signers lists this "
        "ssh-ed25519 key for 'rogue@example.org')"
    )
    assert str(presets_dir / "allowed_signers") in hint and synced() == {}


def test_an_expired_approval_is_refused(tmp_path: Path, presets_dir: Path, engineer_key: Path) -> None:
    folder = tmp_path / "nfs" / "presets"
    shutil.copytree(presets_dir, folder)
    add_preset(folder, engineer_key, today=dt.date(2026, 1, 5), expires="2026-06-30")
    code, _, stderr = cli("presets", "sync", "--from", str(folder))
    assert code == EXIT_INPUT
    assert (
        problems(stderr)[0] == f"error: {folder / (NEW + '.yaml')}: expires: approval expired on 2026-06-30"
    )
    assert synced() == {}


def test_the_synced_copy_is_verified_again_on_every_read(
    checkout: Path, profile: Path, presets_dir: Path, engineer_key: Path
) -> None:
    """A cache proves nothing: an edit in it, an approval that has expired since, or a key the
    installation no longer pins is refused at the next read."""
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    later = PresetRegistry(today=dt.date(2100, 1, 1))
    with pytest.raises(Exception, match="approval expired on"):
        later.get(NEW)
    cached = synced_presets_dir() / f"{NEW}.yaml"
    original = cached.read_bytes()
    cached.write_bytes(original.replace(b"gpus_per_pod: 4", b"gpus_per_pod: 64"))
    code, _, stderr = cli("validate", str(profile))
    assert code == EXIT_INPUT and f"{cached}: sha256: edited since it was approved" in stderr
    code, stdout, _ = cli("presets", "list")
    assert f"{NEW:28} REFUSED: edited since it was approved" in stdout
    cached.write_bytes(original)
    assert cli("validate", str(profile))[0] == EXIT_OK
    signers = presets_dir / "allowed_signers"  # a release that drops the engineer's key
    signers.write_text("".join(ln for ln in signers.read_text().splitlines(True) if ENGINEER not in ln))
    code, _, stderr = cli("validate", str(profile))
    assert code == EXIT_INPUT and "signature" in stderr and NEW in stderr


def test_a_linked_file_in_the_source_is_refused(checkout: Path) -> None:
    (checkout / "h200-1gpu.yaml").unlink()
    (checkout / "h200-1gpu.yaml").symlink_to(checkout / "h200-8gpu.yaml")
    code, _, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT
    assert problems(stderr)[0] == (
        f"error: {checkout / 'h200-1gpu.yaml'}: is not a plain file (a link?); presets must be plain files"
    )


def test_a_folder_that_is_no_presets_folder_is_refused(tmp_path: Path) -> None:
    code, _, stderr = cli("presets", "sync", "--from", str(tmp_path / "nowhere"))
    assert (
        code == EXIT_INPUT and problems(stderr)[0] == f"error: {tmp_path / 'nowhere'}: --from: no such folder"
    )
    (tmp_path / "empty").mkdir()
    code, _, stderr = cli("presets", "sync", "--from", str(tmp_path / "empty"))
    assert code == EXIT_INPUT
    assert problems(stderr)[0] == (
        f"error: {tmp_path / 'empty'}: --from: no approvals.yaml and no site.yaml: not a presets folder"
    )


def test_approve_refuses_the_synced_copy(checkout: Path, engineer_key: Path) -> None:
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    code, _, stderr = cli("presets", "approve", NEW, "--key", str(engineer_key))
    assert code == EXIT_INPUT
    assert problems(stderr)[0].startswith(
        f"error: {synced_presets_dir()}: --dir: the presets in use are a synced copy"
    )


def test_list_names_where_synced_presets_came_from(checkout: Path) -> None:
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    code, stdout, stderr = cli("presets", "list")
    assert code == EXIT_OK
    assert any(line.startswith(f"{NEW:28} single-node  1 x 4 NVIDIA H200") for line in stdout.splitlines())
    assert stderr.startswith(f"presets: synced from {checkout} at ")


def test_list_project_shows_what_the_project_is_granted(presets_dir: Path) -> None:
    def listed(project: str) -> list[str]:
        code, stdout, _ = cli("presets", "list", "--project", project)
        assert code == EXIT_OK
        return [line.split()[0] for line in stdout.splitlines()]

    assert listed("vision-lab") == ["h200-1gpu", "h200-8gpu"]
    assert listed("nlp-lab") == ["h200-1gpu", "h200-2x8-ib", "h200-8gpu", "h200-elastic-2to4x8-ib"]
    assert listed("someone-else") == ["h200-1gpu"]  # `*`: every project
    assert (
        cli("presets", "list", "-p", "vision-lab")[1] == cli("presets", "list", "--project", "vision-lab")[1]
    )


def test_list_project_granted_nothing_says_so(presets_dir: Path, engineer_key: Path) -> None:
    site = presets_dir / "site.yaml"
    site.write_text(site.read_text().replace('"*": [h200-1gpu]', "vision-lab-2: [h200-1gpu]"))
    PresetRegistry(presets_dir).approve("site", engineer_key)
    code, stdout, stderr = cli("presets", "list", "--project", "someone-else")
    assert code == EXIT_OK and stdout == ""
    assert problems(stderr) == [
        "hint: ask the SCC AI Engineers for a grant (site.yaml `grants`); "
        "`runai-spec presets sync` fetches the site's latest"
    ]
    assert "warning: project 'someone-else' is granted no approved preset" in stderr


def test_a_cache_that_cannot_be_written_is_bad_input_not_a_crash(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    code, _, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT
    (error, hint) = problems(stderr)
    assert error.startswith(f"error: {blocked / 'runai-spec' / 'presets'}: cannot write the synced presets: ")
    assert hint.startswith("hint: check that the folder can be written")


def test_what_a_killed_sync_left_is_removed_by_the_next(checkout: Path) -> None:
    left = synced_presets_dir().with_name(".presets.sync-12345-0")
    left.mkdir(parents=True)
    (left / "h200-8gpu.yaml").write_text("half written")
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    assert not left.exists()
    assert sorted(p.name for p in synced_presets_dir().parent.iterdir()) == [".presets.lock", "presets"]


def test_from_shipped_goes_back_to_the_installation_s_own_presets(checkout: Path, presets_dir: Path) -> None:
    """A newer release brings its own presets: the synced copy would hide them until removed."""
    assert cli("presets", "sync", "--from", str(checkout))[0] == EXIT_OK
    assert PresetRegistry().synced
    code, stdout, stderr = cli("presets", "sync", "--from", "shipped")
    assert code == EXIT_OK and stdout == ""
    assert stderr == (
        f"presets: the synced copy is removed; in use: those shipped with runai-spec ({presets_dir})\n"
    )
    registry = PresetRegistry()
    assert not registry.synced and registry.root == presets_dir and NEW not in registry.names()
    assert not synced_presets_dir().exists()
    assert cli("presets", "sync", "--from", "shipped")[0] == EXIT_OK  # nothing synced: nothing to do


def test_an_unreadable_file_in_the_source_is_bad_input_not_a_crash(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = str(checkout / "h200-8gpu.yaml")
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == denied:  # what chmod 000 does to anyone but root
            raise PermissionError(13, "Permission denied", denied)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    code, _, stderr = cli("presets", "sync", "--from", str(checkout))
    assert code == EXIT_INPUT
    assert problems(stderr) == [
        f"error: {denied}: --from: cannot read: Permission denied",
        "hint: nothing was synced; check that the folder and its files can be read",
    ]
