"""Finding: one policy result with a stable rule id, a field path and a hint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """A rule's verdict on one field: collected, never raised."""

    rule: str
    path: str
    message: str
    hint: str | None = None
    severity: Severity = "error"
    file: str | None = None
    line: int | None = None

    def lines(self) -> list[str]:
        where = self.file or "<profile>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        head = f"{self.severity}: {where}: {self.path}: {self.message} [{self.rule}]"
        return [head, f"hint: {self.hint}"] if self.hint else [head]
