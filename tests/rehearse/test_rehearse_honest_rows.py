"""Small honesty of the rehearsal's rows (issue 24, Why 6): a refused --procs-per-pod leaves no
folder, one above the preset's GPUs per pod is said, a bus bandwidth measured on CPU is not a
pass against the preset's minimum."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import example_job, needs_torch
from runai_spec.errors import InputError
from runai_spec.rehearse import CheckResult, cpu_bandwidth, notes, set_up
from runai_spec.rehearse.spec import RehearsalSpec


def test_a_refused_procs_per_pod_leaves_no_folder(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with pytest.raises(InputError, match="--procs-per-pod must be at least 1"):
        set_up([example_job("multi-node")], RehearsalSpec(procs_per_pod=0, logs_dir=logs, device="cpu"))
    assert not logs.exists()


@pytest.mark.torch
def test_more_processes_per_pod_than_the_preset_has_gpus_is_said(tmp_path: Path) -> None:
    needs_torch()
    job = example_job("multi-node")
    setup = set_up([job], RehearsalSpec(procs_per_pod=9, logs_dir=tmp_path / "logs", device="cpu"))
    rows = {r.check: r for r in notes(setup, [])}
    row = rows["procs-per-pod"]
    assert row.status == "note" and "--procs-per-pod 9 is more than the 8 process(es) per pod" in row.message
    fits = set_up([job], RehearsalSpec(procs_per_pod=2, logs_dir=tmp_path / "fits", device="cpu"))
    assert "procs-per-pod" not in {r.check for r in notes(fits, [])}


def test_the_bus_bandwidth_minimum_is_not_applied_on_cpu() -> None:
    measured = CheckResult("bus-bandwidth", "pass", "busbw 0.43 GB/s, algbw 0.29 GB/s")
    (row,) = cpu_bandwidth([measured], 150.0, gpus=0)
    assert row.status == "note" and "minimum of 150 GB/s is not applied on CPU" in row.message
    assert cpu_bandwidth([measured], 150.0, gpus=8) == [measured]  # on GPUs it is judged
    assert cpu_bandwidth([measured], None, gpus=0) == [measured]  # no minimum declared
