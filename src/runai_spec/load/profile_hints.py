"""A profile's schema errors in its own words: field paths, their lines, and the hints."""

from __future__ import annotations

import re
from typing import Any

from ..facts.kubeflow import NAME_MAX


def field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = "global" if part == "global_" else str(part)
            out = f"{out}.{name}" if out else name
    return out


def line_of(path: str, lines: dict[str, int]) -> int | None:
    """The line of a field, or of its nearest parent (a missing field has none of its own)."""
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


_SUFFIX = {"k": 3, "m": 6, "b": 9, "g": 9, "t": 12}


_COUNT = r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMbBgGtT])\s*\Z"  # read on a bad value only: re.match


YAML11_BOOLS = {
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "True",
    "False",
    "TRUE",
    "FALSE",
    "Yes",
    "No",
    "On",
    "Off",
    "YES",
    "NO",
    "ON",
    "OFF",
    "1",
    "0",
}


def count_hint(text: str) -> str | None:
    """`13B` -> "write 13000000000 or 13e9" (parameter counts are plain numbers)."""
    match = re.match(_COUNT, text)
    if match is None:
        return None
    digits, exp = match.group(1), _SUFFIX[match.group(2).lower()]
    whole, _, frac = digits.partition(".")
    if len(frac) > exp:
        return None
    full = str(int(whole + frac + "0" * (exp - len(frac))))
    return f"write the number out: {full} or {digits}e{exp}"


def dns_suggestion(value: Any, pattern: str) -> str | None:
    """A lower-case DNS label close to value (`ResNet_Baseline` -> `resnet-baseline`)."""
    if not isinstance(value, str):
        return None
    label = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:NAME_MAX].rstrip("-")
    return label if label != value and re.match(pattern, label) else None


def fallback_hint(kind: str, path: str) -> str:
    """Every error gets a hint: where no better one is known, what the field takes."""
    if kind in ("string_type", "str_type"):
        return "write text here (a plain scalar or a quoted string; null is not text)"
    if kind.startswith(("int_", "float_")) or kind in (
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
    ):
        return f"`runai-spec schema` shows the numbers {path or 'this field'} takes"
    return f"`runai-spec schema` shows what {path or 'a profile'} takes"
