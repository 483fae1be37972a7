"""The MPI rehearsal (issue 39 item 3): the rendered MPIJob's launcher command under real OpenMPI
mpirun, over the operator's hostfile (2 pods x 2 slots), a clean-env rsh agent standing for
sshd; a worker rank killed after a checkpoint ends mpirun, and the launcher Job's back-off
starts it again, resuming the saved step (both long: CI runs the fault through the command,
tests/rehearse/test_rehearse_mpi_cli.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch
from mpi_presets import mpi_presets, mpi_profile
from runai_spec import render
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse.mpi import Kill, rehearse_mpi

pytestmark = [
    pytest.mark.slow,
    pytest.mark.torch,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no OpenMPI mpirun here (.ci/run installs it)"),
]
SCRIPT = ROOT / "tests" / "rehearse_fixtures" / "mpi_torch.py"


def _job(presets_dir: Path, key: Path, folder: Path, steps: int) -> dict[str, Any]:
    needs_torch()
    presets = mpi_presets(presets_dir, key, gpus_per_pod=2)
    command = ["train.py", "--checkpoint-dir", "/checkpoints", "--steps", str(steps)]
    plan = prepare_workload(mpi_profile(folder, command=command), PresetRegistry(presets)).plan
    (job,) = render.render_plan(plan)
    shutil.copy(SCRIPT, folder / "train.py")
    return job


def _starts(output: str) -> list[tuple[int, int, int]]:
    found = re.findall(r"^rank (\d+) world (\d+) start (\d+)$", output, re.M)
    return [(int(r), int(w), int(s)) for r, w, s in found]


@pytest.mark.long
def test_mpirun_runs_every_rank_over_the_operators_hostfile(
    presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    job = _job(presets_dir, _engineer_key, tmp_path, steps=2)
    checkpoints = tmp_path / "checkpoints"
    done = rehearse_mpi(
        job, tmp_path / "rehearsal", cwd=tmp_path, volumes={"checkpoint": checkpoints}, timeout=240
    )
    assert done.hostfile == (
        "llm-7b-mpi-launcher.llm-7b-mpi.runai-nlp-lab.svc slots=2\n"
        "llm-7b-mpi-worker-0.llm-7b-mpi.runai-nlp-lab.svc slots=2\n"
    )
    assert done.argv[:3] == ["mpirun", "-np", "4"]
    assert done.succeeded and len(done.attempts) == 1, done.output
    starts = _starts((checkpoints / "starts.log").read_text())
    assert sorted(r for r, _, _ in starts) == [0, 1, 2, 3]
    assert {w for _, w, _ in starts} == {4}  # every rank reports the same world size
    # both pods reached through the agent, as through sshd
    agents = (tmp_path / "rehearsal" / "etc-mpi" / "agents").read_text().splitlines()
    assert sorted(line.split()[0] for line in agents if line) == [
        "llm-7b-mpi-launcher.llm-7b-mpi.runai-nlp-lab.svc",
        "llm-7b-mpi-worker-0.llm-7b-mpi.runai-nlp-lab.svc",
    ]


# long: CI runs the same fault through the command (test_rehearse_mpi_cli.py)
@pytest.mark.long
def test_a_worker_rank_killed_after_a_checkpoint_restarts_the_launcher_from_it(
    presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    job = _job(presets_dir, _engineer_key, tmp_path, steps=8)
    checkpoints = tmp_path / "checkpoints"
    saved = checkpoints / "checkpoint.pt"
    done = rehearse_mpi(
        job,
        tmp_path / "rehearsal",
        cwd=tmp_path,
        volumes={"checkpoint": checkpoints},
        kill=Kill(2, saved.exists),  # the worker pod's first rank (the launcher holds ranks 0 and 1)
        timeout=300,
    )
    assert len(done.attempts) == 2, done.output
    assert done.attempts[0].killed_rank == 2 and done.attempts[0].exit_code != 0
    assert done.succeeded, done.output
    starts = _starts((checkpoints / "starts.log").read_text())
    first, second = starts[:4], starts[4:]
    assert sorted(first) == [(r, 4, 0) for r in range(4)], done.output  # world 4, from step 0
    assert sorted(r for r, w, _ in second if w == 4) == [0, 1, 2, 3], done.output
    resumed = {s for _, _, s in second}
    assert len(resumed) == 1 and resumed.pop() >= 1  # every rank resumed the one saved step
    assert len(done.attempts) <= done.backoff_limit + 1
