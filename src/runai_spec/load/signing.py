"""Signed approvals: an engineer's SSH signature of one canonical statement per ledger entry."""

# Signing runs ssh-keygen (`ssh-keygen -Y sign`, as git signs commits: the engineer's key, or
# ssh-agent). Verifying runs in this process (sshsig.py) against the engineers'
# presets/allowed_signers, at the approval's date: no ssh-keygen is needed to load a preset.

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

from ..records import Record
from .allowed_signers import AllowedSigners, parse_absolute_time
from .sshsig import ARMOR, Invalid, SignatureError, signer_key, verify_sshsig

NAMESPACE = "runai-spec"
STATEMENT_HEADER = "runai-spec approval v1"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
# a principal is one allowed_signers name: no spaces, commas, quotes or control characters
_PRINCIPAL = re.compile(r"^[^\s,\"'*?!]{1,256}$")
TIMEOUT_S = 60


class _StatementFields(Record):
    file: str
    sha256: str
    approver: str
    approved_at: str
    expires: str | None = None


class Statement(_StatementFields):
    """What an engineer signs: one ledger entry, in one canonical text. Refused when built
    (`_replace` and unpickling included) unless every field has its form."""

    __slots__ = ()

    def __new__(
        cls, file: str, sha256: str, approver: str, approved_at: str, expires: str | None = None
    ) -> "Statement":
        if not file or "/" in file or any(ch in file for ch in "\n\r\0"):
            raise SignatureError(f"{file!r} is not a file name of presets/", field="file")
        if not _SHA.match(sha256):
            raise SignatureError("not a sha256 (64 lowercase hex digits)", field="sha256")
        if not _PRINCIPAL.match(approver):
            raise SignatureError(f"{approver!r} is not a signer's principal", field="approved_by")
        for field, value in (("approved_at", approved_at), ("expires", expires)):
            if value is not None and not _DATE.match(value):
                raise SignatureError("not a date (YYYY-MM-DD)", field=field)
        return super().__new__(cls, file, sha256, approver, approved_at, expires)

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # (mypy types it generic)
        """What `_replace` builds with: through __new__, so a replaced field is checked too."""
        return cls(*iterable)

    def text(self) -> str:
        return (
            f"{STATEMENT_HEADER}\n"
            f"namespace: {NAMESPACE}\n"
            f"file: {self.file}\n"
            f"sha256: {self.sha256}\n"
            f"approver: {self.approver}\n"
            f"approved_at: {self.approved_at}\n"
            f"expires: {self.expires or 'never'}\n"
        )


def ssh_keygen() -> str:
    """The ssh-keygen to run, or a SignatureError saying how to get one."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SignatureError(
            "ssh-keygen not found; approving (signing) needs it",
            field="signature",
            hint="install OpenSSH 8.2 or newer (Debian/Ubuntu: apt-get install "
            "openssh-client), as git needs for signed commits",
        )
    return found


def _run(args: list[str], data: str | None, what: str) -> subprocess.CompletedProcess[str]:
    # TZ=UTC: a valid-after/valid-before without a Z suffix and the approval's date are read
    # as UTC (ssh-keygen reads them in the local time zone), so an approval verifies alike on
    # every machine (see verify_time)
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    try:
        return subprocess.run(
            [ssh_keygen(), *args],
            input=data,
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SignatureError(
            f"ssh-keygen took over {TIMEOUT_S} s to {what}",
            field="signature",
            hint="is the key protected by a passphrase no one typed?",
        ) from None
    except OSError as exc:
        raise SignatureError(f"cannot run ssh-keygen: {exc.strerror}", field="signature") from None


def _reason(stderr: str) -> str:
    useful = [
        line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("Signing data")
    ]
    return useful[-1] if useful else "ssh-keygen failed"


def sign_text(text: str, key: Path) -> str:
    """TEXT signed with KEY (a private key, or a public key whose private half is in
    ssh-agent) in the runai-spec namespace: the armored SSH signature."""
    if not key.exists():
        raise SignatureError("no such key file", file=str(key), field="--key")
    done = _run(["-Y", "sign", "-n", NAMESPACE, "-f", str(key)], text, "sign")
    signature = done.stdout.replace("\r\n", "\n")
    if done.returncode != 0 or not ARMOR.match(signature):
        raise SignatureError(
            f"cannot sign with this key: {_reason(done.stderr)}",
            file=str(key),
            field="--key",
            hint="use the SSH key listed for you in presets/allowed_signers",
        )
    return signature if signature.endswith("\n") else signature + "\n"


def verify_time(approved_at: str) -> int:
    """The time an approval of APPROVED_AT (YYYY-MM-DD) is verified at: its midnight, UTC
    (`ssh-keygen -Y verify -Overify-time=YYYYMMDD` under TZ=UTC)."""
    seconds = parse_absolute_time(approved_at.replace("-", ""))
    if seconds is None or seconds == 0:
        raise SignatureError(f"{approved_at!r} is no time to verify at", field="approved_at")
    return seconds


def principal_of_key(key: Path, allowed_signers: Path, *, at: int | None = None) -> str:
    """The one principal allowed_signers lists for KEY at AT (now; found by signing a probe,
    the key's public half read from it): `--by` is never typed."""
    signers = AllowedSigners.read(allowed_signers)
    probe = sign_text(f"{STATEMENT_HEADER}\nprobe: which principal is this key?\n", key)
    found, refused = signers.principals(signer_key(probe), int(time.time()) if at is None else at)
    if not found:
        raise SignatureError(
            "this key is not listed in allowed_signers"
            if refused is None
            else f"allowed_signers does not admit this key ({refused})",
            file=str(key),
            field="--key",
            hint=f"an AI Engineer's key is added to {allowed_signers} in a reviewed merge request",
        )
    if len(found) > 1:
        raise SignatureError(
            f"this key is listed for several principals ({', '.join(found)})",
            file=str(allowed_signers),
            field="allowed_signers",
            hint="list each engineer's key once",
        )
    return found[0]


class SignedApproval(Record):  # not a dataclass: start-up cost (sshsig.py)
    """A statement and its signature, as the ledger stores them."""

    statement: Statement
    signature: str


def sign_approval(
    file: str, sha256: str, key: Path, allowed_signers: Path, *, approved_at: str, expires: str | None = None
) -> SignedApproval:
    """Sign the approval of FILE (at SHA256) with KEY; the approver is the key's principal
    (at the approval's date, as it is verified)."""
    principal = principal_of_key(key, allowed_signers, at=verify_time(approved_at))
    statement = Statement(file, sha256, principal, approved_at, expires)
    signed = SignedApproval(statement, sign_text(statement.text(), key))
    verify_approval(signed, allowed_signers)  # a key the file restricts (namespaces, dates)
    return signed


def verify_approval(signed: SignedApproval, allowed_signers: Path, *, source: str | None = None) -> str:
    """The approver, once the signature verifies for them against allowed_signers at the
    approval's date (`ssh-keygen -Y verify -I APPROVER -n runai-spec
    -Overify-time=APPROVED_AT`, in-process); a SignatureError otherwise. Needs neither the
    network nor ssh-keygen."""
    signers = AllowedSigners.read(allowed_signers)
    statement = signed.statement
    try:
        key = verify_sshsig(signed.signature, statement.text().encode("utf-8"), NAMESPACE)
        signers.check(key, statement.approver, NAMESPACE, verify_time(statement.approved_at))
    except Invalid as exc:
        raise SignatureError(
            f"the signature of {statement.file}'s approval does not verify for "
            f"{statement.approver!r} against {allowed_signers.name} ({exc})",
            file=source,
            field="signature",
            hint="an approval is signed by an AI Engineer: `runai-spec presets approve NAME "
            "--key ~/.ssh/id_ed25519`",
        ) from None
    return statement.approver
