"""Each error and finding is exactly its own lines (red team, item 7): a value with a line
break, CR, U+2028/U+2029, U+0085 or a bidi override printed in an `error:`, `warning:`,
`info:` or `hint:` line is shown escaped, so it cannot start a forged line (`ok: all
clean`) or reorder one on the terminal."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, examples, run
from runai_spec.check.storage import PATH_CONTROL
from runai_spec.errors import UNSAFE_CHARS, InputError, Location, unsafe_text, visible
from runai_spec.findings import Finding
from runai_spec.load.profile import ProfileProblems
from runai_spec.outputs.admission import documents as admission
from runai_spec.render.manifests import COMMENT_BREAKS

PROFILE = (ROOT / "examples" / "multi-node" / "profile.yaml").read_text(encoding="utf-8")
BREAKS = ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"]
BIDI = [
    "\u202e",
    "\u202d",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]
HOSTILE = st.lists(
    st.one_of(st.sampled_from([*BREAKS, *BIDI, "\x1b[2J", "\t", "ok: ", "error: "]), st.characters()),
    max_size=12,
).map("".join)


def one_line_each(lines: list[str]) -> None:
    for line in lines:
        assert unsafe_text().search(line) is None, repr(line)
        assert len(line.splitlines()) <= 1, repr(line)


def test_a_diagnostics_reason_cannot_print_a_forged_ok_line(write_profile: Callable[..., Path]) -> None:
    text = PROFILE + 'diagnostics: {nccl_debug: true, reason: "x\\nok: all clean\\u202e\\u2028"}\n'
    path = write_profile(text)
    result = run("validate", str(path))
    lines = result.stderr.splitlines()
    assert not [ln for ln in lines if ln.startswith("ok: all clean")], result.stderr
    (warning,) = [ln for ln in lines if ln.startswith("warning:")]
    assert warning.endswith("NCCL_DEBUG=INFO is on (x\\nok: all clean\\u202e\\u2028) [nccl-debug-temporary]")
    one_line_each(lines)


def test_a_profile_path_with_a_line_break_stays_on_its_lines(tmp_path: Path) -> None:
    folder = tmp_path / "a\nok: forged\u2028"
    folder.mkdir()
    bad = folder / "bad.yaml"
    bad.write_text(PROFILE.replace("  local: 4", "  local: 5"), encoding="utf-8")
    good = folder / "good.yaml"
    good.write_text(PROFILE, encoding="utf-8")
    result = run("validate", str(bad), str(good))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    one_line_each(lines)
    assert all(ln.split(":", 1)[0] in ("error", "warning", "info", "hint", "ok") for ln in lines)
    shown = visible(str(folder))
    assert f"error: {shown}/bad.yaml:13: batch.global: " in result.stderr
    assert f"ok: {shown}/good.yaml: llm-7b-fsdp: " in result.stderr
    assert "ok: forged" not in [ln[:10] for ln in lines]


def test_an_unreadable_profile_path_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "x\rerror: nothing\u202e.yaml"
    result = run("validate", str(missing))
    assert result.exit_code == 2
    one_line_each(result.stderr.splitlines())
    assert "x\\rerror: nothing\\u202e.yaml" in result.stderr


def test_each_break_and_bidi_character_is_shown_escaped() -> None:
    assert visible("a\nb\rc\td\u2028e\u2029f\u202eg\x85h\x1bi") == (
        "a\\nb\\rc\\td\\u2028e\\u2029f\\u202eg\\x85h\\x1bi"
    )
    assert visible("plain text, é and 🚀") == "plain text, é and 🚀"
    assert visible(visible("a\nb")) == "a\\nb"  # applying it twice changes nothing


@settings(max_examples=examples(500), deadline=None)
@given(HOSTILE, HOSTILE, HOSTILE, HOSTILE, st.integers(1, 99))
def test_a_finding_is_exactly_its_lines(message: str, hint: str, file: str, field: str, line: int) -> None:
    finding = Finding("nccl-transport-env", Location(file, line, field), message, hint or None, "warning")
    lines = finding.lines()
    assert len(lines) == (2 if hint else 1)
    one_line_each(lines)
    assert lines[0].startswith("warning: ")
    assert lines[0].endswith(" [nccl-transport-env]")


@settings(max_examples=examples(500), deadline=None)
@given(HOSTILE, HOSTILE, HOSTILE, HOSTILE, st.lists(HOSTILE, max_size=3))
def test_an_error_is_exactly_its_lines(
    message: str, hint: str, file: str, field: str, also: list[str]
) -> None:
    error = InputError(
        message,
        file=file or None,
        line=3,
        field=field or None,
        hint=hint or None,
        also=[f"error: {a}" for a in also],
    )
    lines = error.lines()
    assert len(lines) == 1 + len(also) + (1 if hint else 0)
    one_line_each(lines)
    assert str(error).split("\n") == lines
    problems = ProfileProblems(
        [error], [Finding("image-digest", Location(file, 2, field), message, hint or None)]
    )
    one_line_each(problems.lines())


def test_presets_verify_live_lines_stay_lines_whatever_the_cluster_s_keys(tmp_path: Path) -> None:
    """`presets verify --live` names presets from the cluster's ConfigMap keys."""
    deployed = {"x\nok: all presets match\u202e.sha256": "0" * 64}
    out, err = admission.deployment_report(tmp_path, {}, deployed)
    assert out == []
    assert len(err) == 2
    one_line_each(err)
    assert "x\\nok: all presets match\\u202e.yaml: live: deployed on the cluster" in err[0]


@pytest.mark.parametrize(
    "pattern",
    [UNSAFE_CHARS, COMMENT_BREAKS, PATH_CONTROL],
    ids=["errors.visible", "render.manifests comments", "check.storage paths"],
)
def test_a_pattern_skipped_for_a_printable_text_matches_no_printable_character(pattern: str) -> None:
    """visible(), explain's comments and the storage check's path pass a printable text as it
    is, unscanned (each pattern is compiled only for a text that is not): sound only while no
    character the pattern matches is printable."""
    import sys

    every = "".join(map(chr, range(sys.maxunicode + 1)))
    matched = re.findall(pattern, every)
    assert matched and [hex(ord(c)) for c in matched if c.isprintable()] == []


def test_visible_skips_only_text_that_holds_no_unsafe_character() -> None:
    """visible() escapes each unsafe character, and leaves a printable text as it is."""
    for char in [*BREAKS, *BIDI, "\x1b", "\t", "\x7f", "\x9f"]:
        assert visible(f"a{char}b") != f"a{char}b"
    assert visible("plain, printable: ünï ✓") == "plain, printable: ünï ✓"
