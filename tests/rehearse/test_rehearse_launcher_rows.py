"""The rehearsal's `command` and `network` rows name the job's own launcher (the plan's
launcher_name): accelerate launch is neither "torchrun as `python -m torch.distributed.run`"
nor, on one pod, "no launcher" (issue 38 follow-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, example_job
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse import plan_pods
from runai_spec.rehearse.checks import command_note, launcher_of, netns_note, network_note
from runai_spec.rehearse.network import NetPlan, PodNet
from runai_spec.rehearse.spec import RehearsalSpec


def _launcher(example: str) -> str:
    return prepare_workload(ROOT / "examples" / example / "profile.yaml").plan.launcher_name


@pytest.mark.parametrize("example", ["accelerate-single-node", "accelerate-multi-node"])
def test_the_command_row_names_accelerate_launch_and_its_log_flags(tmp_path: Path, example: str) -> None:
    plans, _ = plan_pods([example_job(example)], RehearsalSpec(procs_per_pod=2), root=tmp_path)
    launcher = _launcher(example)
    assert launcher == "accelerate" == launcher_of(plans)  # the plan's, and the pods' command
    note = command_note(plans, launcher)
    assert note is not None
    assert "accelerate launch as this machine's `python -m accelerate.commands.launch`" in note.message
    assert "torch.distributed.run" not in note.message
    assert "the rendered --log_dir/--tee keep a log per rank" in note.message, note.message


def test_the_command_row_of_torchrun_is_unchanged(tmp_path: Path) -> None:
    plans, _ = plan_pods([example_job("multi-node")], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    note = command_note(plans, _launcher("multi-node"))
    assert note is not None
    assert "torchrun as this machine's `python -m torch.distributed.run`" in note.message
    assert "the rendered --log-dir/--tee keep a log per rank" in note.message


def test_one_pod_of_accelerate_is_a_rendezvous_inside_the_pod_not_no_launcher(tmp_path: Path) -> None:
    example = "accelerate-single-node"
    plans, _ = plan_pods([example_job(example)], RehearsalSpec(procs_per_pod=2), root=tmp_path)
    launcher = _launcher(example)
    net = NetPlan("10.0.0.0/24", str(tmp_path), (PodNet("master-0", "m", str(tmp_path), "10.0.0.2"),))
    for row in (netns_note(plans, net, launcher), network_note(plans, "llama-sft-accel", launcher)):
        assert "accelerate launch on one pod: a rendezvous of its own inside the pod" in row.message
        assert "no launcher" not in row.message and "static rendezvous" not in row.message, row.message
