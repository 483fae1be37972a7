"""The resume row on real rehearsals (issue 42 item 1): a script that saves to a temporary name
and renames it into place resumes on the multi-node example; the step a checkpoint holds is
read under the keys scripts use, in any case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, needs_torch, run
from runai_spec.rehearse.filesystem import audit_layer_dir
from runai_spec.rehearse.script_checks import read_audit
from runai_spec.rehearse.script_records import LOST

# rank 0 saves torch.save to a temporary name, then renames it; every rank resumes from the
# newest. 8 micro-batches of 4 between optimizer steps: the multi-node example's 512 over 16.
WELL_BEHAVED = """\
import os, time, torch, torch.distributed as dist
CKPT = "/checkpoints/latest.pt"
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
if os.path.exists(CKPT):
    state = torch.load(CKPT)
    step = state["step"]
    model.load_state_dict(state["model"])
    print(f"rank {rank} resumed at step {step}", flush=True)
while step < 6:
    for _ in range(8):
        model(torch.randn(4, 2)).sum().backward()
    opt.step()
    opt.zero_grad()
    step += 1
    if step % 2 == 0 and rank == 0:
        torch.save({"step": step, "model": model.state_dict()}, CKPT + ".tmp")
        os.replace(CKPT + ".tmp", CKPT)
    dist.barrier()
    time.sleep(0.2)
dist.destroy_process_group()
"""


def _rehearse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> tuple[Any, dict[str, Any]]:
    profile = yaml.safe_load((ROOT / "examples" / "multi-node" / "profile.yaml").read_text())
    profile["command"] = ["train.py"]
    profile["checkpoint"]["format"] = "torch"
    (tmp_path / "profile.yaml").write_text(yaml.safe_dump(profile))
    (tmp_path / "train.py").write_text(script)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    result = run(
        "rehearse",
        "profile.yaml",
        "--own-script",
        "--procs-per-pod",
        "1",
        "--logs",
        "logs",
        "--timeout",
        "180",
        "--backoff-scale",
        "0.1",
        "--restart-after-checkpoint",
    )
    report = tmp_path / "logs" / "result.json"
    assert report.exists(), result.output
    return result, {c["check"]: c for c in json.loads(report.read_text())["checks"]}


@pytest.mark.long  # CI resumes the accelerate script after its kill (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_a_checkpoint_renamed_into_place_resumes_on_the_multi_node_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_torch()
    result, rows = _rehearse(tmp_path, monkeypatch, WELL_BEHAVED)
    assert rows["fault"]["message"].startswith("kill master-0 after the first checkpoint"), rows["fault"]
    assert rows["resume"]["status"] == "pass", rows["resume"]
    assert rows["resume"]["message"].startswith("rank(s) 0, 1 loaded the previous attempt's checkpoint")
    assert result.exit_code == 0, result.output
    logs = "".join(p.read_text() for p in (tmp_path / "logs").rglob("stdout.log"))
    assert "rank 0 resumed at step 2" in logs


@pytest.mark.long  # the classic-mistakes script fails the checkpoint row in CI (issue 37: CI's time)
@pytest.mark.torch
@pytest.mark.slow
def test_the_same_script_saving_into_its_working_directory_fails_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_torch()
    script = WELL_BEHAVED.replace('"/checkpoints/latest.pt"', '"latest.pt"')
    result, rows = _rehearse(tmp_path, monkeypatch, script)
    assert result.exit_code == 1, result.output
    image = tmp_path.resolve() / "logs" / "master-0" / "image"
    assert rows["checkpoint"]["status"] == "fail"
    assert (
        f"{image}/latest.pt is not on the checkpoint volume /checkpoints: {LOST}"
        in rows["checkpoint"]["message"]
    )
    assert rows["resume"]["status"] == "fail", rows["resume"]
    assert "started again from step 0" in rows["resume"]["message"]


@pytest.mark.torch
@pytest.mark.slow
def test_the_audit_layer_reads_the_step_under_the_keys_scripts_use_in_any_case(tmp_path: Path) -> None:
    """`EPOCHS_RUN` (pytorch/examples ddp-tutorial-series), `Epoch`, `global_step`, fairseq's
    `num_updates`, `completed_steps`; a `max_steps` alone is no step."""
    needs_torch()
    saved = {
        "a.pt": "{'MODEL_STATE': {}, 'EPOCHS_RUN': 4}",
        "b.pt": "{'Epoch': 7, 'lr': 1}",
        "c.pt": "{'global_step': 30, 'epoch': 2}",
        "d.pt": "{'num_updates': 12}",
        "e.pt": "{'completed_steps': 9, 'max_steps': 100}",
        "f.pt": "{'max_steps': 100, 'warmup_steps': 3}",
    }
    lines = ["import torch"] + [f"torch.save({obj}, {name!r})" for name, obj in saved.items()]
    (tmp_path / "train.py").write_text("\n".join(lines) + "\ntorch.load('a.pt')\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "RUNAI_SPEC_AUDIT_DIR": str(tmp_path / "audit"),
        "RUNAI_SPEC_AUDIT_KEY": "k" * 64,
        "PYTHONPATH": str(audit_layer_dir()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True, env=env, timeout=120)
    records = read_audit(tmp_path / "audit", "k" * 64)
    steps = {Path(r["path"]).name: r.get("step") for r in records if r["event"] == "save"}
    assert steps == {"a.pt": 4, "b.pt": 7, "c.pt": 30, "d.pt": 12, "e.pt": 9, "f.pt": None}
    assert [r.get("step") for r in records if r["event"] == "load"] == [4]
