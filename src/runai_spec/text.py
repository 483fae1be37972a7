"""Escaping for every output: one line as it reads, Markdown text and code, fences, HTML."""

from __future__ import annotations

import html
import re

from .errors import unsafe_text, visible

# Backslash-escaped: every character that opens inline markup, a table cell or a heading's
# closing sequence; `<`, `>` and `&` become entities, so no HTML (`<!--`, `<details>`) opens.
_MD_ACTIVE = re.compile(r"[\\`*_\[\]|~$#]")


_MD_ENTITY = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


# A value at the start of a line must not open a list, a heading underline or a quote.
_MD_LINE_START = re.compile(r"^([-+=]|\d+[.)])")


def one_line(text: object) -> str:
    """The value on one line: each control character (CR, LF, tab, ESC, U+2028, U+202E...)
    written as a visible escape, never a line break or a terminal sequence (errors.visible)."""
    return visible(text)


def md_text(text: object) -> str:
    """Any value as literal Markdown text (paragraph, list item, heading, table cell): it
    renders as itself and cannot open markup, HTML, a new line or a new table cell."""
    value = _MD_ACTIVE.sub(lambda m: "\\" + m.group(), one_line(text))
    value = re.sub(r"[<>&]", lambda m: _MD_ENTITY[m.group()], value)
    return _MD_LINE_START.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], value)


def md_code(text: object, *, cell: bool = False) -> str:
    """Inline code showing the value exactly: the fence is longer than any backtick run in
    it; in a table cell (cell=True) each `|` is escaped, which the table removes again."""
    value = one_line(text)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", value)), default=0) + 1)
    pad = (
        " "
        if value[:1] == "`"
        or value[-1:] == "`"
        or (value[:1] == " " and value[-1:] == " " and value.strip(" "))
        else ""
    )
    if not value:
        value = " "
    if cell:
        value = value.replace("|", "\\|")
    return f"{fence}{pad}{value}{pad}{fence}"


def md_fence(content: str, info: str = "") -> list[str]:
    """A fenced code block holding content exactly: the fence is longer than any backtick
    run in it, so no line of the content can close the block."""
    runs = re.findall(r"`+", content)
    fence = "`" * max(3, max((len(r) for r in runs), default=0) + 1)
    body = unsafe_text().sub(lambda m: m.group() if m.group() in "\n\t" else one_line(m.group()), content)
    return [f"{fence}{info}", *body.split("\n"), fence]


def html_text(text: object) -> str:
    """A value inside raw HTML (diff's <details><summary>): entities, on one line."""
    return html.escape(one_line(text), quote=True)
