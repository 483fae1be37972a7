"""Signed approvals: an SSH signature (`ssh-keygen -Y`, as git signs commits) of a canonical
statement, verified against the engineers' `presets/allowed_signers`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import PresetError

NAMESPACE = "runai-spec"
ALLOWED_SIGNERS_FILE = "allowed_signers"
STATEMENT_HEADER = "runai-spec approval v1"
SIGNATURE_BEGIN = "-----BEGIN SSH SIGNATURE-----"
SIGNATURE_END = "-----END SSH SIGNATURE-----"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
# a principal is one allowed_signers name: no spaces, commas, quotes or control characters
_PRINCIPAL = re.compile(r"^[^\s,\"'*?!]{1,256}$")
_ARMOR = re.compile(rf"^{SIGNATURE_BEGIN}\n[A-Za-z0-9+/=\n]+\n{SIGNATURE_END}\n?$")
TIMEOUT_S = 60


class SignatureError(PresetError):
    """An approval whose signature is missing, malformed or does not verify."""


@dataclass(frozen=True)
class Statement:
    """What an engineer signs: one ledger entry, in one canonical text."""

    file: str
    sha256: str
    approver: str
    approved_at: str
    expires: str | None = None

    def __post_init__(self) -> None:
        if not self.file or "/" in self.file or any(ch in self.file for ch in "\n\r\0"):
            raise SignatureError(f"{self.file!r} is not a file name of presets/", field="file")
        if not _SHA.match(self.sha256):
            raise SignatureError("not a sha256 (64 lowercase hex digits)", field="sha256")
        if not _PRINCIPAL.match(self.approver):
            raise SignatureError(f"{self.approver!r} is not a signer's principal", field="approved_by")
        for field, value in (("approved_at", self.approved_at), ("expires", self.expires)):
            if value is not None and not _DATE.match(value):
                raise SignatureError("not a date (YYYY-MM-DD)", field=field)

    def text(self) -> str:
        return (f"{STATEMENT_HEADER}\n"
                f"namespace: {NAMESPACE}\n"
                f"file: {self.file}\n"
                f"sha256: {self.sha256}\n"
                f"approver: {self.approver}\n"
                f"approved_at: {self.approved_at}\n"
                f"expires: {self.expires or 'never'}\n")


def ssh_keygen() -> str:
    """The ssh-keygen to run, or a SignatureError saying how to get one."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SignatureError("ssh-keygen not found; signed approvals need it to sign and verify",
                             field="signature",
                             hint="install OpenSSH 8.2 or newer (Debian/Ubuntu: apt-get install "
                                  "openssh-client), as git needs for signed commits")
    return found


def _run(args: list[str], data: str | None, what: str) -> subprocess.CompletedProcess[str]:
    # TZ=UTC: a valid-after/valid-before without a Z suffix and the approval's date are read
    # as UTC (ssh-keygen reads them in the local time zone), so an approval verifies alike on
    # every machine (see verify_time)
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    try:
        return subprocess.run([ssh_keygen(), *args], input=data, capture_output=True, text=True,
                              env=env, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SignatureError(f"ssh-keygen took over {TIMEOUT_S} s to {what}", field="signature",
                             hint="is the key protected by a passphrase no one typed?") from None
    except OSError as exc:
        raise SignatureError(f"cannot run ssh-keygen: {exc.strerror}", field="signature") from None


def _plain_file(path: Path, field: str) -> None:
    if path.is_symlink() or not path.is_file():
        raise SignatureError("no such plain file", file=str(path), field=field)


def _reason(stderr: str) -> str:
    useful = [line.strip() for line in stderr.splitlines()
              if line.strip() and not line.startswith("Signing data")]
    return useful[-1] if useful else "ssh-keygen failed"


def sign_text(text: str, key: Path) -> str:
    """TEXT signed with KEY (a private key, or a public key whose private half is in
    ssh-agent) in the runai-spec namespace: the armored SSH signature."""
    if not key.exists():
        raise SignatureError("no such key file", file=str(key), field="--key")
    done = _run(["-Y", "sign", "-n", NAMESPACE, "-f", str(key)], text, "sign")
    signature = done.stdout.replace("\r\n", "\n")
    if done.returncode != 0 or not _ARMOR.match(signature):
        raise SignatureError(f"cannot sign with this key: {_reason(done.stderr)}",
                             file=str(key), field="--key",
                             hint="use the SSH key listed for you in presets/allowed_signers")
    return signature if signature.endswith("\n") else signature + "\n"


def _with_signature_file(signature: str) -> tuple[tempfile.TemporaryDirectory[str], Path]:
    if not _ARMOR.match(signature):
        raise SignatureError("not an SSH signature (-----BEGIN SSH SIGNATURE-----)",
                             field="signature")
    folder = tempfile.TemporaryDirectory(prefix="runai-spec-sig-")
    path = Path(folder.name) / "statement.sig"
    path.write_text(signature, encoding="utf-8")
    return folder, path


def principals_of(signature: str, allowed_signers: Path) -> list[str]:
    """The principals allowed_signers lists for the key that made SIGNATURE."""
    _plain_file(allowed_signers, "allowed_signers")
    folder, path = _with_signature_file(signature)
    with folder:
        done = _run(["-Y", "find-principals", "-s", str(path), "-f", str(allowed_signers)],
                    None, "find the signer")
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def principal_of_key(key: Path, allowed_signers: Path) -> str:
    """The one principal allowed_signers lists for KEY (found by signing a probe, so that
    ssh-keygen itself reads allowed_signers): `--by` is never typed."""
    probe = sign_text(f"{STATEMENT_HEADER}\nprobe: which principal is this key?\n", key)
    found = principals_of(probe, allowed_signers)
    if not found:
        raise SignatureError("this key is not listed in allowed_signers", file=str(key),
                             field="--key",
                             hint=f"an AI Engineer's key is added to {allowed_signers} in a "
                                  "reviewed merge request")
    if len(found) > 1:
        raise SignatureError(f"this key is listed for several principals ({', '.join(found)})",
                             file=str(allowed_signers), field="allowed_signers",
                             hint="list each engineer's key once")
    return found[0]


@dataclass(frozen=True)
class SignedApproval:
    """A statement and its signature, as the ledger stores them."""

    statement: Statement
    signature: str


def sign_approval(file: str, sha256: str, key: Path, allowed_signers: Path, *,
                  approved_at: str, expires: str | None = None) -> SignedApproval:
    """Sign the approval of FILE (at SHA256) with KEY; the approver is the key's principal."""
    principal = principal_of_key(key, allowed_signers)
    statement = Statement(file, sha256, principal, approved_at, expires)
    signed = SignedApproval(statement, sign_text(statement.text(), key))
    verify_approval(signed, allowed_signers)  # a key the file restricts (namespaces, dates)
    return signed


def verify_approval(signed: SignedApproval, allowed_signers: Path, *,
                    source: str | None = None) -> str:
    """The approver, once the signature verifies for them against allowed_signers (at the
    approval's date); a SignatureError otherwise. Needs no network."""
    _plain_file(allowed_signers, "allowed_signers")
    statement = signed.statement
    folder, path = _with_signature_file(signed.signature)
    args = ["-Y", "verify", "-f", str(allowed_signers), "-I", statement.approver,
            "-n", NAMESPACE, "-s", str(path),
            f"-Overify-time={statement.approved_at.replace('-', '')}"]
    with folder:
        done = _run(args, statement.text(), "verify")
    if done.returncode != 0:
        raise SignatureError(
            f"the signature of {statement.file}'s approval does not verify for "
            f"{statement.approver!r} against {allowed_signers.name} ({_reason(done.stderr)})",
            file=source, field="signature",
            hint="an approval is signed by an AI Engineer: `runai-spec presets approve NAME "
                 "--key ~/.ssh/id_ed25519`")
    return statement.approver
