"""rehearse --evict and --stale-gang: KAI-Scheduler's evictions under the operator model (issue 25
item 4): one pod of an elastic job above its minimum, and a gang evicted whole once stale."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import ROOT, example_job, needs_torch
from runai_spec.cli import app
from runai_spec.errors import InputError
from runai_spec.rehearse import PreflightSettings, rehearse_manifests
from runai_spec.rehearse.faults import faults_of
from runai_spec.rehearse.spec import RehearsalSpec

pytestmark = [pytest.mark.faults]


def test_evict_and_stale_gang_parse_into_faults() -> None:
    faults = faults_of(
        example_job("elastic"), [], None, False, [("evict", "worker-3@checkpoint"), ("evict", "worker-2@40")]
    )
    assert [(f.kind, f.pod, f.at) for f in faults] == [
        ("evict", "worker-3", None),
        ("evict", "worker-2", 40.0),
    ]
    assert faults[0].label == "eviction of worker-3 after the first checkpoint"
    [lose] = faults_of(example_job("multi-node"), [], None, False, [("lose", "worker-0")])
    assert lose.label.startswith("worker-0 lost, no room for it (stale gang)")


def test_kai_evicts_a_fixed_gang_whole_so_evict_is_refused() -> None:
    with pytest.raises(InputError, match="evicts one pod only of a job above its minimum") as e:
        faults_of(example_job("multi-node"), [], None, False, [("evict", "worker-0")])
    assert e.value.field == "--evict" and "--preempt" in str(e.value.hint)


def test_an_elastic_gang_above_its_minimum_does_not_go_stale() -> None:
    with pytest.raises(InputError, match="keep its minimum of 2") as e:
        faults_of(example_job("elastic"), [], None, False, [("lose", "worker-1")])
    assert "--evict" in str(e.value.hint)
    with pytest.raises(InputError, match="no pod would be left"):
        faults_of(example_job("single-node"), [], None, False, [("lose", "master-0")])


def test_cli_evict_of_an_unknown_pod_exits_2_before_anything_runs(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(ROOT / "examples" / "elastic" / "profile.yaml"),
            "--evict",
            "worker-9",
            "--logs",
            str(tmp_path / "logs"),
        ],
    )
    assert r.exit_code == 2, r.output
    assert "error: --evict: no pod 'worker-9'" in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "logs").exists()


def short_timeouts(job: dict[str, Any], grace: int = 5) -> dict[str, Any]:
    """JOB with rendezvous timeouts and a grace period short enough for a test."""
    job = copy.deepcopy(job)
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        container = rspec["template"]["spec"]["containers"][0]
        container["command"] = [
            "--rdzv-conf=join_timeout=120,read_timeout=120" if a.startswith("--rdzv-conf=") else a
            for a in container["command"]
        ]
        rspec["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return job


def settings_for(pods: int) -> PreflightSettings:
    return PreflightSettings(
        local_batch=4,
        grad_accum=8,
        global_batch=4 * 8 * 8 * pods,  # planned processes: 8 GPUs a pod
        join_timeout_s=30,
        collective_timeout_s=30,
        checkpoint_on_sigterm=True,
    )


# long (issue 29): 39 CPU s, the largest test CI ran; CI rehearses the elastic layout
# without a fault (test_rehearse_cpu) and a fault on the multi-node one (test_rehearse_shipped)
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
def test_an_evicted_elastic_pod_costs_no_restart_and_every_rank_resumes(tmp_path: Path) -> None:
    """The representative eviction run: worker-3 of the elastic example evicted at the first
    checkpoint; the operator recreates it, the agents of the others restart their ranks once,
    and every rank resumes the saved step."""
    needs_torch()
    r = rehearse_manifests(
        [short_timeouts(example_job("elastic"))],
        RehearsalSpec(
            settings=settings_for(4),
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=240.0,
            evicts=["worker-3@checkpoint"],
            backoff_scale=0.1,
        ),
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert fault.message.startswith("eviction of worker-3 after the first checkpoint: worker-3 deleted")
    assert fault.details["recreated"] == ["worker-3"] and fault.details["restarted"] == []
    assert fault.details["restarts_used"] == 0 and list(fault.details["deleted"]) == ["worker-3"]
    assert fault.details["resumed_ranks"] == [0, 1, 2, 3]
    # A survivor whose ranks failed on the lost peer spent one of its max restarts. Its restart
    # for the newcomer spends none when its ranks are still healthy at the agent's next
    # check, one more when a peer's agent restarting first already failed them: torch's
    # agent (torch/distributed/elastic/agent/server/api.py, _invoke_run, torch 2.11 to 2.13)
    # spends a restart in its FAILED/UNHEALTHY branch and checks num_nodes_waiting only in its
    # HEALTHY one, so which happens is the machine's timing, on a cluster as here. The
    # recreated pod's agent spends none.
    spent = fault.details["agent_restarts"]
    assert spent and set(spent) <= {"worker-0", "worker-1", "worker-2"}, spent
    assert set(spent.values()) <= {1, 2}, spent


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
def test_a_lost_pod_without_room_gets_the_gang_evicted_and_every_rank_resumes(tmp_path: Path) -> None:
    """worker-0 of the fixed 2-pod job lost at the first checkpoint, no room for it: after the
    staleness grace period (6 s at 0.1) KAI evicts master-0 too, the operator recreates both,
    no restart is counted, and every rank resumes the saved step."""
    needs_torch()
    r = rehearse_manifests(
        [short_timeouts(example_job("multi-node"))],
        RehearsalSpec(
            settings=settings_for(2),
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=240.0,
            stale_gang=["worker-0@checkpoint"],
            backoff_scale=0.1,
        ),
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    d = fault.details
    assert d["recreated"] == ["master-0", "worker-0"] and d["restarts_used"] == 0
    assert d["deleted"]["worker-0"].startswith("lost") and set(d["deleted"]) == {"master-0", "worker-0"}
    assert d["resumed_ranks"] == [0, 1]
