"""The allowed_signers file read as ssh-keygen 9.x reads it (sshsig.c, match.c, misc.c)."""

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..records import Record
from .sshsig import ALLOWED_SIGNERS_FILE, KEY_NAMES, Invalid, PublicKey, _b64, _plain_file

_WHITESPACE = " \t\r\n"
_PATTERN_MAX = 1023  # match_pattern_list: a longer subpattern matches nothing at all


def match_pattern_list(string: str, patterns: str) -> int:
    """1 if STRING matches a pattern of the comma-separated PATTERNS, -1 if it matches a
    negated one (`!pattern`, which wins), 0 otherwise (match.c, case-sensitive)."""
    got_positive = 0
    for sub in patterns.split(",") if patterns else []:
        negated = sub.startswith("!")
        sub = sub[1:] if negated else sub
        if len(sub) >= _PATTERN_MAX:
            return 0
        glob = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in sub)
        if re.fullmatch(glob, string, re.DOTALL):
            if negated:
                return -1
            got_positive = 1
    return got_positive


def parse_absolute_time(text: str) -> int | None:
    """Seconds since the epoch of YYYYMMDD[HHMM[SS]][Z|UTC] (misc.c parse_absolute_time,
    glibc strptime's field ranges, mktime's normalisation of a 31st of a short month), read
    as UTC; None where ssh-keygen reads no time. ssh-keygen's strptime also skips blanks
    inside a field ("2027 101"): refused here."""
    size = len(text)
    if size > 1 and text[-1] in "zZ":
        size -= 1
    elif size > 3 and text[-3:].upper() == "UTC":
        size -= 3
    core = text[:size]
    if size not in (8, 12, 14) or not re.fullmatch(r"[0-9]+", core):
        return None
    fields = [int(core[i : i + w]) for i, w in ((0, 4), (4, 2), (6, 2), (8, 2), (10, 2), (12, 2)) if i < size]
    year, month, day, hour, minute, second = fields + [0] * (6 - len(fields))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 61):
        return None
    if year == 0:
        return None  # before the epoch, as every year below 1970
    days = (dt.date(year, month, 1) - dt.date(1970, 1, 1)).days + day - 1
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    return seconds if seconds >= 0 else None


def _time_text(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _strdelimw(text: str) -> tuple[str | None, str | None]:
    """misc.c strdelimw: the first token of TEXT (a quoted part joined in, quotes dropped)
    and the rest after the white space that follows it; (None, None) for an unmatched
    quote; (token, None) where nothing follows."""
    at = next((i for i, ch in enumerate(text) if ch in _WHITESPACE + '"'), None)
    if at is None:
        return text, None
    if text[at] == '"':
        text = text[:at] + text[at + 1 :]
        end = text.find('"', at)
        if end < 0:
            return None, None
        return text[:end], text[end + 1 :].lstrip(_WHITESPACE)
    return text[:at], text[at + 1 :].lstrip(_WHITESPACE)


def _read_key(text: str) -> PublicKey | None:
    """sshkey_read: `TYPE BASE64` at the start of TEXT, TYPE the blob's own type."""
    space = next((i for i, ch in enumerate(text) if ch in " \t"), None)
    if space is None or text[:space] not in KEY_NAMES:
        return None
    rest = text[space:].lstrip(" \t")
    if not rest:
        return None
    end = next((i for i, ch in enumerate(rest) if ch in " \t"), len(rest))
    try:
        key = PublicKey.from_blob(_b64(rest[:end]))
    except Invalid:
        return None
    return key if key.kind == KEY_NAMES[text[:space]] else None


def _past_options(text: str) -> int | None:
    """authfile.c sshkey_advance_past_options: where the options end (an unquoted blank or
    the end), None for an unterminated quote."""
    quoted, at = False, 0
    while at < len(text) and (quoted or text[at] not in " \t"):
        if text[at] == "\\" and text[at + 1 : at + 2] == '"':
            at += 1
        elif text[at] == '"':
            quoted = not quoted
        at += 1
    return None if at == len(text) and quoted else at


def _dequote(text: str, at: int) -> tuple[str, int]:
    """misc.c opt_dequote: the quoted value at TEXT[AT] (\\" for a quote) and where it ends."""
    if text[at : at + 1] != '"':
        raise Invalid("missing start quote")
    out, at = [], at + 1
    while at < len(text) and text[at] != '"':
        if text[at] == "\\" and text[at + 1 : at + 2] == '"':
            at += 1
        out.append(text[at])
        at += 1
    if at >= len(text):
        raise Invalid("missing end quote")
    return "".join(out), at + 1


# NamedTuples, as in sshsig.py (start-up cost).
class SignerOptions(Record):
    """One line's options (sshsig.c struct sshsigopt); 0 is no bound."""

    cert_authority: bool = False
    namespaces: str | None = None
    valid_after: int = 0
    valid_before: int = 0

    @classmethod
    def parse(cls, text: str) -> "SignerOptions":
        """sshsig.c sshsigopt_parse: option names in any case, each once, values quoted;
        Invalid (the line is then skipped) otherwise."""
        found: dict[str, Any] = {}
        at = 0
        while at < len(text) and text[at] not in " \t":
            lower = text[at:].lower()
            if lower.startswith("cert-authority"):
                found["cert_authority"] = True
                at += len("cert-authority")
            else:
                for name, field in (
                    ("namespaces", "namespaces"),
                    ("valid-after", "valid_after"),
                    ("valid-before", "valid_before"),
                ):
                    if lower.startswith(name + "="):
                        if field in found:
                            raise Invalid(f'multiple "{name}" clauses')
                        value, at = _dequote(text, at + len(name) + 1)
                        if field == "namespaces":
                            found[field] = value
                        else:
                            seconds = parse_absolute_time(value)
                            if not seconds:
                                raise Invalid(f'invalid "{name}" time')
                            found[field] = seconds
                        break
            if at >= len(text) or text[at] in " \t":
                break
            if text[at] != ",":
                raise Invalid("unknown key option")
            at += 1
            if at >= len(text):
                raise Invalid("unexpected end-of-options")
        options = cls(**found)
        if options.valid_after and options.valid_before and options.valid_before <= options.valid_after:
            raise Invalid('"valid-before" time is before "valid-after"')
        return options


class SignerLine(Record):
    """One line of allowed_signers that names principals: its key and options, or why
    ssh-keygen would skip it (`problem`)."""

    number: int
    principals: str
    key: PublicKey | None = None
    options: SignerOptions = SignerOptions()
    problem: str | None = None

    @classmethod
    def parse(cls, number: int, line: str) -> "SignerLine | None":
        """sshsig.c parse_principals_key_and_options: None for a blank or comment line."""
        text = line.lstrip(" \t")
        if not text or text.startswith("#"):
            return None
        principals, rest = _strdelimw(text)
        if principals is None or rest is None:
            return cls(number, principals or "", problem="invalid line")
        key, options = _read_key(rest), None
        if key is None:  # no key first: options, then the key
            end = _past_options(rest)
            if end is None:
                return cls(number, principals, problem="invalid options")
            if end >= len(rest):
                return cls(number, principals, problem="missing key")
            options = rest[:end]
            key = _read_key(rest[end + 1 :].lstrip(" \t"))
            if key is None:
                return cls(number, principals, problem="invalid key")
        try:
            parsed = SignerOptions.parse(options or "")
        except Invalid as exc:
            return cls(number, principals, key, problem=f"bad options: {exc}")
        return cls(number, principals, key, parsed)


class AllowedSigners(Record):
    """An allowed_signers file, read as ssh-keygen reads it."""

    name: str
    lines: tuple[SignerLine, ...]

    @classmethod
    def read(cls, path: Path) -> "AllowedSigners":
        _plain_file(path, "allowed_signers")
        return cls.parse(path.read_bytes(), path.name)

    @classmethod
    def parse(cls, data: bytes, name: str = ALLOWED_SIGNERS_FILE) -> "AllowedSigners":
        # as getline and C's string functions read it: one character a byte, each line with
        # its newline, a line's text ending at a NUL
        lines = data.decode("latin-1").split("\n")
        lines = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
        parsed = (SignerLine.parse(number, line.split("\0", 1)[0]) for number, line in enumerate(lines, 1))
        return cls(name, tuple(line for line in parsed if line is not None))

    def _check(self, line: SignerLine, key: PublicKey, namespace: str | None, at: int) -> str | None:
        """check_allowed_keys_line after the principal: None where LINE admits KEY in
        NAMESPACE at AT; else why not ("" for a line of another key, or of a CA's: keys
        signed by a CA are certificates, refused by PublicKey.from_blob)."""
        where = f"{self.name}:{line.number}"
        if line.problem is not None:
            return f"{where}: {line.problem}"
        if line.options.cert_authority or line.key != key:
            return ""
        options = line.options
        if (
            options.namespaces is not None
            and namespace is not None
            and match_pattern_list(namespace, options.namespaces) != 1
        ):
            return f'{where}: key is not permitted for use in signature namespace "{namespace}"'
        if options.valid_after and at < options.valid_after:
            return (
                f"{where}: key is not yet valid: verify time {_time_text(at)} < "
                f"valid-after {_time_text(options.valid_after)}"
            )
        if options.valid_before and at > options.valid_before:
            return (
                f"{where}: key has expired: verify time {_time_text(at)} > "
                f"valid-before {_time_text(options.valid_before)}"
            )
        return None

    def _matches(
        self, key: PublicKey, principal: str | None, namespace: str | None, at: int
    ) -> Iterator[tuple[SignerLine, str | None]]:
        for line in self.lines:
            if principal is not None and match_pattern_list(_c_text(principal), line.principals) != 1:
                continue
            yield line, self._check(line, key, namespace, at)

    def check(self, key: PublicKey, principal: str, namespace: str, at: int) -> None:
        """sshsig_check_allowed_keys: Invalid unless a line lists PRINCIPAL with KEY for
        NAMESPACE at AT (seconds since the epoch)."""
        of_key, unreadable = [], []
        for line, reason in self._matches(key, principal, namespace, at):
            if reason is None:
                return
            if reason and line.key == key:
                of_key.append(reason)
            elif reason and line.key is None:
                unreadable.append(reason)
        reasons = of_key or unreadable
        raise Invalid(
            reasons[0] if reasons else f"no line of {self.name} lists this {key.kind} key for {principal!r}"
        )

    def principals(self, key: PublicKey, at: int) -> tuple[list[str], str | None]:
        """sshsig_find_principals: the principals of the first line listing KEY at AT (any
        namespace), one a name as ssh-keygen -Y find-principals prints them; else no
        principals and the reason of the first line with KEY that refused it."""
        refused = None
        for line, reason in self._matches(key, None, None, at):
            if reason is None:
                found = []
                for name in line.principals.split(","):
                    if not name:
                        break
                    found.append(name.encode("latin-1").decode("utf-8", "replace"))
                return found, None
            if reason and refused is None and line.key == key:
                refused = reason
        return [], refused


def _c_text(text: str) -> str:
    """TEXT as the bytes C compares, one character a byte (as AllowedSigners reads)."""
    return text.encode("utf-8").decode("latin-1")
