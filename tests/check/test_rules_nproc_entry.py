"""nproc-gpus reads only the launcher's flags (red team, item 3): after the entry point an
argument is the script's, so `[train.py, --nproc-per-node=16]` is no runai-spec or preset bug
(the launcher rule still says the flag is torchrun's)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, pytorch_container
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


ACCEL_MULTI = ROOT / "examples" / "accelerate-multi-node" / "profile.yaml"
ENTRY = "train_accelerate.py"


def _accelerate_nproc(edit: Callable[[list[str]], list[str]]) -> list[str]:
    """nproc-gpus on the accelerate multi-node example (2 pods x 8 GPUs) with every pod's
    command edited by EDIT."""
    workload = prepare_workload(ACCEL_MULTI)
    manifests = copy.deepcopy(list(workload.manifests))
    (job,) = [m for m in manifests if m.get("kind") == "PyTorchJob"]
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        (container,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "pytorch"]
        container["command"] = edit(container["command"])
    ctx = Context(workload.loaded, workload.approved, workload.site, workload.plan, tuple(manifests))
    return [f.message for f in check_all(ctx) if f.rule == "nproc-gpus"]


def _replace(old: str, new: str) -> Callable[[list[str]], list[str]]:
    return lambda command: [new if a == old else a for a in command]


def test_accelerates_process_and_machine_counts_are_the_pods_gpus() -> None:
    """accelerate's --num_processes is the total over its --num_machines: 16 on 2 pods of 8."""
    assert _accelerate_nproc(lambda c: c) == []
    expected = "(expected --num_processes=16, --num_machines=2)"
    cases = {
        "per pod, as torchrun counts": _replace("--num_processes=16", "--num_processes=8"),
        "one machine": _replace("--num_machines=2", "--num_machines=1"),
        "its dash spelling": _replace("--num_processes=16", "--num-processes=32"),
        "the last one wins": lambda c: [*c[: c.index(ENTRY)], "--num_processes", "32", *c[c.index(ENTRY) :]],
        "read from a config": lambda c: [a for a in c if not a.startswith("--num_processes")],
    }
    for case, edit in cases.items():
        findings = _accelerate_nproc(edit)
        assert len(findings) == 2, (case, findings)  # Master and Worker
        assert findings[0].endswith(f"on 2 pod(s) of 8 GPUs {expected}"), (case, findings[0])
    # a flag the script gets (after the entry point) counts for nothing
    assert _accelerate_nproc(lambda c: [*c, "--num_processes=3"]) == []
    assert _accelerate_nproc(lambda c: [*c[:2], "--num_processes", "4", *c[2:]]) == []  # the last wins
