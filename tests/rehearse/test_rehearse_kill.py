"""rehearse --kill: the pods run under the kubelet/operator model (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, example_job, needs_torch
from rehearse.test_rehearse_cpu import old_launcher
from runai_spec.cli import app
from runai_spec.errors import InputError
from runai_spec.rehearse import PreflightSettings, rehearse_manifests
from runai_spec.rehearse.spec import RehearsalSpec

pytestmark = [pytest.mark.faults]


def test_unknown_pod_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no pod 'worker-9'"):
        rehearse_manifests(
            [example_job("multi-node")], RehearsalSpec(kills=["worker-9@checkpoint"], logs_dir=tmp_path)
        )


def test_cli_unknown_pod_exits_2_with_one_line() -> None:
    r = CliRunner().invoke(
        app, ["rehearse", str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--kill", "worker-9"]
    )
    assert r.exit_code == 2, r.output
    assert "no pod 'worker-9'" in r.output and "Traceback" not in r.output


# long (issue 29): CI keeps the kill of the shipped render with rank 0 busy
# (test_rehearse_shipped) and the static cascade in the model (test_rehearse_faults)
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
def test_static_rendezvous_worker_kill_with_busy_rank0_fails_the_job(tmp_path: Path) -> None:
    needs_torch()
    settings = PreflightSettings(
        local_batch=4,
        grad_accum=8,
        global_batch=512,
        join_timeout_s=15,
        collective_timeout_s=20,
        busy_rank0_s=3.0,
    )
    # one process per pod, as in docs/fault-experiments: with two, master-0's idle rank 1
    # sees the lost peer at once and the master's container restarts with the worker's
    r = rehearse_manifests(
        [old_launcher()],
        RehearsalSpec(
            settings=settings,
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=90.0,
            kills=["worker-0@checkpoint"],
            backoff_scale=0.1,
        ),
    )
    faults = [c for c in r.checks if c.check == "fault"]
    assert len(faults) == 1, [(c.check, c.status, c.message) for c in r.checks]
    fault = faults[0]
    assert not r.ok and fault.status == "fail", fault.message
    assert "the operator would mark the job Failed" in fault.message, fault.message
    assert fault.details["restarts_used"] >= 3 == fault.details["backoff_limit"]


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
def test_a_static_rendezvous_job_never_passes_a_kill_even_when_it_recovers(tmp_path: Path) -> None:
    needs_torch()
    settings = PreflightSettings(
        local_batch=4, grad_accum=8, global_batch=512, join_timeout_s=15, collective_timeout_s=20
    )
    # two processes per pod: here the master notices at once and the job often recovers, but
    # in the cluster the same fault can use the whole backoffLimit: never a pass
    r = rehearse_manifests(
        [old_launcher()],
        RehearsalSpec(
            settings=settings,
            procs_per_pod=2,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=90.0,
            kills=["worker-0@checkpoint"],
            backoff_scale=0.1,
        ),
    )
    fault = next(c for c in r.checks if c.check == "fault")
    assert fault.status == "fail" and not r.ok, fault.message
    assert (
        "recovered here, but the job uses torchrun's static rendezvous" in fault.message
        or "the operator would mark the job Failed" in fault.message
    ), fault.message
