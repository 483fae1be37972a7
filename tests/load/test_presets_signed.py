"""Signed approvals end to end: `presets approve --key`, the ledger's signatures, and every
load of a preset (render, validate, verify) refusing an approval that does not verify."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import ENGINEER, ROOT, allow_signer, cli, make_key
from runai_spec import resources
from runai_spec.errors import PresetError
from runai_spec.load.registry import PresetRegistry

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

SINGLE_NODE = str(ROOT / "examples" / "single-node" / "profile.yaml")


def tamper(presets: Path, priority: bool = True) -> Path:
    """The researcher's edit: 64 GPUs (and a class the cluster reserves for itself)."""
    path = presets / "h200-8gpu.yaml"
    text = path.read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 64")
    if priority:
        text = text.replace("priority: medium-low", "priority: system-cluster-critical")
    path.write_text(text)
    return path


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_a_researcher_cannot_approve_an_edited_preset_by_typing_a_name(presets_dir: Path) -> None:
    """The must-hold of issue 14: edit a preset, `presets approve --by "A. Engineer"` without
    an engineer's key: refused, exit 2, naming the signature; nothing is written, and the
    edited preset stays refused everywhere."""
    ledger = (presets_dir / "approvals.yaml").read_bytes()
    tamper(presets_dir)
    code, _, stderr = cli("presets", "approve", "h200-8gpu", "--by", "A. Engineer")
    assert code == 2
    (error,) = error_lines(stderr)
    assert error.startswith("error: --by: ") and "SSH signature" in error
    assert "hint: sign it: `runai-spec presets approve h200-8gpu --key" in stderr
    code, _, stderr = cli("presets", "approve", "h200-8gpu")  # no --by, no key either
    assert code == 2 and error_lines(stderr) == [
        "error: --key: an approval needs an AI Engineer's SSH signature: no signing key given"
    ]
    assert (presets_dir / "approvals.yaml").read_bytes() == ledger
    code, _, stderr = cli("render", SINGLE_NODE)
    assert code == 2 and "h200-8gpu.yaml: sha256: edited since it was approved" in stderr
    assert cli("presets", "verify")[0] == 1


def test_a_researcher_s_own_key_is_not_an_engineer_s(presets_dir: Path, tmp_path: Path) -> None:
    ledger = (presets_dir / "approvals.yaml").read_bytes()
    tamper(presets_dir, priority=False)
    own = make_key(tmp_path, "researcher")
    code, _, stderr = cli("presets", "approve", "h200-8gpu", "--key", str(own))
    assert code == 2
    (error,) = error_lines(stderr)
    assert error == f"error: {own}: --key: this key is not listed in allowed_signers"
    assert (presets_dir / "approvals.yaml").read_bytes() == ledger


def test_an_engineer_s_key_signs_an_approval_that_verifies(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("backoff_limit: 3", "backoff_limit: 5"))
    assert cli("render", SINGLE_NODE)[0] == 2
    code, _, stderr = cli(
        "presets", "approve", "h200-8gpu", "--key", str(engineer_key), "--expires", "2027-06-30"
    )
    assert code == 0, stderr
    assert f"signed by {ENGINEER}" in stderr
    entry = yaml.safe_load((presets_dir / "approvals.yaml").read_text())["approvals"]["h200-8gpu.yaml"]
    assert entry["approved_by"] == ENGINEER  # the key's principal, never typed
    assert entry["signature"].startswith("-----BEGIN SSH SIGNATURE-----\n")
    code, stdout, stderr = cli("presets", "verify", "--dir", str(presets_dir))
    assert code == 0, stderr
    assert "ok: h200-8gpu.yaml" in stdout and "ok: site.yaml" in stdout
    assert PresetRegistry(presets_dir).get("h200-8gpu").preset.run_policy.backoff_limit == 5
    assert cli("render", SINGLE_NODE)[0] == 0
    # `presets show` shows the approval, not the armored signature
    code, stdout, _ = cli("presets", "show", "h200-8gpu")
    assert code == 0 and f'approved_by: "{ENGINEER}"' in stdout and "SSH SIGNATURE" not in stdout


def _ledger(presets: Path) -> tuple[Path, dict[str, dict[str, str]]]:
    path = presets / "approvals.yaml"
    return path, yaml.safe_load(path.read_text())["approvals"]


def _write(path: Path, approvals: dict[str, dict[str, str]]) -> None:
    path.write_text(yaml.safe_dump({"approvals": approvals}))


@pytest.mark.parametrize(
    "forgery",
    ["other-entry-signature", "garbled", "sha256-updated", "longer-expiry", "other-approver", "unsigned"],
)
def test_an_edited_ledger_is_refused_like_an_edited_preset(presets_dir: Path, forgery: str) -> None:
    path, approvals = _ledger(presets_dir)
    entry = approvals["h200-8gpu.yaml"]
    if forgery == "other-entry-signature":
        entry["signature"] = approvals["h200-1gpu.yaml"]["signature"]
    elif forgery == "garbled":
        lines = entry["signature"].splitlines()
        lines[2] = lines[2][:-4] + ("AAAA" if not lines[2].endswith("AAAA") else "BBBB")
        entry["signature"] = "\n".join(lines) + "\n"
    elif forgery == "sha256-updated":
        entry["sha256"] = hashlib.sha256(tamper(presets_dir).read_bytes()).hexdigest()
    elif forgery == "longer-expiry":
        entry["expires"] = "2099-12-31"
    elif forgery == "other-approver":
        entry["approved_by"] = "a-engineer"
    else:
        del entry["signature"]
    _write(path, approvals)
    code, stdout, stderr = cli("presets", "verify", "--dir", str(presets_dir))
    assert code == 1
    assert "ok: h200-1gpu.yaml" in stdout and "ok: h200-8gpu.yaml" not in stdout
    (error,) = error_lines(stderr)
    assert error.startswith(f"error: {presets_dir / 'h200-8gpu.yaml'}: signature: ")
    if forgery == "unsigned":
        assert "the approval in approvals.yaml is not signed" in error
    else:
        assert "does not verify" in error
    code, _, stderr = cli("render", SINGLE_NODE)
    assert code == 2 and error_lines(stderr) == [error]
    assert "hint: " in stderr and "--key" in stderr
    code, _, stderr = cli("validate", SINGLE_NODE)
    assert code == 2 and error_lines(stderr) == [error]


def test_an_edited_site_approval_refuses_every_preset(presets_dir: Path) -> None:
    path, approvals = _ledger(presets_dir)
    approvals["site.yaml"]["signature"] = approvals["h200-1gpu.yaml"]["signature"]
    _write(path, approvals)
    with pytest.raises(PresetError, match="signature of site.yaml's approval does not verify"):
        PresetRegistry(presets_dir).get("h200-8gpu")


def test_a_key_added_to_allowed_signers_without_review_is_what_ci_and_the_cluster_catch(
    presets_dir: Path, tmp_path: Path
) -> None:
    """A checkout whose allowed_signers lists a researcher's key verifies locally: that is
    why allowed_signers is owned in CODEOWNERS and why the cluster admits only the deployed
    shapes. The shipped folder still refuses the forged ledger entry."""
    own = make_key(tmp_path, "researcher")
    allow_signer(presets_dir, own, "a-researcher")
    tamper(presets_dir, priority=False)
    assert cli("presets", "approve", "h200-8gpu", "--key", str(own))[0] == 0
    assert cli("presets", "verify", "--dir", str(presets_dir))[0] == 0
    forged = presets_dir / "approvals.yaml"
    shipped = tmp_path / "shipped"
    shutil.copytree(ROOT / "presets", shipped)
    shutil.copy(forged, shipped / "approvals.yaml")
    shutil.copy(presets_dir / "h200-8gpu.yaml", shipped / "h200-8gpu.yaml")
    code, _, stderr = cli("presets", "verify", "--dir", str(shipped))
    assert code == 1 and "h200-8gpu.yaml: signature: " in stderr and "a-researcher" in stderr
    assert (ROOT / "CODEOWNERS").read_text().count("/presets/allowed_signers") == 1


def test_no_allowed_signers_is_one_problem(presets_dir: Path) -> None:
    (presets_dir / "allowed_signers").unlink()
    code, stdout, stderr = cli("presets", "verify", "--dir", str(presets_dir))
    assert code == 1 and stdout == ""
    assert error_lines(stderr) == [
        f"error: {presets_dir / 'allowed_signers'}: allowed_signers: "
        "no such plain file; no approval can verify without the "
        "engineers' keys"
    ]
    code, _, stderr = cli("render", SINGLE_NODE)
    assert code == 2 and "allowed_signers: no such plain file" in stderr


def test_without_ssh_keygen_presets_verify_and_load_and_only_approve_needs_it(
    presets_dir: Path, engineer_key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Approvals verify in-process (issue 29 item 3): a slim image without OpenSSH verifies
    and renders; signing (approve) still needs ssh-keygen, one clear error with a hint."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, stdout, stderr = cli("presets", "verify")
    assert code == 0 and "ok: h200-8gpu.yaml" in stdout and stderr == "", stderr
    assert cli("render", SINGLE_NODE)[0] == 0
    assert cli("validate", SINGLE_NODE)[0] == 0
    code, stdout, stderr = cli("presets", "approve", "h200-8gpu", "--key", str(engineer_key))
    assert code == 2, stderr
    (error,) = error_lines(stderr)
    assert error.endswith("signature: ssh-keygen not found; approving (signing) needs it"), error
    assert "hint: install OpenSSH 8.2 or newer" in stderr and "Traceback" not in stderr
    assert stdout == ""
    tamper(presets_dir)  # and an edited preset is still refused without ssh-keygen
    code, _, stderr = cli("render", SINGLE_NODE)
    assert code == 2 and "sha256: edited since it was approved" in stderr


def test_approve_refuses_the_presets_inside_the_installed_package(
    monkeypatch: pytest.MonkeyPatch, presets_dir: Path, engineer_key: Path
) -> None:
    ledger = (presets_dir / "approvals.yaml").read_bytes()
    monkeypatch.setattr(resources, "inside_installed_package", lambda root: root == presets_dir)
    code, _, stderr = cli("presets", "approve", "h200-8gpu", "--key", str(engineer_key))
    assert code == 2
    assert error_lines(stderr) == [
        f"error: {presets_dir}: --dir: the shipped presets are inside the installed package; "
        "approve writes only into a presets repository"
    ]
    assert (presets_dir / "approvals.yaml").read_bytes() == ledger
    # --dir names the presets repository's checkout: written there
    code, _, stderr = cli(
        "presets", "approve", "h200-8gpu", "--key", str(engineer_key), "--dir", str(presets_dir)
    )
    assert code == 0, stderr


def test_inside_installed_package_is_the_package_folder_only(tmp_path: Path) -> None:
    package = Path(resources.__file__).resolve().parent
    assert resources.inside_installed_package(package / "presets")
    assert resources.inside_installed_package(package)
    assert not resources.inside_installed_package(tmp_path)
    assert not resources.inside_installed_package(ROOT / "presets")  # a source checkout's
    link = tmp_path / "link"
    link.symlink_to(package)
    assert resources.inside_installed_package(link / "presets")


@pytest.mark.parametrize("command", ["list", "show", "approve", "verify", "policy"])
def test_every_presets_command_shows_dir_in_its_help(command: str) -> None:
    code, stdout, _ = cli("presets", command, "--help")
    assert code == 0 and re.search(r"--dir\b", stdout), stdout
    if command == "approve":
        assert "--key" in stdout and "--by" not in stdout


def test_approve_never_writes_through_a_link_at_the_old_temporary_name(
    presets_dir: Path, engineer_key: Path, tmp_path: Path
) -> None:
    # red team: the ledger went through the fixed name `.approvals.yaml.tmp`; a link planted
    # there sent the new ledger to a file of the planter's choosing
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    (presets_dir / ".approvals.yaml.tmp").symlink_to(outside)
    code, _, stderr = cli("presets", "approve", "h200-8gpu", "--key", str(engineer_key))
    assert code == 0, stderr
    assert outside.read_text() == "keep me\n"
    assert "h200-8gpu.yaml" in yaml.safe_load((presets_dir / "approvals.yaml").read_text())["approvals"]
    assert not (presets_dir / "approvals.yaml").is_symlink()


def test_approve_warns_when_no_installation_pins_the_engineer_s_key_yet(
    presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    """Issue 41 item 7: a new engineer's key, listed in the presets repository's
    allowed_signers but not in the one this installation ships (pins), signs; approve says
    that researchers' `presets sync` refuses the approval until a release ships the key."""
    repository = tmp_path / "repository" / "presets"
    shutil.copytree(ROOT / "presets", repository)
    allow_signer(repository, _engineer_key, ENGINEER)
    code, _, stderr = cli(
        "presets", "approve", "h200-8gpu", "--key", str(_engineer_key), "--dir", str(repository)
    )
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f"warning: {presets_dir / 'allowed_signers'}: the key that signed is not pinned for {ENGINEER} by "
        "this installation of runai-spec: researchers' `presets sync` refuses this approval until a "
        "release of runai-spec ships allowed_signers with it (docs/presets-distribution.md)"
    ]
    allow_signer(presets_dir, _engineer_key, ENGINEER)  # a release that pins it
    code, _, stderr = cli(
        "presets", "approve", "h200-8gpu", "--key", str(_engineer_key), "--dir", str(repository)
    )
    assert code == 0 and "warning: " not in stderr, stderr


def test_an_edit_of_the_site_file_alone_is_named_as_such(presets_dir: Path) -> None:
    """Issue 41 item 7: the presets are not 'edited since approved' when only site.yaml is."""
    site = presets_dir / "site.yaml"
    site.write_text(site.read_text().replace("cluster: spike", "cluster: spike2"))
    code, stdout, _ = cli("presets", "list", "--dir", str(presets_dir))
    lines = stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("h200-8gpu ")] == [
        f"{'h200-8gpu':28} REFUSED: the site file (site.yaml) does not verify, see below"
    ]
    assert lines[-1].startswith(f"{'site.yaml':28} REFUSED: edited since it was approved")
    assert sum("edited since it was approved" in ln for ln in lines) == 1
