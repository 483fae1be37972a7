"""`runai-spec rehearse PROFILE` end to end on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runai_spec.cli import app

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.torch
@pytest.mark.slow
def test_rehearse_command_prints_the_checks_and_exits_0(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = CliRunner().invoke(app, ["rehearse", str(ROOT / "examples/multi-node/profile.yaml"),
                                      "--procs-per-pod", "2", "--logs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "result.json").exists()
