"""The approvals ledger (approvals.yaml): one signed approval per approved file."""

# No `from __future__ import annotations`: the string annotations of a pydantic model are
# compiled one by one when it is defined (~0.15 M instructions each: benchmarks/README.md).
import datetime as dt
import json
import re
from pathlib import Path

from pydantic import Field, field_validator

from ..errors import InputError
from ..files import replace_file
from .model import FileModel

LEDGER_FILE = "approvals.yaml"


class Approval(FileModel):
    """One ledger entry: the statement an engineer signed (signing.Statement) and its SSH
    signature. An entry without a signature is kept in the model so that the refusal can
    name it, but it never vouches for a file."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    approved_by: str = Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$")
    approved_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    expires: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    signature: str | None = Field(
        None,
        description="`ssh-keygen -Y sign -n runai-spec` of "
        "the statement, by the key allowed_signers lists for "
        "approved_by.",
    )

    @field_validator("approved_at", "expires")
    @classmethod
    def _a_real_date(cls, value: str | None) -> str | None:
        if value is not None:
            dt.date.fromisoformat(value)  # 2027-13-45 matches the pattern but is no date
        return value


class Ledger(FileModel):
    """presets/approvals.yaml."""

    approvals: dict[str, Approval]


NO_EXPIRY = "never"  # `presets approve --expires never`: an approval without an expiry


def write_ledger(path: Path, approvals: dict[str, Approval]) -> None:
    """Write the ledger atomically, sorted, in a fixed plain format."""
    lines = [
        "# Approvals ledger: written by `runai-spec presets approve`; reviewed in merge requests.",
        "approvals:",
    ]
    for filename in sorted(approvals):
        entry = approvals[filename]
        lines.append(f"  {filename}:")
        lines.append(f'    sha256: "{entry.sha256}"')
        lines.append(f"    approved_by: {json.dumps(entry.approved_by)}")
        lines.append(f'    approved_at: "{entry.approved_at}"')
        if entry.expires:
            lines.append(f'    expires: "{entry.expires}"')
        if entry.signature:
            lines.append("    signature: |")
            lines.extend(f"      {line}" for line in entry.signature.splitlines())
    replace_file(path, "\n".join(lines) + "\n")


def approval_expiry(name: str, expires: str | None, previous: Approval | None, today: dt.date) -> str | None:
    """The expiry a new approval of NAME carries on TODAY: the date given (never one already
    past), none for `never`, and without --expires the earlier approval's, if it has not
    passed; an earlier expiry that has passed must be renewed or dropped explicitly."""
    if expires == NO_EXPIRY:
        return None
    if expires is None:
        if previous is None or previous.expires is None:
            return None
        if dt.date.fromisoformat(previous.expires) >= today:
            return previous.expires  # re-approving an edit keeps the review's time limit
        raise InputError(
            f"the earlier approval of {name} expired on {previous.expires}; say how long this one holds",
            field="--expires",
            hint="`--expires YYYY-MM-DD` (today or later), or `--expires "
            f"{NO_EXPIRY}` for an approval without an expiry",
        )
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", expires):
            raise ValueError(expires)  # fromisoformat also takes 20271231, 2027-W52-1
        date = dt.date.fromisoformat(expires)
    except ValueError:
        raise InputError(
            "not a date (YYYY-MM-DD)", field="--expires", hint=f"e.g. 2027-06-30, or `{NO_EXPIRY}`"
        ) from None
    if date < today:
        raise InputError(
            f"{expires} has passed (today is {today.isoformat()}): the approval would be refused at once",
            field="--expires",
            hint="give today's date or a later one",
        )
    return expires
