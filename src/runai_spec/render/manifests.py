"""Manifest values: parse rendered text strictly, one canonical dump."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from json.encoder import encode_basestring
from typing import Any

from ..load.yaml import parse_documents

Manifest = dict[str, Any]
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
# YAML 1.1 readers (PyYAML, older tools) would turn these plain keys into non-strings.
_AMBIGUOUS = re.compile(
    r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|"
    r"on|On|ON|off|Off|OFF|null|Null|NULL|~)$"
)
# Escape what PyYAML's reader refuses even inside quotes, and the YAML 1.1 line breaks
# (NEL, LS, PS) that a reader would fold into spaces. Compiled on first non-ASCII value:
# the class spans most of Unicode and costs ~9 ms to compile.
_UNPRINTABLE_CLASS = "[^\x09\x0a\x0d\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"


@lru_cache(maxsize=1)
def _unprintable() -> re.Pattern[str]:
    return re.compile(_UNPRINTABLE_CLASS)


@lru_cache(maxsize=8192)
def quote(text: str) -> str:
    """A YAML double-quoted scalar that any YAML 1.1 or 1.2 reader reads back as `text`."""
    # json.dumps(text, ensure_ascii=False) without its per-call overhead (libjson's C encoder);
    # cached because labels, keys and image names repeat across the objects of a batch.
    encoded: str = encode_basestring(text)
    if encoded.isascii() and "\x7f" not in encoded:
        return encoded  # json already escaped every ASCII control character
    return _unprintable().sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)


def scalar(value: Any) -> str:
    """Encode one value as a YAML scalar; anything but str/int/float/bool/None is a bug."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if value is None:
        return "null"
    raise TypeError(f"cannot encode {type(value).__name__} as a YAML scalar")


def encode(value: Any) -> str:
    """One JSON value (YAML 1.2 flow too) for a mapping, a list or tuple, or a scalar, nested:
    every key and scalar through `scalar`, so no value can add a key or an item."""
    # This runs for every value of a render: the exact JSON types first, by type() (no
    # abstract Mapping check for a number), then what subclasses them, the Mapping last.
    kind = type(value)
    if kind is str:
        return quote(value)
    if kind is dict:
        return encode_pairs(value.items())
    if kind is list or kind is tuple:
        return "[" + ", ".join([quote(item) if type(item) is str else encode(item) for item in value]) + "]"
    if kind is int or kind is bool or value is None:
        return scalar(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, dict):
        return encode_pairs(value.items())
    # a record (a NamedTuple: plan, volume, finding) is a tuple too: refused, never a list
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return "[" + ", ".join([encode(item) for item in value]) + "]"
    if isinstance(value, Mapping):
        return encode_pairs(value.items())
    return scalar(value)


def encode_pairs(pairs: Iterable[tuple[Any, Any]]) -> str:
    """A JSON object of (key, value) PAIRS in their order. A key given twice is written twice,
    so the strict parse (parse_rendered) refuses it, as it refuses any duplicate key."""
    parts = []
    for key, value in pairs:
        if type(key) is not str and not isinstance(key, str):
            raise TypeError(f"cannot encode {type(key).__name__} as a mapping key")
        parts.append(f"{quote(key)}: {quote(value) if type(value) is str else encode(value)}")
    return "{" + ", ".join(parts) + "}"


@lru_cache(maxsize=4096)
def _key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) and not _AMBIGUOUS.match(key) else quote(key)


def _emit(
    value: Any, pad: str, out: list[str], comments: dict[str, str] | None = None, path: str = ""
) -> None:
    # comments (path -> text) is for `render --explain`; None keeps the hot path lean (a
    # string value, the most common line, costs two cached lookups and one f-string).
    inner = pad + "  "
    append = out.append
    if isinstance(value, dict):
        for key, child in value.items():
            sub = "" if comments is None else f"{path}.{key}" if path else key
            if type(child) is str:
                line = f"{pad}{_key(key)}: {quote(child)}"
            elif type(child) is int:  # (a bool is no int here: its type is bool)
                line = f"{pad}{_key(key)}: {child}"
            elif isinstance(child, (dict, list)) and child:
                append(f"{pad}{_key(key)}:")
                _emit(child, inner, out, comments, sub)
                continue
            else:
                line = f"{pad}{_key(key)}: {_flow(child)}"
            append(line if comments is None else _commented(line, comments, sub))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            sub = "" if comments is None else f"{path}[{index}]"
            if type(item) is str:
                line = f"{pad}- {quote(item)}"
            elif isinstance(item, (dict, list)) and item:
                first = len(out)
                _emit(item, inner, out, comments, sub)
                out[first] = f"{pad}- {out[first][len(inner) :]}"  # its first line after the dash
                continue
            else:
                line = f"{pad}- {_flow(item)}"
            append(line if comments is None else _commented(line, comments, sub))


def _commented(line: str, comments: dict[str, str] | None, path: str) -> str:
    if not comments or path not in comments:
        return line
    # A comment ends at the line break: one in the text (a profile path with a newline) would
    # start a line of YAML of its own, so each break or control character is written escaped.
    comment = comments[path]
    if not comment.isprintable():  # compiled only for such a text (~1 M instructions a start)
        comment = re.sub(COMMENT_BREAKS, _escaped, comment)
    return f"{line.ljust(72)}  # {comment}"


# Each is a control, separator or format character: a text str.isprintable() passes holds none.
COMMENT_BREAKS = r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]"


def _escaped(match: re.Match[str]) -> str:
    return json.dumps(match.group())[1:-1]


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return scalar(value)


def dump(manifests: list[Manifest], *, comments: dict[str, str] | None = None) -> str:
    """One canonical YAML text: keys in the order given, every string double-quoted.
    With comments ({field path: text}), each such value's line ends in `# text`."""
    parts = []
    for manifest in manifests:
        lines: list[str] = []
        _emit(manifest, "", lines, comments)
        parts.append("\n".join(lines) + "\n")
    return "---\n" + "---\n".join(parts) if len(parts) > 1 else "".join(parts)


def parse(text: str, source: str) -> list[Manifest]:
    """Parse rendered or committed manifests with the strict loader."""
    return [doc for doc in parse_documents(text, source) if doc is not None]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = [k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])]
        raise ValueError(f"duplicate key {seen[0]!r}")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_rendered(text: str) -> Manifest:
    """Parse one rendered template (JSON, a subset of YAML 1.2) strictly: duplicate keys,
    NaN/Infinity and a top level that is not a mapping are refused, so a value that could
    change the structure shows up as an error here instead of in the cluster."""
    value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    if not isinstance(value, dict):
        raise ValueError(f"top level is {type(value).__name__}, not a mapping")
    return value


def object_key(manifest: Manifest) -> str:
    """`Kind/namespace/name`, how diff and submit identify an object."""
    meta = manifest.get("metadata") or {}
    return f"{manifest.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"
