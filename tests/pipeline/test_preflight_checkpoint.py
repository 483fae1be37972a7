"""The preflight's checkpoint row: a format that could not be tested here is `skip`, with why."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def preflight() -> Any:
    """runai_spec.preflight (it imports torch), imported by the tests that use it: imported at
    the module's collection, torch cost every xdist worker 1.5 s of CPU (issue 29)."""
    pytest.importorskip("torch")
    return importlib.import_module("runai_spec.preflight")


class OneRank:
    """Exchange for a world of one."""

    def gather(self, value: Any) -> list[Any]:
        return [value]


@pytest.fixture
def group(preflight: Any) -> Iterator[None]:
    dist: Any = importlib.import_module("torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def checkpoint_row(
    preflight: Any, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    rep = preflight.Reporter(rank=0)
    ckpt = preflight.Checkpointer(tmp_path, fmt, 0, None)
    model = preflight.TinyModel()
    ckpt.save(model, 2)
    note = {"format": fmt, "written_as": ckpt.format, "note": ckpt.note}
    preflight.check_checkpoint(
        rep, ckpt, model, 2, preflight._digest(model), argparse.Namespace(faults=[]), note, OneRank()
    )
    rows = [
        json.loads(line.split(" ", 1)[1])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(preflight.PREFIX + " ")
    ]
    return next(r for r in rows if r.get("check") == "checkpoint")


def test_dcp_without_numpy_is_skip_with_the_reason(
    preflight: Any,
    tmp_path: Path,
    group: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        preflight.importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a)
    )
    row = checkpoint_row(preflight, tmp_path, "dcp", capsys)
    assert row["status"] == "skip" and row["ok"]
    assert row["message"].startswith("dcp not tested: torch.distributed.checkpoint needs numpy")
    assert row["written_as"] == "torch" and row["untested"] is True


def test_a_format_tested_here_passes(
    preflight: Any, tmp_path: Path, group: None, capsys: pytest.CaptureFixture[str]
) -> None:
    row = checkpoint_row(preflight, tmp_path, "torch", capsys)
    assert row["status"] == "pass" and "identical weights" in row["message"]
