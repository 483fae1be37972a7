"""The launcher rule's hint shows the command as it should be written (issue 16, item 3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runai_spec.facts.torchrun import (
    LAUNCHER_MODULES,
    LAUNCHER_SCRIPT_SUFFIXES,
    launcher_entry,
    without_launcher,
)
from runai_spec.pipeline.workload import prepare_workload


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py", "--config", "c.yaml"],
            ["train.py", "--config", "c.yaml"],
        ),
        (["torchrun", "--nnodes", "2", "--standalone", "train.py"], ["train.py"]),
        (["python", "train.py", "--out", "/ckpt"], ["train.py", "--out", "/ckpt"]),
        (["python3", "-u", "-X", "dev", "train.py", "--lr", "0.1"], ["train.py", "--lr", "0.1"]),
        (["/usr/bin/python", "train.py"], ["train.py"]),
        # DeepSpeed's runner: its flags take a value but for its store_true ones (0.19.8)
        (["deepspeed", "--launcher", "openmpi", "train.py", "--lr", "3"], ["train.py", "--lr", "3"]),
        (["deepspeed", "--num_gpus", "8", "--no_local_rank", "-q", "train.py"], ["train.py"]),
    ],
)
def test_the_launcher_and_its_flags_come_off_the_suggested_command(
    command: list[str], expected: list[str]
) -> None:
    assert without_launcher(command) == expected


def test_the_hint_is_the_command_without_the_launcher(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["command"] = [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=8",
        "train.py",
        "--config",
        "c.yaml",
    ]
    findings = prepare_workload(write_profile(base_profile)).findings
    hints = [f.hint for f in findings if f.rule == "launcher" and f.location.field == "command[0]"]
    assert hints == ["start the command with the script: ['train.py', '--config', 'c.yaml']"]


def test_a_one_string_command_gets_the_split_list(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["command"] = ["python train.py --config c.yaml"]
    findings = prepare_workload(write_profile(base_profile)).findings
    launcher = [f for f in findings if f.rule == "launcher"]
    assert [f.hint for f in launcher] == [
        "write one list item per argument: ['train.py', '--config', 'c.yaml']"
    ]


# Issue 23, item 1: a launcher's own module as the training script starts processes of its own
# (`[.../torch/distributed/run.py, --nproc-per-node=3, train.py]` ran 3 ranks where 1 was planned).
@pytest.mark.parametrize(
    ("command", "field"),
    [
        (
            [
                "/usr/local/lib/python3.11/site-packages/torch/distributed/run.py",
                "--nproc-per-node=3",
                "train.py",
            ],
            "command[0]",
        ),
        (["torch/distributed/run.py", "train.py"], "command[0]"),
        (["./site-packages/torch/distributed/./launch.py", "train.py"], "command[0]"),
        (["/opt/conda/lib/python3.11/site-packages/accelerate/commands/launch.py", "train.py"], "command[0]"),
        (["/usr/lib/python3/dist-packages/deepspeed/launcher/runner.py", "train.py"], "command[0]"),
        (["-m", "torch.distributed.run", "--nproc-per-node=3", "train.py"], "command[1]"),
        (["-m", "torch.distributed.launch", "train.py"], "command[1]"),
        (["--module", "accelerate.commands.launch", "train.py"], "command[1]"),
        (["-m", "deepspeed.launcher.runner", "train.py"], "command[1]"),
    ],
)
def test_a_launcher_s_own_module_as_the_entry_point_is_refused(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], command: list[str], field: str
) -> None:
    base_profile["command"] = command
    workload = prepare_workload(write_profile(base_profile))
    (finding,) = [f for f in workload.findings if "a launcher's own module" in f.message]
    assert (finding.rule, finding.path, finding.severity) == ("launcher", field, "error")


@pytest.mark.parametrize(
    "command",
    [
        ["run.py"],
        ["tools/launch.py"],
        ["my_torch/distributed_run.py"],
        ["-m", "torch.distributed.run_tests"],
        ["launcher/runner.py"],
    ],
)
def test_a_script_that_only_looks_like_a_launcher_is_no_launcher(command: list[str]) -> None:
    assert launcher_entry(command) is None


def test_the_refused_names_are_plain_strings_the_admission_generator_can_read() -> None:
    assert all(isinstance(m, str) and m.count(".") >= 2 for m in LAUNCHER_MODULES)
    assert tuple(m.replace(".", "/") + ".py" for m in LAUNCHER_MODULES) == LAUNCHER_SCRIPT_SUFFIXES
