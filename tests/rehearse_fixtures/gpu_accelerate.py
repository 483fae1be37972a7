"""Driver for the device machine (issue 38): `rehearse --own-script` of an Accelerate training
script under the rendered `accelerate launch` of examples/accelerate-single-node, one process
(`--procs-per-pod 1`: `accelerate launch --num_processes=1`, one GPU), once straight through and
once with its pod killed right after its first checkpoint. Writes the transcript and each
rehearsal's result.json under $OUT (else ./gpu-accelerate-out).

Run there from the repository root with the project's dependencies on PYTHONPATH
(docs/gpu-runs/README.md); it also runs on a CPU machine, where the script trains on the CPU."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """\
import json, os, time
import torch
import wandb
from accelerate import Accelerator

CKPT = "/checkpoints/accel"
acc = Accelerator(cpu=not torch.cuda.is_available(), gradient_accumulation_steps=4)
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(8192, 64), torch.randn(8192, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, opt, loader = acc.prepare(model, opt, loader)
step = 0
if os.path.isdir(CKPT):
    acc.load_state(CKPT)
    with open(os.path.join(CKPT, "step.json")) as f:
        step = json.load(f)["step"]
run = wandb.init(project="accel", dir="/checkpoints") if acc.is_main_process else None
# after a restart: the weights, optimizer and RNG states of the last checkpoint, the data anew
for x, y in loader:
    with acc.accumulate(model):
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
    if acc.sync_gradients:
        step += 1
        mean = acc.gather_for_metrics(loss.detach().reshape(1)).mean().item()
        if run is not None:
            wandb.log({"loss": mean}, step=step)
        if step % 2 == 0:
            acc.save_state(CKPT)
            if acc.is_main_process:
                with open(os.path.join(CKPT, "step.json"), "w") as f:
                    json.dump({"step": step}, f)
            acc.wait_for_everyone()
        time.sleep(0.3)
        if step >= 8:
            break
print(f"done at step {step} on {acc.device} ({acc.distributed_type})", flush=True)
acc.end_training()
"""
WANDB = (
    "def init(*args, **kwargs):\\n    return object()\\n\\n\\ndef log(*args, **kwargs):\\n    return None\\n"
)


def main() -> int:
    out = Path(os.environ.get("OUT") or "gpu-accelerate-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    tree = out.parent / "accelerate-tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir()
    profile = yaml.safe_load((ROOT / "examples/accelerate-single-node/profile.yaml").read_text())
    profile.update(command=["train_accelerate.py"], metrics={"writer": "rank0", "tracker": "wandb"})
    profile.pop("working_dir")
    (tree / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    (tree / "train_accelerate.py").write_text(SCRIPT)
    (tree / "wandb.py").write_text(WANDB.encode().decode("unicode_escape"))
    import accelerate  # type: ignore[import-untyped]
    import torch

    lines = [
        f"torch {torch.__version__}, accelerate {accelerate.__version__}, cuda {torch.cuda.is_available()}"
    ]
    if torch.cuda.is_available():
        lines.append(f"device: {torch.cuda.get_device_name(0)}")
    code = 0
    for name, extra in (("straight", []), ("kill", ["--restart-after-checkpoint"])):
        logs = tree / f"logs-{name}"
        argv = [sys.executable, "-m", "runai_spec", "rehearse", "profile.yaml", "--own-script"]
        argv += [
            "--procs-per-pod",
            "1",
            "--logs",
            str(logs),
            "--timeout",
            "300",
            "--backoff-scale",
            "0.1",
            *extra,
        ]
        done = subprocess.run(
            argv, cwd=tree, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
        )
        lines += [f"$ {' '.join(argv[1:])}", f"exit {done.returncode}", done.stdout, done.stderr]
        code = code or done.returncode
        if (logs / "result.json").exists():
            shutil.copy(logs / "result.json", out / f"result-{name}.json")
            rows = json.loads((logs / "result.json").read_text())["checks"]
            lines += [f"  {r['check']}: {r['status']}: {r['message']}" for r in rows]
        shutil.make_archive(str(out / f"logs-{name}"), "gztar", logs)
    (out / "transcript.log").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:2]))
    return code


if __name__ == "__main__":
    sys.exit(main())
