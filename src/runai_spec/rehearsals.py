"""The latest rehearsal of each workload, kept where `plan` finds it for the engineer's ticket.

`rehearse` writes one small JSON record per workload (project and name) under
`$XDG_CACHE_HOME/runai-spec/rehearsals/` (default `~/.cache/runai-spec/rehearsals/`), replacing
the one before; `plan` reads it back. The full result stays in the rehearsal's log folder
(`result.json`); the record names that folder."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .loading import replace_file

RECORD_VERSION = 1


def rehearsals_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "runai-spec" / "rehearsals"


def record_path(project: str, name: str) -> Path:
    # both are DNS labels (the profile's schema): safe as one file name
    return rehearsals_dir() / f"{project}--{name}.json"


@dataclass(frozen=True)
class RehearsalRecord:
    """What `plan` shows of a rehearsal: when, of which profile, each check's outcome."""

    project: str
    name: str
    profile: str
    profile_sha256: str
    finished_at: str  # ISO 8601, UTC
    ok: bool
    world_size: int
    backend: str
    options: tuple[str, ...]  # the rehearse options that shaped it (--own-script, ...)
    checks: tuple[tuple[str, str, str], ...]  # (check, status, message)
    logs_dir: str

    def as_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "project": self.project, "name": self.name,
                "profile": self.profile, "profile_sha256": self.profile_sha256,
                "finished_at": self.finished_at, "ok": self.ok, "world_size": self.world_size,
                "backend": self.backend, "options": list(self.options),
                "checks": [{"check": c, "status": s, "message": m} for c, s, m in self.checks],
                "logs_dir": self.logs_dir}


def write_record(*, project: str, name: str, profile: str, profile_sha256: str, ok: bool,
                 world_size: int, backend: str, options: Sequence[str],
                 checks: Sequence[tuple[str, str, str]], logs_dir: str,
                 now: datetime | None = None) -> Path | None:
    """Replace the workload's record atomically; None when the cache cannot be written (a
    read-only home must not fail the rehearsal itself)."""
    record = RehearsalRecord(
        project, name, profile, profile_sha256,
        (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"), ok, world_size, backend,
        tuple(options), tuple(checks), logs_dir)
    path = record_path(project, name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(record.as_dict(), indent=2) + "\n")
    except OSError:
        return None
    return path


def read_record(project: str, name: str) -> RehearsalRecord | None:
    """The workload's latest record; None when there is none or it cannot be read."""
    try:
        doc = json.loads(record_path(project, name).read_text(encoding="utf-8"))
        if not isinstance(doc, Mapping) or doc.get("version") != RECORD_VERSION:
            return None
        return RehearsalRecord(
            str(doc["project"]), str(doc["name"]), str(doc["profile"]),
            str(doc["profile_sha256"]), str(doc["finished_at"]), bool(doc["ok"]),
            int(doc["world_size"]), str(doc["backend"]),
            tuple(str(o) for o in doc["options"]),
            tuple((str(c["check"]), str(c["status"]), str(c["message"]))
                  for c in doc["checks"]), str(doc["logs_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
