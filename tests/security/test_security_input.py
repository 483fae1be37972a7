"""User input that used to crash (exit 70) or pass silently is one error line (issue 12,
items 8 and 13)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import run_module


def one_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and text in errors[0], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("parameters", ["1" + "0" * 320, "1e999"])
def test_a_huge_parameter_count_is_bad_input(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], parameters: str
) -> None:
    text = yaml.safe_dump(base_profile, sort_keys=False).replace(
        "parameters: 1000000", f"parameters: {parameters}"
    )
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "parameters:" in row)
    one_error(run_module("validate", str(write_profile(text))), 2, f".yaml:{line}: ")  # names the line


def test_an_integer_of_5000_digits_under_an_unknown_key_is_bad_input(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    text = yaml.safe_dump(base_profile, sort_keys=False) + "zzz: " + "7" * 5000 + "\n"
    one_error(run_module("validate", str(write_profile(text))), 2, "a number of 5000 characters")


def test_an_image_with_a_trailing_newline_is_refused(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["image"] += "\n"
    result = run_module("validate", str(write_profile(base_profile)))
    assert result.returncode == 1 and "[image-digest]" in result.stderr


def test_a_project_that_makes_the_namespace_too_long_is_refused(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["project"] = "p" * 60
    result = run_module("validate", str(write_profile(base_profile)))
    assert result.returncode == 1 and "which is not a DNS label of at most 63" in result.stderr


@pytest.mark.parametrize("expires", ["20271231", "2027-W52-1", "2027-13-45"])
def test_approve_with_an_expiry_that_is_not_yyyy_mm_dd_is_bad_input(
    presets_dir: Path, engineer_key: Path, expires: str
) -> None:
    one_error(
        run_module(
            "presets",
            "approve",
            "h200-8gpu",
            "--key",
            str(engineer_key),
            "--expires",
            expires,
            "--dir",
            str(presets_dir),
        ),
        2,
        "--expires: not a date (YYYY-MM-DD)",
    )


def test_approve_by_a_typed_name_is_refused(presets_dir: Path, engineer_key: Path) -> None:
    """The approver is the signing key's principal: a typed name (control characters or
    not), even beside a listed key, is refused and the ledger is left alone."""
    before = (presets_dir / "approvals.yaml").read_bytes()
    one_error(
        run_module(
            "presets", "approve", "h200-8gpu", "--by", "A.\x1b[31m Engineer", "--dir", str(presets_dir)
        ),
        2,
        "--by: an approval carries its engineer's SSH signature",
    )
    one_error(
        run_module(
            "presets",
            "approve",
            "h200-8gpu",
            "--by",
            "A. Engineer",
            "--key",
            str(engineer_key),
            "--dir",
            str(presets_dir),
        ),
        2,
        "SSH signature",
    )
    assert (presets_dir / "approvals.yaml").read_bytes() == before


def test_a_ledger_date_that_is_no_date_is_bad_input(presets_dir: Path) -> None:
    ledger = presets_dir / "approvals.yaml"
    text = ledger.read_text()
    ledger.write_text(text.replace('expires: "2027-12-31"', 'expires: "2027-13-45"', 1))
    one_error(run_module("presets", "verify", "--dir", str(presets_dir)), 1, "approvals.yaml")


@pytest.mark.parametrize("pattern", ["runai-{proj}", "runai-{0}", "runai-{project!r}", "runai-{"])
def test_a_site_namespace_pattern_with_an_unknown_placeholder_is_bad_input(
    presets_dir: Path, engineer_key: Path, pattern: str
) -> None:
    site = presets_dir / "site.yaml"
    text = site.read_text()
    start = text.index("namespace_pattern:")
    end = text.index("\n", start)
    site.write_text(text[:start] + f'namespace_pattern: "{pattern}"' + text[end:])
    # an engineer cannot approve it: one line naming the field, exit 2
    approve = run_module("presets", "approve", "site", "--key", str(engineer_key), "--dir", str(presets_dir))
    one_error(approve, 2, "namespace_pattern")
    assert "placeholder" in approve.stderr or "not a pattern" in approve.stderr
