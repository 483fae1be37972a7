"""The smoke job's launcher is built from the plan's structure (layout, rendezvous, log flags),
never by editing the job's argv: whatever the entry point, preflight.py runs as a script."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from conftest import EXAMPLES, ROOT
from runai_spec.facts.kubeflow import SMOKE_MOUNT
from runai_spec.facts.torchrun import (
    LOG_DIR_FLAG,
    MAX_RESTARTS_FLAG,
    NO_PYTHON,
    RDZV_ID_FLAG,
    SINGLE_GPU_LAUNCHER,
    TEE_FLAG,
    split_flag,
)
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.smoke import smoke_names, smoke_plan
from runai_spec.plan.plan import Plan, plan_workload

REGISTRY = PresetRegistry(ROOT / "presets")
ENTRY_POINTS = [
    ["train.py", "--lr", "1"],
    ["-m", "pkg.train", "--lr", "1"],
    ["run.sh", "1"],
    ["bash", "run.sh"],
]


def plan_of(example: str, command: list[str]) -> Plan:
    data: dict[str, Any] = yaml.safe_load(
        (ROOT / "examples" / example / "profile.yaml").read_text(encoding="utf-8")
    )
    data["command"] = command
    loaded = parse_profile(yaml.safe_dump(data), f"{example}.yaml")
    return plan_workload(loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site())


@pytest.mark.parametrize("command", ENTRY_POINTS, ids=lambda c: c[0])
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_smoke_launcher_is_the_layouts_whatever_the_entry_point(example: str, command: list[str]) -> None:
    plan = plan_of(example, command)
    job = smoke_plan(plan, source="# preflight\n").job
    argv = list(job.command)
    script = argv.index(f"{SMOKE_MOUNT}/preflight.py")
    launcher = argv[:script]
    assert tuple(launcher) == job.launcher
    assert NO_PYTHON not in launcher and command[0] not in launcher
    if plan.layout == "single-gpu":
        assert tuple(launcher) == SINGLE_GPU_LAUNCHER
        return
    # the job's own launcher (accelerate examples: accelerate, which runs torchrun's agent)
    assert launcher[0] == plan.launcher_name
    if plan.launcher_name != "torchrun":
        return
    names = [split_flag(arg)[0] for arg in launcher]
    assert MAX_RESTARTS_FLAG not in names  # a smoke test runs every rank once
    ids = [split_flag(arg)[1] for arg in launcher if split_flag(arg)[0] == RDZV_ID_FLAG]
    assert ids in ([], [smoke_names(plan.name)[0]])
    # the job's per-rank logs, as the job writes them
    logs = [arg for arg in plan.launcher if split_flag(arg)[0] in (LOG_DIR_FLAG, TEE_FLAG)]
    assert launcher[-len(logs) :] == logs and logs
