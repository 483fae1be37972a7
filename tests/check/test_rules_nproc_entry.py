"""nproc-gpus reads only the launcher's flags (red team, item 3): after the entry point an
argument is the script's, so `[train.py, --nproc-per-node=16]` is no runai-spec or preset bug
(the launcher rule still says the flag is torchrun's)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import pytorch_container
from runai_spec.check.catalogue import check_all
from runai_spec.check.rules import Context
from runai_spec.pipeline.workload import prepare_workload


@pytest.mark.parametrize("preset, accum", [("h200-2x8-ib", 2), ("h200-8gpu", 4), ("h200-1gpu", 32)])
def test_a_torchrun_flag_after_the_entry_point_is_not_a_process_count(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], preset: str, accum: int
) -> None:
    base_profile.update(preset=preset, command=["train.py", "--nproc-per-node=16"])
    base_profile["batch"]["grad_accum"] = accum
    findings = prepare_workload(write_profile(base_profile)).findings
    assert [f for f in findings if f.rule == "nproc-gpus"] == []
    assert [(f.rule, f.path) for f in findings if f.severity == "error"] == [("launcher", "command[1]")]


def test_the_same_flag_in_the_launcher_is_still_reported(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    """A rendered launcher that starts another number of processes is the renderer's bug."""
    base_profile["preset"] = "h200-8gpu"
    base_profile["batch"]["grad_accum"] = 4
    workload = prepare_workload(write_profile(base_profile))
    manifests = copy.deepcopy(list(workload.manifests))
    (job,) = [m for m in manifests if m.get("kind") == "PyTorchJob"]
    container = pytorch_container(job, "Master")
    command = container["command"]
    entry = command.index("train.py")
    container["command"] = [*command[:entry], "--nproc-per-node=16", *command[entry:], "--nproc-per-node=8"]
    ctx = Context(workload.loaded, workload.approved, workload.site, workload.plan, tuple(manifests))
    nproc = [f for f in check_all(ctx) if f.rule == "nproc-gpus"]
    assert [f.message for f in nproc] == ["torchrun would start 16 process(es) per pod on 8 GPUs"]
