"""`runai-spec rehearse PROFILE` end to end on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, needs_torch
from runai_spec.cli import app


# long (issue 29): CI rehearses the multi-node example through the command in netns mode
# (test_rehearse_network) and through the API (test_rehearse_cpu); the record `plan` reads
# is tests/outputs/test_plan_ticket's
@pytest.mark.long
@pytest.mark.torch
@pytest.mark.slow
def test_rehearse_command_prints_the_checks_and_exits_0(tmp_path: Path) -> None:
    needs_torch()
    result = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(ROOT / "examples/multi-node/profile.yaml"),
            "--procs-per-pod",
            "2",
            "--logs",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "result.json").exists()
    # the latest rehearsal is recorded where `plan` reads it, for the engineer's ticket
    from runai_spec.rehearse.records import record_path

    record = record_path("nlp-lab", "llm-7b-fsdp")
    assert f"recorded for `runai-spec plan`: {record}" in result.stderr
    ticket = CliRunner().invoke(app, ["plan", str(ROOT / "examples/multi-node/profile.yaml")])
    latest = ticket.stdout.split("## Latest rehearsal\n\n", 1)[1]
    assert latest.startswith("**passed** at ") and "of this profile; world 4, gloo" in latest
    assert f"logs `{tmp_path.resolve()}`" in latest and "| ranks | pass |" in latest


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_a_timeout_that_is_not_a_positive_number_is_refused_in_two_lines(tmp_path: Path, value: str) -> None:
    result = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(ROOT / "examples/multi-node/profile.yaml"),
            "--own-script",
            "--timeout",
            value,
            "--logs",
            str(tmp_path / "logs"),
        ],
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: --timeout: ") and "positive number of seconds" in lines[0]
    assert lines[1].startswith("hint: ") and "--timeout 60" in lines[1]
    assert not (tmp_path / "logs").exists()  # refused before anything ran
