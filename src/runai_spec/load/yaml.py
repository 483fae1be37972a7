"""The strict YAML loader shared by profiles, presets and manifests."""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError

try:  # libyaml is ~8x faster than the pure-Python parser
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

MAX_BYTES = 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64
# Longer numbers are never settings; Python refuses ints over 4,300 digits, floats overflow.
MAX_NUMBER_CHARS = 64

# Only JSON-shaped scalars get a non-string type; YAML 1.1 booleans such as `no`/`on`,
# octal-looking `0777` and sexagesimal `1:30` stay strings instead of silently changing type.
_INT = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")


class LiteralInt(int):
    """An integer written as a plain scalar, with the text it was written as (`090` is never
    read as a number, but `90` keeps `"90"` for a string field: DESIGN section 5)."""

    text: str


class LiteralFloat(float):
    """A float written as a plain scalar, with its text: `1.10` stays `"1.10"`, `1e3` `"1e3"`."""

    text: str


def literal_text(value: Any) -> Any:
    """The source text of a plain scalar the loader read as a number or boolean (only
    `true`/`false` are booleans), for a field that holds a string; anything else unchanged."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    text = getattr(value, "text", None)
    if type(text) is str and isinstance(value, int | float):
        return text
    return value


# How the two parsers mark a plain (unquoted, not block) scalar: libyaml "", the pure parser None.
_PLAIN = (None, "")
_WORDS = {"": None, "~": None, "null": None, "true": True, "false": False}  # plain, no strings
_NUMBER_START = frozenset("-0123456789")  # what _INT and _FLOAT can match at all
_NODES = frozenset([yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent])


def _plain_scalar(value: str) -> Any:
    """What a plain scalar's text means (quoted and block scalars are always strings): a word
    of _WORDS, a number, else the text itself."""
    if value in _WORDS:
        return _WORDS[value]
    if value[0] in _NUMBER_START:
        if _INT.match(value):
            return int(value)
        if _FLOAT.match(value):
            return float(value)
    return value


class _Builder:
    """Builds plain JSON values from the parser's event stream, refusing what JSON lacks."""

    def __init__(
        self, source: str, get_event: Any, *, track_lines: bool = True, literal: bool = False
    ) -> None:
        self.source = source
        self.literal = literal
        self.get_event = get_event
        self.nodes = 0
        self.track_lines = track_lines
        self.lines: dict[str, int] = {}

    def fail(self, event: Any, what: str, hint: str | None = None, field: str = "") -> InputError:
        mark = getattr(event, "start_mark", None)
        line = mark.line + 1 if mark is not None else None
        return InputError(what, file=self.source, line=line, field=field or None, hint=hint)

    def refuse(self, event: Any, depth: int, path: str = "") -> None:
        """Refuse what a node at DEPTH (counted already) breaks, the first of: too many nodes,
        an alias, an anchor, a tag, too deep."""
        if self.nodes > MAX_NODES:
            raise self.fail(event, f"more than {MAX_NODES} YAML nodes")
        if type(event) is yaml.AliasEvent:
            raise self.fail(
                event,
                "YAML aliases (*name) are not allowed",
                "write the value out in full; aliases can expand without bound",
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise self.fail(event, f"YAML anchors (&{anchor}) are not allowed", "write the value out in full")
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!":
            raise self.fail(
                event,
                f"YAML tags ({tag}) are not allowed",
                "remove the tag; only plain JSON-like values are accepted",
                path,
            )
        if depth > MAX_DEPTH:
            raise self.fail(
                event,
                f"nesting deeper than {MAX_DEPTH} levels",
                "no setting nests that deep; check the indentation",
                path,
            )

    def as_is(self, event: Any, depth: int) -> bool:
        """Whether EVENT, a node below one at DEPTH, is a scalar that value() (and key())
        would take as its own text with nothing to refuse: within the limits, no anchor or
        tag, quoted or block or plain and neither a word of _WORDS nor a number
        (_plain_scalar), and printable (no control character). The loops' fast path."""
        if type(event) is not yaml.ScalarEvent or event.anchor is not None or event.tag is not None:
            return False
        text = event.value
        return (
            self.nodes < MAX_NODES
            and depth < MAX_DEPTH
            and (event.style not in _PLAIN or (text not in _WORDS and text[:1] not in _NUMBER_START))
            and text.isprintable()
        )

    # The hot loop (every node of every profile and manifest passes here): type() checks, the
    # C parser's get_event, and one test for what is rare (an anchor, a tag, too many nodes
    # or levels) before refuse() says which.
    def value(self, event: Any, depth: int, path: str = "") -> Any:
        self.nodes += 1
        kind = type(event)
        if kind not in _NODES:  # an alias (refused), or what no parser sends here
            self.refuse(event, depth, path)
            raise self.fail(event, f"unexpected YAML event {kind.__name__}")
        if (
            event.anchor is not None
            or (event.tag is not None and event.tag != "!")
            or self.nodes > MAX_NODES
            or depth > MAX_DEPTH
        ):
            self.refuse(event, depth, path)
        if kind is yaml.ScalarEvent:
            return self.scalar(event, path)
        get_event = self.get_event
        track = self.track_lines
        if kind is yaml.SequenceStartEvent:
            items: list[Any] = []
            lines = self.lines
            while True:
                nxt = get_event()
                kind = type(nxt)
                if kind is yaml.SequenceEndEvent:
                    return items
                child = ""
                if track:
                    child = f"{path}[{len(items)}]"
                    if child not in lines and nxt.start_mark is not None:
                        lines[child] = nxt.start_mark.line + 1
                if self.as_is(nxt, depth):
                    self.nodes += 1
                    items.append(nxt.value)
                else:
                    items.append(self.value(nxt, depth + 1, child))
        mapping: dict[str, Any] = {}  # a MappingStartEvent
        while True:
            key_event = get_event()
            kind = type(key_event)
            if kind is yaml.MappingEndEvent:
                return mapping
            if self.as_is(key_event, depth) and key_event.value != "<<":  # (a merge key: refused)
                key = key_event.value
            else:
                key = self.key(key_event, depth + 1)
            if key in mapping:
                raise self.fail(
                    key_event, f"duplicate key {key!r}", "each key may appear once; remove one of them"
                )
            child = ""
            if track:
                child = f"{path}.{key}" if path else key
                if key_event.start_mark is not None:
                    self.lines[child] = key_event.start_mark.line + 1
            nxt = get_event()
            if self.as_is(nxt, depth):
                self.nodes += 1
                mapping[key] = nxt.value
            else:
                mapping[key] = self.value(nxt, depth + 1, child)

    def key(self, event: Any, depth: int) -> str:
        """A mapping key: a scalar, checked as any node is (not counted as one), as written."""
        if type(event) is not yaml.ScalarEvent:
            self.value(event, depth)  # what is refused inside it first
            raise self.fail(event, "mapping keys must be plain strings")
        if (
            event.anchor is not None
            or (event.tag is not None and event.tag != "!")
            or self.nodes >= MAX_NODES
            or depth > MAX_DEPTH
        ):
            self.nodes += 1
            self.refuse(event, depth)
            self.nodes -= 1
        key = self.scalar(event, "")
        if type(key) is str:
            if key == "<<" and event.style in _PLAIN:
                raise self.fail(
                    event, "YAML merge keys (<<) are not allowed", "write the merged keys out in full"
                )
            return key
        return event.value  # `1`, `true` or `null` as a key: the text written

    def scalar(self, event: Any, path: str) -> Any:
        text = event.value
        plain = event.style in _PLAIN and event.tag != "!"
        if plain and len(text) > MAX_NUMBER_CHARS and _FLOAT.match(text):
            raise self.fail(
                event,
                f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})",
                "no setting needs a number that long; quote it if it is meant as text",
                path,
            )
        value = _plain_scalar(text) if plain else text
        kind = type(value)
        if kind is str:
            if not value.isprintable() and _CONTROL.search(value):
                raise self.fail(
                    event,
                    "control characters are not allowed in strings",
                    "remove them (an escape such as \\x1b or \\x85 in a quoted string writes one)",
                    path,
                )
            return value
        if kind is float:
            if not math.isfinite(value):
                raise self.fail(
                    event,
                    f"{text} is too large for a number",
                    "no setting needs it; quote it if it is meant as text",
                    path,
                )
            if self.literal:
                value = LiteralFloat(value)
                value.text = text
        elif kind is int and self.literal:
            value = LiteralInt(value)
            value.text = text
        return value


def parse_documents(text: str, source: str) -> list[Any]:
    """Parse YAML text into JSON-like values, one per document, refusing unsafe constructs."""
    return _parse(text, source, track_lines=False)[0]


def _parse(
    text: str, source: str, *, track_lines: bool = True, literal: bool = False
) -> tuple[list[Any], dict[str, int]]:
    docs: list[Any] = []
    loader = _Loader(text)
    builder = _Builder(source, loader.get_event, track_lines=track_lines, literal=literal)
    try:
        while loader.check_event():
            event = loader.get_event()
            if type(event) is yaml.DocumentStartEvent:
                docs.append(builder.value(loader.get_event(), 0))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    finally:
        loader.dispose()
    return docs, builder.lines


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> InputError:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        # a tab where YAML wants indentation: libyaml says "found character that cannot start
        # any token" or "a tab character that violates indentation", never where the tab is
        rows = text.splitlines()
        row = rows[mark.line] if mark.line < len(rows) else ""
        column = mark.column if row[mark.column : mark.column + 1] == "\t" else row.find("\t")
        if column >= 0 and ("tab" in problem or row[:column].strip() == ""):
            return InputError(
                f"a tab character at column {column + 1}: YAML indents with spaces only",
                file=source,
                line=line,
                hint="replace the tab with spaces (your editor can show tabs)",
            )
    return InputError(
        f"not valid YAML: {problem}",
        file=source,
        line=line,
        hint="check indentation and quoting near that line",
    )


def read_text(path: Path, *, max_bytes: int = MAX_BYTES) -> str:
    """Read a UTF-8 file, refusing missing files, symlink tricks, huge files and bad bytes."""
    source = str(path)
    if getattr(path, "is_stdin", False):  # `-`: the profile arrives on standard input
        with path.open("rb") as handle:
            return _decode(handle.read(max_bytes + 1), source, max_bytes)
    try:
        # never through a symlink (O_NOFOLLOW), and only a regular file: a FIFO or a device
        # would block or never end (O_NONBLOCK lets the open return so fstat can refuse it)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(
            "no such file", file=source, hint="check the path; profiles are usually <project>/profile.yaml"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(
                "is a symbolic link; runai-spec reads only regular files",
                file=source,
                hint="commit the file itself, not a link",
            ) from None
        if exc.errno == errno.EISDIR:
            raise InputError("is a directory, not a file", file=source) from None
        raise InputError(f"cannot read: {exc.strerror}", file=source) from None
    try:
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise InputError("is a directory, not a file", file=source)
            if not stat.S_ISREG(mode):
                raise InputError(
                    "is not a regular file (a pipe, device or socket)",
                    file=source,
                    hint="pass a regular file, or `-` for standard input",
                )
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(
            "no such file", file=source, hint="check the path; profiles are usually <project>/profile.yaml"
        ) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", file=source) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=source) from None
    return _decode(data, source, max_bytes)


def _decode(data: bytes, source: str, max_bytes: int) -> str:
    if len(data) > max_bytes:
        raise InputError(
            f"file is larger than {max_bytes} bytes",
            file=source,
            hint="profiles and presets are small; is this the right file?",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not valid UTF-8 (byte {exc.start})", file=source, hint="save the file as UTF-8"
        ) from None


def load_mapping_text(text: str, source: str) -> dict[str, Any]:
    """Parse text that must hold exactly one YAML document whose top level is a mapping."""
    return load_mapping_lines(text, source)[0]


def load_mapping_lines(
    text: str, source: str, *, literal: bool = False
) -> tuple[dict[str, Any], dict[str, int]]:
    """Like load_mapping_text, also returning the line of every field path (`a.b[0].c`).
    With literal, plain-scalar numbers are LiteralInt/LiteralFloat that keep their text."""
    docs, lines = _parse(text, source, literal=literal)
    if not docs:
        docs = [None]
    if len(docs) != 1:
        raise InputError(
            f"expected one YAML document, found {len(docs)}",
            file=source,
            hint="remove the extra '---' separators",
        )
    doc = docs[0]
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else type(doc).__name__
        raise InputError(
            f"top level must be a mapping, got {kind}",
            file=source,
            hint="write `key: value` pairs at the top level",
        )
    return doc, lines


def load_documents(path: Path, *, max_bytes: int = 16 * MAX_BYTES) -> list[dict[str, Any]]:
    """Load a manifest file: one or more mapping documents (empty documents skipped)."""
    docs = parse_documents(read_text(path, max_bytes=max_bytes), str(path))
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(f"document {index + 1} is not a mapping", file=str(path))
        out.append(doc)
    return out
