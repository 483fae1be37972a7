"""`runai-spec rehearse` of the MPI example (issue 39 item 2): the rendered MPIJob's mpirun run here
with the preflight checklist as its program, in the PyTorchJob rehearsal's table; a worker rank
killed after the first checkpoint ends mpirun, and the launcher Job's back-off resumes the saved
step (the one in CI's representative set: tests/rehearse/test_rehearse_mpi.py's library run of the
same fault is long); what the MPI rehearsal does not model is refused before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch, run
from mpi_presets import PROFILE, mpi_presets, mpi_profile
from runai_spec.rehearse.mpi import ATTEMPT_MARK

NO_MPIRUN = shutil.which("mpirun") is None
REASON = "no OpenMPI mpirun here (.ci/run installs it)"
SCRIPT = ROOT / "tests" / "rehearse_fixtures" / "mpi_train.py"


@pytest.fixture
def signed(presets_dir: Path, _engineer_key: Path) -> Path:
    return mpi_presets(presets_dir, _engineer_key)


def _rehearse(logs: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    needs_torch()
    result = run(
        "rehearse", str(PROFILE), "--procs-per-pod", "2", "--logs", str(logs), "--format", "json", *options
    )
    return result.exit_code, json.loads(result.stdout or "{}"), result.stderr


def _row(report: dict[str, Any], check: str, attempt: int | None = None) -> dict[str, Any]:
    (row,) = [
        c for c in report["checks"] if c["check"] == check and (attempt is None or c["attempt"] == attempt)
    ]
    found: dict[str, Any] = row
    return found


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(NO_MPIRUN, reason=REASON)
def test_a_worker_killed_after_a_checkpoint_restarts_the_launcher_which_resumes_it(
    signed: Path, tmp_path: Path
) -> None:
    code, report, stderr = _rehearse(tmp_path / "logs", "--restart-after-checkpoint")
    assert code == 0, (stderr, report)
    assert report["world_size"] == 4 and report["backend"] == "gloo"
    restart = _row(report, "restart")
    assert restart["status"] == "pass" and "rank 2 SIGKILLed after the first checkpoint" in restart["message"]
    assert restart["details"] == {"attempts": 2, "backoff_limit": 5}
    assert _row(report, "pods", 0)["status"] == "pass"  # the attempt the kill ended
    # the second mpirun (the launcher Job's new pod): every rank, the saved step resumed
    assert _row(report, "world-size", 1)["message"] == "every rank reports a world of 4"
    assert _row(report, "ranks", 1)["status"] == "pass"
    resume = _row(report, "resume", 1)
    assert resume["status"] == "pass" and resume["details"]["resumed_from"] >= 1, resume
    assert _row(report, "pods", 1)["status"] == "pass"
    network = _row(report, "network")
    assert network["details"]["hostfile"] == (
        "llm-7b-mpi-launcher.llm-7b-mpi.runai-nlp-lab.svc slots=2\n"
        "llm-7b-mpi-worker-0.llm-7b-mpi.runai-nlp-lab.svc slots=2\n"
    )
    log = (tmp_path / "logs" / "launcher.log").read_text(encoding="utf-8")
    assert log.count(ATTEMPT_MARK) == 2
    assert f"logs: {tmp_path / 'logs'}" in stderr
    assert json.loads((tmp_path / "logs" / "result.json").read_text(encoding="utf-8")) == report


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(NO_MPIRUN, reason=REASON)
def test_the_preflight_checklist_passes_under_mpirun(signed: Path, tmp_path: Path) -> None:
    code, report, stderr = _rehearse(tmp_path / "logs")
    assert code == 0, (stderr, report)
    statuses = {c["check"]: c["status"] for c in report["checks"]}
    assert statuses["ranks"] == statuses["world-size"] == statuses["checkpoint"] == "pass", statuses
    assert statuses["bus-bandwidth"] == "note"  # the preset's minimum is not applied on CPU
    assert all(c["attempt"] is None for c in report["checks"])  # one mpirun, no back-off
    assert (tmp_path / "logs" / "launcher.log").read_text(encoding="utf-8").count(ATTEMPT_MARK) == 1


@pytest.mark.parametrize(
    ("option", "field"),
    [(("--preempt", "checkpoint"), "--preempt"), (("--network", "netns"), "--network")],
)
def test_what_the_mpi_rehearsal_does_not_model_is_refused_before_anything_runs(
    signed: Path, tmp_path: Path, option: tuple[str, ...], field: str
) -> None:
    result = run("rehearse", str(PROFILE), "--logs", str(tmp_path / "logs"), *option)
    assert result.exit_code == 2, result.output
    assert f"error: {field}: the MPIJob rehearsal does not model" in result.stderr, result.stderr
    assert not (tmp_path / "logs").exists()


def test_the_table_says_where_mpiruns_log_is(tmp_path: Path) -> None:
    """An MPIJob's rehearsal has one log, the launcher pod's mpirun (every rank's lines), not a
    folder per pod and per rank as torchrun's."""
    from runai_spec.outputs.report import print_rehearsal
    from runai_spec.rehearse import RehearseResult

    log = tmp_path / "launcher.log"
    lines = print_rehearsal(RehearseResult(True, (), (), tmp_path, 4, "gloo", False, log), "llm-7b-mpi")
    assert lines[0] == f"logs: {tmp_path}"
    assert str(log) in lines[1] and ATTEMPT_MARK in lines[1] and "<pod>" not in "".join(lines)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(NO_MPIRUN, reason=REASON)
def test_a_plain_mpi_torch_script_passes_the_own_script_audit_through_a_restart(
    signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """item 4: the audit layer runs in ranks mpirun started (their rank from OMPI_COMM_WORLD_*,
    its folder and key forwarded with -x); the script's saves, loads, batches and shutdown are
    judged as a PyTorchJob's, its checkpoint after the launcher's back-off included."""
    needs_torch()
    shutil.copy(SCRIPT, tmp_path / "train.py")
    torch_checkpoint = {
        "dir": "/checkpoints",
        "pvc": "nlp-lab-checkpoints",
        "format": "torch",
        "resume": "latest",
    }
    profile = mpi_profile(
        tmp_path, command=["train.py", "--checkpoint-dir", "/checkpoints"], checkpoint=torch_checkpoint
    )
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    options = ("--procs-per-pod", "2", "--own-script", "--restart-after-checkpoint", "--format", "json")
    result = run("rehearse", str(profile), "--logs", str(logs), *options)
    report = json.loads(result.stdout or "{}")
    assert result.exit_code == 0, (result.stderr, report)
    statuses = {c["check"]: c["status"] for c in report["checks"] if c["attempt"] is None}
    for check in ("ranks", "world-size", "global-batch", "checkpoint", "resume", "shutdown", "restart"):
        assert statuses[check] == "pass", (check, report)
    assert "rank(s) 0, 1, 2, 3 loaded the previous" in _row(report, "resume")["message"]
