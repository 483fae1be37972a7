"""init's name prompt says the room the name-length rule allows (issue 40 item 6): 48
characters on a two-pod preset (`<name>-smoke-worker-1` within 63), not the DNS label's 63."""

from __future__ import annotations

from pathlib import Path

from conftest import run
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.init import name_room_for

DIGEST = "sha256:" + "4f" * 32
FLAGS = ["--project", "nlp-lab", "--preset", "h200-2x8-ib", "--image"]
FLAGS += [f"registry.scc.example.org/vision-lab/resnet:2.0@{DIGEST}", "--command", "train.py"]
FLAGS += ["--local-batch", "4", "--grad-accum", "8", "--parameters", "7B", "--strategy", "fsdp"]


def test_the_room_is_what_the_name_length_rule_allows() -> None:
    registry = PresetRegistry()
    assert name_room_for(registry.get("h200-2x8-ib").preset) == 48
    assert name_room_for(registry.get("h200-elastic-2to4x8-ib").preset) == 48


def test_a_name_one_over_the_room_is_refused_at_its_flag(tmp_path: Path) -> None:
    result = run("init", str(tmp_path / "x"), "--no-input", *FLAGS, "--name", "a" * 49)
    assert result.exit_code == 2, result.output
    assert "--name:" in result.stderr and "at most 48 characters" in result.stderr
    assert not (tmp_path / "x" / "profile.yaml").exists()


def test_a_name_of_the_whole_room_is_written_and_validates(tmp_path: Path) -> None:
    result = run("init", str(tmp_path / "x"), "--no-input", *FLAGS, "--name", "a" * 48)
    assert result.exit_code == 0, result.output
    checked = run("validate", str(tmp_path / "x" / "profile.yaml"))
    assert "[name-length]" not in checked.stderr, checked.stderr
