"""One error hierarchy (exit code, hint) and one Location for every error and finding."""

import copy
import re
from collections.abc import Sequence
from functools import cache
from typing import Self

from .records import Record

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2
EXIT_CLUSTER = 3
EXIT_INTERNAL = 70

# What must never reach a terminal as itself inside one line of output: the C0 and C1 controls
# (LF, CR, VT, FF and U+0085 end a line; ESC starts a terminal sequence), the Unicode line and
# paragraph separators, and the bidirectional marks, embeddings, overrides and isolates
# (U+202E shows what follows right to left, so a line can read as another). Each of them is a
# control, format or separator character, so a text that str.isprintable() passes holds none.
UNSAFE_CHARS = r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"


@cache
def unsafe_text() -> re.Pattern[str]:
    """UNSAFE_CHARS compiled, on first use: ~2 M instructions a start that a command whose
    lines are all printable never needs (benchmarks/README.md, round 5)."""
    return re.compile(UNSAFE_CHARS)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: object) -> str:
    """TEXT on one line, as it reads: each character UNSAFE_CHARS matches written as a visible
    escape (`\\n`, `\\r`, `\\x1b`, `\\u2028`, `\\u202e`), never a line break, a terminal
    sequence or a change of direction. Every `error:`, `warning:`, `info:` and `hint:` line
    passes here (RunaiSpecError.lines, Finding.lines), so a value cannot forge a line."""
    text = str(text)
    return text if text.isprintable() else unsafe_text().sub(_escape, text)


class Location(Record):
    """Where a problem is: a file, the line in it, the field (`env.HF_TOKEN`, `--by`).
    A NamedTuple, not a frozen dataclass: the same immutable record at a quarter of the
    start-up (benchmarks/README.md, round 5)."""

    file: str | None = None
    line: int | None = None
    field: str | None = None

    @property
    def place(self) -> str | None:
        """`file:line`, or the file alone."""
        if self.file and self.line is not None:
            return f"{self.file}:{self.line}"
        return self.file

    def __str__(self) -> str:
        return ": ".join(part for part in (self.place, self.field) if part)


class Located:
    """`file`, `line` and `field` read from `self.location`: errors and findings alike."""

    __slots__ = ()  # a record (findings.Finding, a tuple) may be Located too
    location: Location

    @property
    def file(self) -> str | None:
        return self.location.file

    @property
    def line(self) -> int | None:
        return self.location.line

    @property
    def field(self) -> str | None:
        return self.location.field


class RunaiSpecError(Located, Exception):
    """The tool cannot do its job; printed as one `error:` line and an optional `hint:`."""

    exit_code = EXIT_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
        also: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.location = Location(file, line, field)
        self.hint = hint
        self.also = tuple(also)  # more `error:` lines of the same input (all at once)

    def located(self, file: str, field: str | None = None, line: int | None = None) -> Self:
        """A copy of this error placed in `file` (and `field`, at `line`) where it names no
        file itself, for the caller that knows which input it was reading."""
        if self.location.file is not None:
            return self
        placed = copy.copy(self)
        placed.location = Location(file, self.location.line or line, self.location.field or field)
        return placed

    def lines(self) -> list[str]:
        """The error's lines, each exactly one line of text (see `visible`)."""
        where = str(self.location)
        head = f"error: {where}: {self.message}" if where else f"error: {self.message}"
        out = [head, *self.also]
        if self.hint:
            out.append(f"hint: {self.hint}")
        return [visible(line) for line in out]

    def __str__(self) -> str:
        return "\n".join(self.lines())


class InputError(RunaiSpecError):
    """Unreadable or invalid input: profile, preset, manifest, usage."""

    exit_code = EXIT_INPUT


class PresetError(InputError):
    """Unknown, unapproved, edited, expired or unsafe preset."""


class ClusterError(RunaiSpecError):
    """The cluster could not be reached or refused the request."""

    exit_code = EXIT_CLUSTER


class InternalError(RunaiSpecError):
    """A bug in runai-spec: never looks like findings."""

    exit_code = EXIT_INTERNAL
