"""One error hierarchy: each error carries its exit code and an optional hint."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT = 2
EXIT_CLUSTER = 3
EXIT_INTERNAL = 70


class RunaiSpecError(Exception):
    """The tool cannot do its job; printed as one `error:` line and an optional `hint:`."""

    exit_code = EXIT_INTERNAL

    def __init__(
        self, message: str, *, file: str | None = None, field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.field = field
        self.hint = hint
        self.also: list[str] = []  # more `error:` lines of the same input (all at once)

    def lines(self) -> list[str]:
        where = ": ".join(part for part in (self.file, self.field) if part)
        head = f"error: {where}: {self.message}" if where else f"error: {self.message}"
        out = [head, *self.also]
        if self.hint:
            out.append(f"hint: {self.hint}")
        return out

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
