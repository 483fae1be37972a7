"""Finding: one policy result with a stable rule id, a Location and a hint."""

from typing import Literal

from .errors import Located, Location, visible
from .records import Record

Severity = Literal["error", "warning", "info"]
UNNAMED = "<profile>"  # the file of a finding about input that was not read from a file


class _FindingFields(Record):
    rule: str
    location: Location
    message: str
    hint: str | None = None
    severity: Severity = "error"


class Finding(_FindingFields, Located):
    """A rule's verdict on one field: collected, never raised. An immutable record (its fields
    are _FindingFields'), located as an error is (errors.Located: file, line, field)."""

    __slots__ = ()

    @property
    def path(self) -> str:
        """The field the finding is about (`env.HF_TOKEN`, `spec.pytorchReplicaSpecs.Worker`)."""
        return self.location.field or ""

    def lines(self) -> list[str]:
        """The finding's lines, each exactly one line of text (errors.visible)."""
        where = Location(self.file or UNNAMED, self.line)
        head = f"{self.severity}: {where}: {self.path}: {self.message} [{self.rule}]"
        lines = [head, f"hint: {self.hint}"] if self.hint else [head]
        return [visible(line) for line in lines]
