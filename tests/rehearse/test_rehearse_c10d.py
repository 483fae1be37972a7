"""The rehearsal runs the rendered command as the kubelet starts it ($(VAR) expansion), hosts the
c10d store where the cluster would, and injects --kill/--preempt/--restart-after-checkpoint
faults under the kubelet/operator model (issue 11)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, example_job, needs_torch
from runai_spec.errors import InputError
from runai_spec.facts.kubelet import container_env, expand, expand_command
from runai_spec.rehearse import PreflightSettings, plan_pods, rehearse_manifests
from runai_spec.rehearse.checks import network_note
from runai_spec.rehearse.faults import Fault, faults_of
from runai_spec.rehearse.spec import RehearsalSpec

C10D_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def c10d_job(grace: int | None = None) -> dict[str, Any]:
    """The multi-node example as rendered (torchrun's c10d rendezvous at
    $(MASTER_ADDR):$(MASTER_PORT), the shared-store opt-out in the env), with rendezvous
    timeouts short enough for a test. Each flag once, as the render writes it."""
    job = copy.deepcopy(example_job("multi-node"))
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        container = rspec["template"]["spec"]["containers"][0]
        command = container["command"]
        assert command[0] == "torchrun" and "--rdzv-backend=c10d" in command
        assert {"name": C10D_ENV, "value": "1"} in container["env"]
        container["command"] = [
            "--rdzv-conf=join_timeout=120,read_timeout=120" if a.startswith("--rdzv-conf=") else a
            for a in command
        ]
        if grace is not None:
            rspec["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    return job


# --- the kubelet's $(VAR) expansion (kubernetes third_party/forked/golang/expansion)


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("$(A):$(B)", "a:b"),
        ("--x=$(A)$(A)", "--x=aa"),
        ("$$(A)", "$(A)"),  # escaped: the literal text
        ("$$$(A)", "$a"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: left as written
        ("$(A", "$(A"),  # incomplete reference: kept
        ("cost $5 and $", "cost $5 and $"),  # an operator that opens nothing
        ("$()", "$()"),
        ("no vars", "no vars"),
    ],
)
def test_expand_follows_the_kubelet(text: str, out: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}) == out


def test_env_values_expand_from_earlier_variables_only() -> None:
    env = container_env([("A", "x"), ("B", "$(A)-$(C)"), ("C", "c"), ("A", "y")])
    assert env == {"A": "y", "B": "x-$(C)", "C": "c"}
    assert expand_command(["torchrun", "$(B)"], env) == ["torchrun", "x-$(C)"]


def test_the_rendered_c10d_command_runs_expanded_with_the_store_on_master_0(tmp_path: Path) -> None:
    plans, world = plan_pods([c10d_job()], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert world == 2 and [p.name for p in plans] == ["master-0", "worker-0"]
    port = plans[0].env["MASTER_PORT"]
    for plan in plans:
        argv = list(plan.argv)
        # expanded from the container's env, as the kubelet does, onto loopback
        assert f"--rdzv-endpoint=127.0.0.1:{port}" in argv, argv
        assert not any("$(" in a for a in argv) and plan.env[C10D_ENV] == "1"
    # on loopback every agent matches 127.0.0.1: the cluster's choice is said explicitly
    assert "--rdzv-conf=join_timeout=120,read_timeout=120,is_host=1" in plans[0].argv
    assert "--rdzv-conf=join_timeout=120,read_timeout=120,is_host=0" in plans[1].argv
    note = network_note(plans, "llm-7b-fsdp")
    assert note.status == "note" and note.ok and note.details["store_hosts"] == ["master-0"]
    assert "loopback" in note.message and "is_host=1 to master-0" in note.message


def test_is_host_goes_into_every_rdzv_conf_since_torchrun_keeps_the_last(tmp_path: Path) -> None:
    # a command that says --rdzv-conf twice (this file's fixture once prepended its own flags
    # to the render's): torchrun's argparse keeps the last, so is_host only in the first left
    # every agent on loopback taking itself for the store host, and the busy-rank-0 kill
    # below now and then restarted master-0 too (a long run of 2026-12-04)
    job = c10d_job()
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        command = rspec["template"]["spec"]["containers"][0]["command"]
        command[1:1] = ["--rdzv-conf=join_timeout=60", "--rdzv_conf", "read_timeout=60"]
    plans, _ = plan_pods([job], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    for plan, flag in zip(plans, ("is_host=1", "is_host=0"), strict=True):
        argv = list(plan.argv)
        confs = [a for a in argv if a.startswith("--rdzv-conf=")]
        confs.append(argv[argv.index("--rdzv_conf") + 1])
        assert len(confs) == 3 and all(c.endswith(flag) for c in confs), (plan.name, confs)


def test_an_elastic_rehearsal_accepts_a_round_of_min_replicas_pods(tmp_path: Path) -> None:
    # after worker-0 (the store host) is killed, a round may form with 3 of 4 pods while one
    # still restarts: elastic by design (minReplicas 2). preflight.py failed such a round as a
    # wrong world size, exited 1, and made the agents restart again (a CI run, 2026-12-04)
    plans, world = plan_pods([example_job("elastic")], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert world == 4
    for p in plans:
        argv = list(p.argv)
        assert argv[argv.index("--world-size") + 1] == "4"
        assert argv[argv.index("--min-world-size") + 1] == "2"
    fixed, _ = plan_pods([c10d_job()], RehearsalSpec(procs_per_pod=1), root=tmp_path / "fixed")
    assert all("--min-world-size" not in p.argv for p in fixed)  # Master + Worker: exact


def test_an_elastic_job_says_is_host_in_its_rdzv_conf_for_worker_0(tmp_path: Path) -> None:
    # the shipped elastic render carries --rdzv-conf in its command: is_host goes there
    plans, _ = plan_pods([example_job("elastic")], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    hosts = {p.name: next(a for a in p.argv if a.startswith("--rdzv-conf=")) for p in plans}
    assert hosts["worker-0"].endswith("is_host=1"), hosts
    assert all(v.endswith("is_host=0") for k, v in hosts.items() if k != "worker-0"), hosts
    assert network_note(plans, "x").details["store_hosts"] == ["worker-0"]


def test_a_static_job_adds_no_is_host_and_says_node_rank_0_hosts(tmp_path: Path) -> None:
    from rehearse.test_rehearse_cpu import old_launcher

    plans, _ = plan_pods([old_launcher()], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert not any("is_host" in a for p in plans for a in p.argv)
    assert "static rendezvous" in network_note(plans, "llm-7b-fsdp").message


# --- the faults: --restart-after-checkpoint is a --kill of the hardest pod


def test_restart_after_checkpoint_is_a_kill_of_the_hardest_pod_at_the_checkpoint() -> None:
    assert faults_of(example_job("multi-node"), [], None, True) == [Fault("kill", "master-0", None)]
    assert faults_of(example_job("elastic"), [], None, True) == [Fault("kill", "worker-0", None)]
    assert faults_of(example_job("multi-node"), ["worker-0@5"], "checkpoint", False) == [
        Fault("kill", "worker-0", 5.0),
        Fault("preempt", None, None),
    ]
    with pytest.raises(InputError) as caught:
        faults_of(example_job("multi-node"), ["worker-0"], None, True)
    assert caught.value.field == "--restart-after-checkpoint"


SETTINGS = PreflightSettings(
    local_batch=4, grad_accum=8, global_batch=512, join_timeout_s=30, collective_timeout_s=30
)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.faults
def test_c10d_recovers_from_a_worker_kill_while_rank_0_is_busy(tmp_path: Path) -> None:
    needs_torch()
    # rank 0 busy 3 s after the checkpoint, longer than the first back-off (1 s at 0.1): the
    # restarted worker meets a master that has not yet noticed (RESULTS.md C-kill-w0-busy)
    settings = PreflightSettings(**{**SETTINGS.__dict__, "busy_rank0_s": 3.0})
    r = rehearse_manifests(
        [c10d_job()],
        RehearsalSpec(
            settings=settings,
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=150.0,
            kills=["worker-0@checkpoint"],
            backoff_scale=0.1,
        ),
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert fault.details["phase"] == "Succeeded" and fault.details["restarted"] == ["worker-0"]
    assert fault.details["restarts_used"] == 1 and fault.details["resumed_ranks"] == [0, 1]
    resume = r.check("resume")
    assert resume is not None and resume.status == "pass"
    assert resume.details["resumed_from"] == fault.details["saved_step"] == 2
    network = r.check("network")
    assert network is not None and "c10d store host: master-0" in network.message


@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_a_preemption_deletes_every_pod_and_the_recreated_job_resumes(tmp_path: Path) -> None:
    needs_torch()
    settings = PreflightSettings(**{**SETTINGS.__dict__, "checkpoint_on_sigterm": True})
    r = rehearse_manifests(
        [c10d_job(grace=5)],
        RehearsalSpec(
            settings=settings,
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=150.0,
            preempt="checkpoint",
            backoff_scale=0.1,
        ),
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert fault.message.startswith("preemption after the first checkpoint: every pod deleted")
    assert fault.details["recreated"] == ["master-0", "worker-0"]
    assert fault.details["restarted"] == [] and fault.details["restarts_used"] == 0
    assert fault.details["sigterm_saves"] == [0, 1]
    assert set(fault.details["deleted"]) == {"master-0", "worker-0"}
    assert fault.details["resumed_ranks"] == [0, 1]
    assert [(o.name, o.attempt) for o in r.pods if o.attempt == 1] == [("master-0", 1), ("worker-0", 1)]


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--preempt", "soon"], "--preempt: @soon is neither @checkpoint nor a number of seconds"),
        (
            ["--restart-after-checkpoint", "--kill", "worker-0"],
            "--restart-after-checkpoint: --restart-after-checkpoint is itself a --kill",
        ),
    ],
)
def test_cli_bad_fault_options_exit_2_before_anything_runs(
    tmp_path: Path, args: list[str], what: str
) -> None:
    from typer.testing import CliRunner

    from runai_spec.cli import app

    r = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(ROOT / "examples" / "multi-node" / "profile.yaml"),
            *args,
            "--logs",
            str(tmp_path / "logs"),
        ],
    )
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()  # the profile's findings come first
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")) :]
    assert len(lines) == 2 and lines[0].startswith(f"error: {what}"), lines
    assert lines[1].startswith("hint: ") and "Traceback" not in r.output
    assert not (tmp_path / "logs").exists()
