"""The launcher rule's hint shows the command as it should be written (issue 16, item 3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runai_spec.launcher import without_launcher
from runai_spec.workload import prepare_workload


@pytest.mark.parametrize(("command", "expected"), [
    (["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py", "--config", "c.yaml"],
     ["train.py", "--config", "c.yaml"]),
    (["torchrun", "--nnodes", "2", "--standalone", "train.py"], ["train.py"]),
    (["python", "train.py", "--out", "/ckpt"], ["train.py", "--out", "/ckpt"]),
    (["python3", "-u", "-X", "dev", "train.py", "--lr", "0.1"], ["train.py", "--lr", "0.1"]),
    (["/usr/bin/python", "train.py"], ["train.py"]),
])
def test_the_launcher_and_its_flags_come_off_the_suggested_command(
        command: list[str], expected: list[str]) -> None:
    assert without_launcher(command) == expected


def test_the_hint_is_the_command_without_the_launcher(
        base_profile: dict[str, Any], write_profile: Callable[..., Path]) -> None:
    base_profile["command"] = ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py",
                               "--config", "c.yaml"]
    findings = prepare_workload(write_profile(base_profile)).findings
    hints = [f.hint for f in findings if f.rule == "launcher" and f.location.field == "command[0]"]
    assert hints == ["start the command with the script: ['train.py', '--config', 'c.yaml']"]


def test_a_one_string_command_gets_the_split_list(
        base_profile: dict[str, Any], write_profile: Callable[..., Path]) -> None:
    base_profile["command"] = ["python train.py --config c.yaml"]
    findings = prepare_workload(write_profile(base_profile)).findings
    launcher = [f for f in findings if f.rule == "launcher"]
    assert [f.hint for f in launcher] == [
        "write one list item per argument: ['train.py', '--config', 'c.yaml']"]
