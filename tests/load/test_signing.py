"""Signed approvals with throwaway SSH keys and the real ssh-keygen."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import make_key
from runai_spec.errors import EXIT_INPUT
from runai_spec.load import signing
from runai_spec.load.signing import SignedApproval, Statement
from runai_spec.load.sshsig import SignatureError

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

SHA = "80f55c9da0a0fa945399b2184436e3acfac0d6daf5aaed18e7e3f4f57467b334"


def public(key: Path) -> str:
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {blob}"


@pytest.fixture(scope="session")
def _keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three throwaway keys, made once for the session (tests only read them)."""
    folder = tmp_path_factory.mktemp("signing-keys")
    return {name: make_key(folder, name) for name in ("alice", "bob", "mallory")}


@pytest.fixture
def keys(tmp_path: Path, _keys: dict[str, Path]) -> dict[str, Path]:
    """Two engineers in allowed_signers (git's format), one researcher key that is not; the
    allowed_signers file is each test's own (tests edit it)."""
    found = dict(_keys)
    signers = tmp_path / "allowed_signers"
    signers.write_text(
        "# AI Engineers' signing keys (reviewed through CODEOWNERS)\n"
        f'alice@scc.example.org namespaces="runai-spec,git" {public(found["alice"])}\n'
        f"bob@scc.example.org {public(found['bob'])}\n"
    )
    found["signers"] = signers
    return found


def approve(keys: dict[str, Path], who: str = "alice", **kwargs: str) -> SignedApproval:
    return signing.sign_approval(
        "h200-8gpu.yaml",
        SHA,
        keys[who],
        keys["signers"],
        approved_at=kwargs.get("approved_at", "2026-12-02"),
        expires=kwargs.get("expires", "2027-12-31"),
    )


def test_an_engineer_s_signed_approval_verifies_and_names_them(keys: dict[str, Path]) -> None:
    signed = approve(keys)
    assert signed.statement.approver == "alice@scc.example.org"  # from the key, not typed
    assert signed.signature.startswith("-----BEGIN SSH SIGNATURE-----\n")
    assert signing.verify_approval(signed, keys["signers"]) == "alice@scc.example.org"
    assert approve(keys, "bob").statement.approver == "bob@scc.example.org"


def test_the_statement_is_canonical() -> None:
    statement = Statement("h200-8gpu.yaml", SHA, "alice@scc.example.org", "2026-12-02", None)
    assert statement.text() == (
        "runai-spec approval v1\nnamespace: runai-spec\nfile: h200-8gpu.yaml\n"
        f"sha256: {SHA}\napprover: alice@scc.example.org\napproved_at: 2026-12-02\n"
        "expires: never\n"
    )


def test_a_key_not_in_allowed_signers_cannot_approve(keys: dict[str, Path]) -> None:
    with pytest.raises(SignatureError, match="not listed in allowed_signers") as caught:
        approve(keys, "mallory")
    assert caught.value.exit_code == EXIT_INPUT
    assert caught.value.field == "--key"


@pytest.mark.parametrize(
    "change",
    [
        {"sha256": "0" * 64},  # another file content
        {"file": "h200-2x8-ib.yaml"},  # another preset
        {"expires": "2099-12-31"},  # a longer approval
        {"approver": "bob@scc.example.org"},  # another engineer's name
        {"approved_at": "2026-12-03"},
    ],
)
def test_any_edit_of_a_signed_statement_fails_verification(
    keys: dict[str, Path], change: dict[str, str]
) -> None:
    signed = approve(keys)
    forged = SignedApproval(signed.statement._replace(**change), signed.signature)
    with pytest.raises(SignatureError, match="does not verify") as caught:
        signing.verify_approval(forged, keys["signers"], source="presets/approvals.yaml")
    assert caught.value.lines()[0].startswith("error: presets/approvals.yaml: signature: ")


def test_a_researcher_s_own_signature_under_an_engineer_s_name_fails(keys: dict[str, Path]) -> None:
    statement = Statement("h200-8gpu.yaml", SHA, "alice@scc.example.org", "2026-12-02")
    forged = SignedApproval(statement, signing.sign_text(statement.text(), keys["mallory"]))
    with pytest.raises(SignatureError, match="does not verify for 'alice@scc.example.org'"):
        signing.verify_approval(forged, keys["signers"])


def test_a_signature_of_another_namespace_fails(keys: dict[str, Path]) -> None:
    """A git commit signature (namespace git) is never an approval."""
    signed = approve(keys)
    git_sig = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(keys["alice"])],
        input=signed.statement.text(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with pytest.raises(SignatureError, match="does not verify"):
        signing.verify_approval(SignedApproval(signed.statement, git_sig), keys["signers"])


def test_removing_an_engineer_from_allowed_signers_revokes_their_approvals(keys: dict[str, Path]) -> None:
    signed = approve(keys, "bob")
    keys["signers"].write_text(
        "\n".join(line for line in keys["signers"].read_text().splitlines() if not line.startswith("bob@"))
        + "\n"
    )
    with pytest.raises(SignatureError, match="does not verify"):
        signing.verify_approval(signed, keys["signers"])


def test_a_key_restricted_to_other_namespaces_cannot_approve(keys: dict[str, Path]) -> None:
    keys["signers"].write_text(keys["signers"].read_text().replace('"runai-spec,git"', '"git"'))
    with pytest.raises(SignatureError, match="does not verify"):
        approve(keys)


def test_an_approval_dated_outside_the_key_s_validity_fails(keys: dict[str, Path]) -> None:
    """Verified at the approval's date, as git verifies at the commit's. The option's value
    is quoted (sshsig.c reads it with opt_dequote): unquoted, ssh-keygen skips the whole line,
    so the test refused for that reason alone before (the window check went untested)."""
    signed = approve(keys, "bob", approved_at="2026-12-02")
    plain = keys["signers"].read_text()

    def window(options: str) -> None:
        keys["signers"].write_text(plain.replace("bob@scc.example.org ", f"bob@scc.example.org {options} "))

    window('valid-after="20261201"')  # the window's own line is read: it verifies
    assert signing.verify_approval(signed, keys["signers"]) == "bob@scc.example.org"
    window('valid-after="20270101"')
    with pytest.raises(SignatureError, match="does not verify"):
        signing.verify_approval(signed, keys["signers"])
    window('valid-before="20261201"')
    with pytest.raises(SignatureError, match="does not verify"):
        signing.verify_approval(signed, keys["signers"])


def test_garbage_signatures_and_statements_are_refused(keys: dict[str, Path]) -> None:
    statement = approve(keys).statement
    with pytest.raises(SignatureError, match="not an SSH signature"):
        signing.verify_approval(SignedApproval(statement, "hello"), keys["signers"])
    with pytest.raises(SignatureError, match="not a signer's principal"):
        Statement("h200-8gpu.yaml", SHA, "A. Engineer", "2026-12-02")
    with pytest.raises(SignatureError, match="not a sha256"):
        Statement("h200-8gpu.yaml", "abc", "alice", "2026-12-02")
    with pytest.raises(SignatureError, match="not a file name"):
        Statement("../x.yaml", SHA, "alice", "2026-12-02")
    with pytest.raises(SignatureError, match="not a date"):
        Statement("x.yaml", SHA, "alice", "2026-12-02", "next year")


def test_a_statement_changed_or_unpickled_is_refused_as_one_built() -> None:
    """A Statement is a NamedTuple whose checks run in __new__: `_replace` and unpickling
    build through it too, as a dataclass's replace did (its unpickling skipped __post_init__)."""
    import pickle

    statement = Statement("h200-8gpu.yaml", SHA, "alice@scc.example.org", "2026-12-02")
    assert statement._replace(expires="2027-01-01").expires == "2027-01-01"
    assert pickle.loads(pickle.dumps(statement)) == statement
    with pytest.raises(SignatureError, match="not a sha256"):
        statement._replace(sha256="abc")
    with pytest.raises(SignatureError, match="not a file name"):
        statement._replace(file="../x.yaml")
    forged = pickle.dumps(statement).replace(b"alice@scc.example.org", b"alice@scc,example.org")
    with pytest.raises(SignatureError, match="not a signer's principal"):
        pickle.loads(forged)


def test_a_missing_key_or_allowed_signers_file_is_one_clear_error(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    with pytest.raises(SignatureError, match="no such key file"):
        signing.principal_of_key(tmp_path / "nope", keys["signers"])
    with pytest.raises(SignatureError, match="no such plain file"):
        signing.principal_of_key(keys["alice"], tmp_path / "nope")
    link = tmp_path / "linked_signers"
    link.symlink_to(keys["signers"])
    with pytest.raises(SignatureError, match="no such plain file"):
        signing.verify_approval(approve(keys), link)


def test_no_ssh_keygen_is_one_clear_error_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, keys: dict[str, Path]
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)  # the module signing looks ssh-keygen up with
    with pytest.raises(SignatureError, match="ssh-keygen not found") as caught:
        approve(keys)
    assert caught.value.hint is not None and "OpenSSH" in caught.value.hint
