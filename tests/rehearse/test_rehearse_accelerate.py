"""`launcher: accelerate` rehearsed: the real `accelerate launch` (accelerate 1.16.0, CPU, gloo) in
every pod, under the kubelet/operator model; the rendered command survives a worker kill, a naive
`accelerate launch` (no c10d flags: accelerate's static rendezvous, no restarts) does not."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, example_job, needs_torch, run
from runai_spec.facts.accelerate import CONFIG_FILE_FLAG
from runai_spec.facts.torchrun import flag_value
from runai_spec.rehearse import PreflightSettings, plan_pods, rehearse_manifests
from runai_spec.rehearse.accelerate_here import MODULE
from runai_spec.rehearse.restarts import static_rendezvous
from runai_spec.rehearse.spec import RehearsalSpec

pytest.importorskip("accelerate", minversion="1.16.0")

EXAMPLE = "accelerate-multi-node"
SETTINGS = PreflightSettings(
    local_batch=4, grad_accum=8, global_batch=512, join_timeout_s=30, collective_timeout_s=30
)


def _commands(job: dict[str, Any]) -> list[list[str]]:
    return [
        rspec["template"]["spec"]["containers"][0]["command"]
        for rspec in job["spec"]["pytorchReplicaSpecs"].values()
    ]


def rendered() -> dict[str, Any]:
    """The example as rendered, with rendezvous timeouts short enough for a test."""
    job = copy.deepcopy(example_job(EXAMPLE))
    for command in _commands(job):
        assert command[:2] == ["accelerate", "launch"] and "--rdzv_backend=c10d" in command
        command[:] = [
            "--rdzv_conf=join_timeout=120,read_timeout=120" if a.startswith("--rdzv_conf=") else a
            for a in command
        ]
    return job


def naive() -> dict[str, Any]:
    """What a researcher copies from accelerate's docs: the topology flags, nothing else."""
    job = copy.deepcopy(example_job(EXAMPLE))
    for command in _commands(job):
        entry = command[command.index("--tee=3") + 1 :]
        command[:] = [
            "accelerate",
            "launch",
            "--multi_gpu",
            "--num_machines=2",
            "--num_processes=16",
            "--machine_rank=$(PET_NODE_RANK)",
            "--main_process_ip=$(MASTER_ADDR)",
            "--main_process_port=$(MASTER_PORT)",
            *entry,
        ]
    return job


def test_each_pod_runs_accelerates_module_with_the_tools_config_and_the_store_on_master_0(
    tmp_path: Path,
) -> None:
    job = rendered()
    plans, world = plan_pods([job], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert world == 2 and [p.name for p in plans] == ["master-0", "worker-0"]
    port = plans[0].env["MASTER_PORT"]
    annotation = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"]
    for rank, plan in enumerate(plans):
        argv = list(plan.argv)
        assert argv[1:3] == ["-m", MODULE]
        config = Path(str(flag_value(argv, CONFIG_FILE_FLAG)))
        assert config.is_relative_to(tmp_path)  # the pod annotation, written as the kubelet would
        assert config.read_text() == annotation["runai-spec/accelerate-config"]
        assert json.loads(config.read_text())["rdzv_backend"] == "c10d"
        assert flag_value(argv, "--num_processes") == "2"  # machines x processes per pod here
        assert flag_value(argv, "--machine_rank") == str(rank)
        assert flag_value(argv, "--main_process_ip") == "127.0.0.1"
        assert flag_value(argv, "--main_process_port") == port
        assert plan.store is not None and plan.store.is_host == (rank == 0)
        is_host = f"is_host={int(rank == 0)}"
        assert flag_value(argv, "--rdzv_conf") == f"join_timeout=120,read_timeout=120,{is_host}"
    assert not static_rendezvous(job) and static_rendezvous(naive())


def test_one_process_on_one_pod_runs_accelerate_launch_without_multi_gpu(tmp_path: Path) -> None:
    # accelerate refuses --multi_gpu below 2 processes: --procs-per-pod 1 of the one-pod example
    # (the GPU run's) is `accelerate launch --num_processes=1`, the script run by accelerate itself
    job = example_job("accelerate-single-node")
    (plan,), world = plan_pods([job], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert world == 1 and "--multi_gpu" not in plan.argv
    assert flag_value(plan.argv, "--num_processes") == "1"
    plans, _ = plan_pods([job], RehearsalSpec(procs_per_pod=2), root=tmp_path / "two")
    assert "--multi_gpu" in plans[0].argv


def _kill(job: dict[str, Any], tmp_path: Path) -> Any:
    # one process per pod, as in docs/fault-experiments; rank 0 busy after the checkpoint, longer
    # than the first back-off: the restarted worker meets a master that has not noticed yet
    settings = PreflightSettings(**{**SETTINGS.__dict__, "busy_rank0_s": 3.0})
    return rehearse_manifests(
        [job],
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


# long: CI's representative set has the own script's kill below (the same launch, a real
# Accelerate script)
@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.faults
def test_the_rendered_accelerate_launch_survives_a_worker_kill(tmp_path: Path) -> None:
    needs_torch()
    r = _kill(rendered(), tmp_path)
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert fault.details["phase"] == "Succeeded" and fault.details["restarted"] == ["worker-0"]
    assert fault.details["resumed_ranks"] == [0, 1]
    network = r.check("network")
    assert network is not None and "c10d store host: master-0" in network.message


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.faults
def test_a_naive_accelerate_launch_does_not_survive_a_worker_kill(tmp_path: Path) -> None:
    needs_torch()
    r = _kill(naive(), tmp_path)
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "fail" and not r.ok, fault.message
    assert (
        "the operator would mark the job Failed" in fault.message or "static rendezvous" in fault.message
    ), fault.message


# An Accelerate training script as its authors write one: gradient accumulation in the
# Accelerator, save_state/load_state on the checkpoint volume, metrics from the main process
# only (wandb, a stand-in module in the tree), the loss gathered with gather_for_metrics.
ACCELERATE_SCRIPT = """\
import json, os, time
import torch
import wandb
from accelerate import Accelerator

CKPT = "/checkpoints/accel"
acc = Accelerator(cpu=not torch.cuda.is_available(), gradient_accumulation_steps=8)
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(4096, 4), torch.randn(4096, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt, loader = acc.prepare(model, opt, loader)
step = 0
if os.path.isdir(CKPT):
    acc.load_state(CKPT)
    with open(os.path.join(CKPT, "step.json")) as f:
        step = json.load(f)["step"]
run = wandb.init(project="accel", dir="/checkpoints") if acc.is_main_process else None
updates = 0
for x, y in loader:
    with acc.accumulate(model):
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    if acc.sync_gradients:
        updates += 1
        if updates <= step:
            continue
        step = updates
        mean = acc.gather_for_metrics(loss.detach().reshape(1)).mean().item()
        if run is not None:
            wandb.log({"loss": mean}, step=step)
        if step % 2 == 0:
            acc.save_state(CKPT)
            if acc.is_main_process:
                with open(os.path.join(CKPT, "step.json"), "w") as f:
                    json.dump({"step": step}, f)
            acc.wait_for_everyone()
        time.sleep(0.2)
        if step >= 8:
            break
acc.end_training()
"""
WANDB = "def init(*args, **kwargs):\n    return object()\n\n\ndef log(*args, **kwargs):\n    return None\n"


@pytest.mark.slow  # in CI's representative set (issue 38: the own script under accelerate launch)
@pytest.mark.torch
@pytest.mark.faults
def test_an_accelerate_script_passes_the_own_script_checklist_with_a_kill_after_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_torch()
    profile = yaml.safe_load((ROOT / "examples" / EXAMPLE / "profile.yaml").read_text(encoding="utf-8"))
    profile.update(command=["train_accelerate.py"], metrics={"writer": "rank0", "tracker": "wandb"})
    for field in ("working_dir", "env"):
        profile.pop(field)
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    (tmp_path / "train_accelerate.py").write_text(ACCELERATE_SCRIPT, encoding="utf-8")
    (tmp_path / "wandb.py").write_text(WANDB, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    argv = ["rehearse", "profile.yaml", "--own-script", "--procs-per-pod", "1", "--logs", "logs"]
    result = run(*argv, "--timeout", "240", "--backoff-scale", "0.1", "--restart-after-checkpoint")
    rows = {c["check"]: c for c in json.loads((tmp_path / "logs" / "result.json").read_text())["checks"]}
    assert result.exit_code == 0, result.output
    for name in (
        "ranks",
        "world-size",
        "global-batch",
        "checkpoint",
        "metrics",
        "resume",
        "shutdown",
        "fault",
    ):
        assert rows[name]["status"] == "pass", rows[name]
    # save_state writes the weights with safetensors and the rest with torch.save, on every rank
    assert "safetensors.save_file" in rows["checkpoint"]["message"]
    # 4 local x 8 accumulation steps (the Accelerator's) per optimizer step
    assert "32 samples per optimizer step per rank" in rows["global-batch"]["message"]
    assert "loaded the previous attempt's checkpoint" in rows["resume"]["message"]
    assert rows["fault"]["message"].startswith("kill master-0 after the first checkpoint")


def test_the_audit_layer_does_not_count_accelerate_putting_the_env_back(tmp_path: Path) -> None:
    """accelerate 1.16's clear_environment() empties os.environ and restores it: on the GPU run
    (docs/gpu-runs/accelerate) the transport-env row blamed it for NCCL_* writes of the values
    the rank started with. A variable set to a new value is still recorded."""
    needs_torch()
    from runai_spec.rehearse.filesystem import audit_layer_dir
    from runai_spec.rehearse.script_checks import read_audit

    script = (
        "import os\n"
        "from accelerate.utils.environment import clear_environment\n"
        "with clear_environment():\n"
        "    pass\n"
        "os.environ.update({'NCCL_SOCKET_IFNAME': 'lo'})  # a restore, as on the GPU run\n"
        "os.environ['NCCL_ALGO'] = 'Ring'\n"
    )
    (tmp_path / "t.py").write_text(script, encoding="utf-8")
    key = "k" * 64
    audit = tmp_path / "audit"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNAI_SPEC")}
    env.update(
        NCCL_SOCKET_IFNAME="lo",
        RUNAI_SPEC_AUDIT_DIR=str(audit),
        RUNAI_SPEC_AUDIT_KEY=key,
        PYTHONPATH=str(audit_layer_dir()),
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
    )
    done = subprocess.run([sys.executable, "t.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    written = [r.get("name") for r in read_audit(audit, key) if r.get("event") == "env-set"]
    assert written == ["NCCL_ALGO"]


# An Accelerate script that keeps its batch per process (8 x 4 accumulation, the one-pod
# example's), with enough work per step to be measured; it prints its thread setting
SCALING_SCRIPT = """\
import os, torch
from accelerate import Accelerator

acc = Accelerator(cpu=True, gradient_accumulation_steps=4)
print("threads", os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), flush=True)
data = torch.utils.data.TensorDataset(torch.randn(8 * 4 * 12 * acc.num_processes, 64))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt, loader = acc.prepare(model, opt, loader)
for (x,) in loader:
    with acc.accumulate(model):
        a = torch.randn(128, 128)
        for _ in range(4):
            a = torch.tanh(a @ a)
        acc.backward(model(x).sum() + a.mean())
        opt.step()
        opt.zero_grad()
acc.end_training()
"""


@pytest.mark.long  # two rehearsals of accelerate launch (~40 s): with the other --scaling reruns
@pytest.mark.slow
@pytest.mark.torch
def test_scaling_an_accelerate_profile_reruns_accelerate_launch_at_each_k(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--scaling 1,2 of the one-pod accelerate example: K=1 is `accelerate launch
    --num_processes=1` (no --multi_gpu: test_one_process_on_one_pod_... checks the argv), K=2 its
    torchrun over two processes; both with one thread per process, the per-process batch
    measured equal, so the row gives an efficiency."""
    needs_torch()
    example = ROOT / "examples" / "accelerate-single-node" / "profile.yaml"
    profile = yaml.safe_load(example.read_text(encoding="utf-8"))
    profile.update(command=["train_accelerate.py"])
    for field in ("working_dir", "metrics"):
        profile.pop(field)
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    (tmp_path / "train_accelerate.py").write_text(SCALING_SCRIPT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    argv = ["rehearse", "profile.yaml", "--own-script", "--logs", "logs", "--timeout", "180"]
    result = run(*argv, "--scaling", "1,2")
    rows = {c["check"]: c for c in json.loads((tmp_path / "logs" / "result.json").read_text())["checks"]}
    row = rows["scaling"]
    assert row["status"] == "note", (row["message"], result.output)
    runs = row["details"]["runs"]
    assert [(r["procs_per_pod"], r["world"]) for r in runs] == [(1, 1), (2, 2)]
    assert [r["samples_per_step_per_process"] for r in runs] == [32, 32], runs
    assert runs[0]["efficiency"] == 1.0
    assert runs[1]["efficiency"] is not None or "above 100 %" in runs[1]["refused"], runs[1]
    assert runs[1]["logs_dir"] == str((tmp_path / "logs" / "scaling-2").resolve())
    assert "OMP_NUM_THREADS=1 in every run" in row["message"]
    assert rows["global-batch"]["status"] == "pass", rows["global-batch"]
    logs = [p.read_text() for p in (tmp_path / "logs").rglob("stdout.log")]
    threads = {line for text in logs for line in text.splitlines() if line.startswith("threads")}
    assert threads == {"threads 1 1"}, threads
