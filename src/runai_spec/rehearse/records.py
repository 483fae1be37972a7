"""The latest rehearsal of each workload, kept where `plan` finds it for the engineer's ticket.

`rehearse` writes one small JSON record per workload (project and name) under
`$XDG_CACHE_HOME/runai-spec/rehearsals/` (default `~/.cache/runai-spec/rehearsals/`), replacing
the one before; `plan` reads it back. The full result stays in the rehearsal's log folder
(`result.json`); the record names that folder.

Only records runai-spec wrote count (issue 23, third red-team pass: a hand-written record showed
as "passed"). Each carries who wrote it (the tool, its version, the host and the user) and an
HMAC-SHA256 under this user's record key (`runai-spec/record.key` beside the folder: 32 random
bytes, made on first use, mode 0600); `plan` counts a record only when that verifies and
otherwise says the record is not counted and why. What this shows is that runai-spec wrote the
record on that machine; it is no proof to a reviewer, since whoever runs runai-spec there can
rehearse anything: the ticket says where the record came from."""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..files import replace_file

RECORD_VERSION = 2  # 2: signed, with its origin (version 1 records are not counted)
KEY_BYTES = 32
TOOL = "runai-spec"


def rehearsals_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "runai-spec" / "rehearsals"


def record_path(project: str, name: str, profile: str | None = None) -> Path:
    """The record of the workload PROJECT/NAME rehearsed from the profile file PROFILE: one per
    profile file, so that profiles of one name (a layout each) keep their own latest (issue 42
    item 8); project and name are DNS labels (the profile's schema), safe in a file name."""
    if profile is None:
        return rehearsals_dir() / f"{project}--{name}.json"
    where = hashlib.sha256(os.fsencode(os.path.realpath(profile))).hexdigest()[:16]
    return rehearsals_dir() / f"{project}--{name}--{where}.json"


def key_path() -> Path:
    return rehearsals_dir().parent / "record.key"


def record_key(*, create: bool) -> bytes | None:
    """This user's record key: a regular file of KEY_BYTES bytes, this user's, readable by
    no one else, never through a link; made (O_EXCL) when CREATE and absent. None when there
    is none or it is not such a file."""
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if not create:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError:
            return None
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or info.st_mode & 0o077
            or info.st_size != KEY_BYTES
        ):
            return None
        key = handle.read(KEY_BYTES + 1)
    return key if len(key) == KEY_BYTES else None


def _signature(key: bytes, doc: Mapping[str, Any]) -> str:
    body = json.dumps(
        {k: v for k, v in doc.items() if k != "signature"},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return str(os.geteuid())


@dataclass(frozen=True)
class RehearsalRecord:
    """What `plan` shows of a rehearsal: when, of which profile, each check's outcome."""

    project: str
    name: str
    profile: str
    profile_sha256: str
    ok: bool
    world_size: int
    backend: str
    options: tuple[str, ...]  # the rehearse options that shaped it (--own-script, ...)
    checks: tuple[tuple[str, str, str], ...]  # (check, status, message)
    logs_dir: str
    # stamped by write_record: when (ISO 8601, UTC), and (tool, its version, host, user)
    finished_at: str = ""
    written_by: tuple[str, str, str, str] = ("", "", "", "")
    path: str = ""  # where the record was read from
    # the measurements (bottleneck, scaling: rehearse/bottleneck.py's `measures`), for the ticket
    measures: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        tool, version, host, user = self.written_by
        return {
            "version": RECORD_VERSION,
            "project": self.project,
            "name": self.name,
            "profile": self.profile,
            "profile_sha256": self.profile_sha256,
            "finished_at": self.finished_at,
            "ok": self.ok,
            "world_size": self.world_size,
            "backend": self.backend,
            "options": list(self.options),
            "checks": [{"check": c, "status": s, "message": m} for c, s, m in self.checks],
            "logs_dir": self.logs_dir,
            "written_by": {"tool": tool, "version": version, "host": host, "user": user},
            "measures": dict(self.measures),
        }


@dataclass(frozen=True)
class ForeignRecord:
    """A record file `plan` does not count: runai-spec did not write it (or it was edited)."""

    path: str
    why: str


def write_record(record: RehearsalRecord, *, now: datetime | None = None) -> Path | None:
    """Replace the workload's record atomically, stamped with the time and who wrote it, and
    signed; None when the cache or its key cannot be written (a read-only home must not fail
    the rehearsal itself)."""
    record = dataclasses.replace(
        record,
        finished_at=(now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        written_by=(TOOL, __version__, socket.gethostname(), _user()),
    )
    path = record_path(record.project, record.name, record.profile)
    record = dataclasses.replace(record, measures=_kept_measures(record, _read(path)))
    try:
        key = record_key(create=True)
        if key is None:
            return None
        doc = record.as_dict()
        doc["signature"] = _signature(key, doc)
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(doc, indent=2) + "\n")
    except OSError:
        return None
    return path


def _kept_measures(record: RehearsalRecord, before: object) -> dict[str, Any]:
    """The new record's measurements, each stamped with when and where it was measured, and
    those the record before it had and this rehearsal did not take again (a --scaling series
    outlives a later rehearsal without --scaling), where both are of the same profile."""
    out = {
        k: {**dict(v), "measured_at": record.finished_at, "logs_dir": record.logs_dir}
        for k, v in record.measures.items()
    }
    if isinstance(before, RehearsalRecord) and before.profile_sha256 == record.profile_sha256:
        for k, v in before.measures.items():
            out.setdefault(k, {**dict(v), "measured_at": v.get("measured_at", before.finished_at)})
    return out


def read_record(
    project: str, name: str, profile: str | None = None
) -> RehearsalRecord | ForeignRecord | None:
    """The latest record of the workload PROJECT/NAME rehearsed from the profile file PROFILE;
    a ForeignRecord when one is there that runai-spec did not write under this user's key
    (hand-written, edited, or of a version without a signature); None when there is none or
    it cannot be read."""
    return _read(record_path(project, name, profile))


def _read(path: Path) -> RehearsalRecord | ForeignRecord | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, Mapping):
        return None
    key = record_key(create=False)
    signature = doc.get("signature")
    if not isinstance(signature, str):
        return ForeignRecord(
            str(path),
            "it carries no signature: written by hand, or by a runai-spec older than its records' signatures",
        )
    if key is None:
        return ForeignRecord(str(path), f"this machine has no record key ({key_path()}) to verify it with")
    if not hmac.compare_digest(signature, _signature(key, doc)) or doc.get("version") != RECORD_VERSION:
        return ForeignRecord(
            str(path),
            "its signature does not verify with this machine's "
            "record key: runai-spec did not write it, or it was edited since",
        )
    try:
        by = doc["written_by"]
        return RehearsalRecord(
            str(doc["project"]),
            str(doc["name"]),
            str(doc["profile"]),
            str(doc["profile_sha256"]),
            bool(doc["ok"]),
            int(doc["world_size"]),
            str(doc["backend"]),
            tuple(str(o) for o in doc["options"]),
            tuple((str(c["check"]), str(c["status"]), str(c["message"])) for c in doc["checks"]),
            str(doc["logs_dir"]),
            str(doc["finished_at"]),
            (str(by["tool"]), str(by["version"]), str(by["host"]), str(by["user"])),
            str(path),
            _measures(doc.get("measures")),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _measures(value: Any) -> dict[str, Any]:
    """The record's measurements; none where a record (of an earlier runai-spec) has none."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, Mapping)}
