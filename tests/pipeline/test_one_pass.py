"""One pass is one pass (issue 26 item 2): a bad value in one list item hides nothing else, a
typo'd field is checked as the field its hint names, findings come sorted by line, and an
elastic preset's error and warning name the same global batch."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from conftest import ROOT, run

MULTI = yaml.safe_load((ROOT / "examples" / "multi-node" / "profile.yaml").read_text())
ELASTIC = yaml.safe_load((ROOT / "examples" / "elastic" / "profile.yaml").read_text())


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _said(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith(("error:", "warning:"))]


def _line_numbers(stderr: str) -> list[int]:
    return [
        int(m.group(1)) if m.group(1) else 10**9
        for ln in stderr.splitlines()
        if (m := re.match(r"^(?:error|warning|info): [^:]+:(?:(\d+):)?", ln))
    ]


def test_a_bad_value_in_one_data_item_hides_neither_the_checkpoint_nor_other_items(tmp_path: Path) -> None:
    data = copy.deepcopy(MULTI)
    data["data"] = [
        {"source": "datasets-shared", "path": "/data", "read_only": "maybe"},
        {"source": "unapproved-src", "path": "/data2"},
    ]
    del data["checkpoint"]["pvc"]
    result = run("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 2, result.output
    said = _said(result.stderr)
    assert any("data[0].read_only: must be true or false" in ln for ln in said), said
    assert any("checkpoint: set exactly one of checkpoint.pvc or checkpoint.source" in ln for ln in said), (
        said
    )
    assert any("data[1].source: 'unapproved-src' is not an approved data source" in ln for ln in said), said
    assert _line_numbers(result.stderr) == sorted(_line_numbers(result.stderr))


def test_a_bad_field_of_a_data_item_hides_none_of_that_items_other_findings(tmp_path: Path) -> None:
    """Issue 40 item 6: the bad read_only replaced the whole item, hiding its bad source."""
    data = copy.deepcopy(MULTI)
    data["data"] = [{"source": "unapproved-src", "path": "/data", "read_only": "maybe"}]
    result = run("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 2, result.output
    said = _said(result.stderr)
    assert any("data[0].read_only: must be true or false" in ln for ln in said), said
    assert any("data[0].source: 'unapproved-src' is not an approved data source" in ln for ln in said), said
    data["data"] = [{"source": "unapproved-src", "path": "relative/data"}]
    said = _said(run("validate", str(_write(tmp_path, data))).stderr)
    assert any("data[0].path: String should match pattern" in ln for ln in said), said
    assert any("data[0].source: 'unapproved-src' is not an approved data source" in ln for ln in said), said


def test_a_typo_is_checked_as_the_field_its_hint_names(tmp_path: Path) -> None:
    data = copy.deepcopy(MULTI)
    data["batch"] = {"local": 4, "grad_acum": 8, "global": 512}  # right, once spelt right
    result = run("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 2
    said = _said(result.stderr)
    assert len(said) == 1 and said[0].endswith("batch.grad_acum: unknown field"), said
    assert "did you mean 'grad_accum'?" in result.stderr and "[global-batch]" not in result.stderr
    data["batch"] = {"local": 4, "grad_acum": 8, "global": 500}
    result = run("validate", str(_write(tmp_path, data)))
    assert "500 != local 4 x processes 16 x grad_accum 8 = 512" in result.stderr
    assert "hint: set batch.global to 512" in result.stderr


def test_findings_come_sorted_by_line(tmp_path: Path) -> None:
    data = copy.deepcopy(MULTI)
    data["name"] = "a" * 60  # name-length, line 1: a rule after global-batch
    data["batch"]["global"] = 500
    result = run("validate", str(_write(tmp_path, data)))
    assert result.exit_code == 1
    assert "[name-length]" in result.stderr and "[global-batch]" in result.stderr
    numbers = _line_numbers(result.stderr)
    assert numbers == sorted(numbers), result.stderr


def test_an_elastic_presets_error_and_warning_name_the_same_global_batch(tmp_path: Path) -> None:
    data = copy.deepcopy(ELASTIC)
    data["batch"]["global"] = 100
    result = run("validate", str(_write(tmp_path, data)))
    said = [ln for ln in _said(result.stderr) if "[global-batch]" in ln]
    assert len(said) == 2, said
    error, warning = said
    assert error.startswith("error:") and warning.startswith("warning:")
    assert "= 512 (at 4 pods, the elastic preset's most)" in error
    assert "ranges 256..512 as pods scale 2..4; batch.global is declared at 4 pods (512)" in warning
    assert "hint: set batch.global to 512," in result.stderr
