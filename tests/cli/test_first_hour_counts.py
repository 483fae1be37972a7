"""A count is a number as the strict loader reads one (red team, item 6): text that Python's
int() or YAML 1.1 would read as a number (`1_000`, `017`, `+4`, `"4"`) is bad input with a
hint, never silently a count."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT, run
from runai_spec.load.profile import parse_profile

PROFILE = (ROOT / "examples" / "multi-node" / "profile.yaml").read_text(encoding="utf-8")
FIELDS = {  # field: (line as written in the example, its key)
    "batch.local": "  local: 4",
    "batch.grad_accum": "  grad_accum: 8",
    "batch.global": "  global: 512",
    "model.parameters": "  parameters: 7000000000",
    "model.sequence_length": "  sequence_length: 4096",
}
TEXT = ["1_000", "017", "00004", "+4", '"4"', '" 4 "', '"1_0"', "'4'", "0x4", "4_", "1e3x", "four", '""']


@pytest.mark.parametrize("written", TEXT)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_count_written_as_text_is_bad_input_with_a_hint(
    write_profile: Callable[..., Path], field: str, written: str
) -> None:
    line = FIELDS[field]
    text = PROFILE.replace(line, line.split(":")[0] + ": " + written)
    assert text != PROFILE
    result = run("validate", str(write_profile(text)))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    (head,) = [ln for ln in lines if f": {field}: " in ln]
    assert re.search(rf": {re.escape(field)}: '.*' is not a number$", head), head
    assert lines[lines.index(head) + 1] == (
        "hint: write a plain number, e.g. 4 (digits only: no quotes, leading zeros, `+`, `_` or spaces)"
    )


def test_zero_stage_as_text_is_bad_input() -> None:
    text = PROFILE.replace("strategy: fsdp", "strategy: deepspeed\nzero_stage: '2'")
    with pytest.raises(Exception, match=r"zero_stage: '2' is not a number"):
        parse_profile(text, "p.yaml")


@pytest.mark.parametrize("written, value", [("4", 4), ("4.0", 4), ("1e0", 1), ("4e0", 4)])
def test_a_json_number_is_still_a_count(written: str, value: int) -> None:
    loaded = parse_profile(PROFILE.replace("  local: 4", f"  local: {written}"), "p.yaml")
    assert loaded.profile.batch.local == value


def test_a_suffix_keeps_its_own_hint(write_profile: Callable[..., Path]) -> None:
    result = run("validate", str(write_profile(PROFILE.replace("parameters: 7000000000", "parameters: 7B"))))
    assert result.exit_code == 2
    assert "model.parameters: '7B' is not a number" in result.stderr
    assert "hint: write the number out: 7000000000 or 7e9" in result.stderr


@pytest.mark.parametrize("example", sorted(p.parent.name for p in (ROOT / "examples").glob("*/profile.yaml")))
def test_the_examples_still_validate(example: str) -> None:
    parse_profile((ROOT / "examples" / example / "profile.yaml").read_text(), example)
