"""Where each value of a plan came from: the profile, the preset, the site file, a rule."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from ..load.ledger import LEDGER_FILE
from ..load.profile import LoadedProfile
from ..load.registry import ApprovedPreset
from ..load.site import SITE_FILE, Site


class Origin(NamedTuple):
    """One source of a value: the profile, the preset, the site file, a rule or the template."""

    # A tuple, not a dataclass: a plan records some sixty of them, and tuples are built
    # several times faster (10,000 profiles in one call).
    kind: str  # profile | preset | site | ledger | derived | template
    field: str = ""  # the field in that file, or what the rule is
    file: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.kind in ("derived", "template"):
            return f"{self.kind}: {self.field}"
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.kind} {where} {self.field}".rstrip()


@lru_cache(maxsize=256)
def derived(rule: str) -> Origin:
    return Origin("derived", rule)


class Sources:
    """Origins in the three files a plan reads, with the line each field is on."""

    def __init__(self, loaded: LoadedProfile, approved: ApprovedPreset, site: Site) -> None:
        self.loaded, self.approved, self.site_lines = loaded, approved, site.lines
        # Shown as presets/<file>, the name reviewers know, wherever the folder is installed.
        self.preset_file = f"presets/{approved.name}.yaml"
        self.site_file, self.ledger_file = f"presets/{SITE_FILE}", f"presets/{LEDGER_FILE}"

    def profile(self, field: str) -> Origin:
        return Origin("profile", field, self.loaded.path, self.loaded.lines.get(field))

    def preset(self, field: str) -> Origin:
        line = self.approved.lines.get(field)
        return Origin("preset", field if line else f"{field} (default)", self.preset_file, line)

    def site(self, field: str) -> Origin:
        line = self.site_lines.get(field)
        return Origin("site", field if line else f"{field} (default)", self.site_file, line)

    def ledger(self, filename: str) -> Origin:
        return Origin("ledger", f"approvals.{filename}.sha256", self.ledger_file)


# One entry of a key/value list in the plan, with where the key and the value came from.
Entry = tuple[str, Any, Origin, Origin]


def pairs(origins: dict[str, Origin], prefix: str, entries: dict[str, Entry]) -> tuple[tuple[str, Any], ...]:
    """The plan's (key, value) tuple, recording `prefix[i][0]` and `prefix[i][1]`."""
    for i, (_, _, key_origin, value_origin) in enumerate(entries.values()):
        origins[f"{prefix}[{i}][0]"], origins[f"{prefix}[{i}][1]"] = key_origin, value_origin
    return tuple((key, value) for key, value, _, _ in entries.values())


def same(origin: Origin, key: str, value: Any) -> Entry:
    """An entry whose key and value came from one place."""
    return (key, value, origin, origin)
