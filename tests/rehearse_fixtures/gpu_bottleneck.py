"""Driver for the device machine (one H200): the `bottleneck` row (issue 24) on a compute-heavy,
an input-bound and a checkpoint-heavy training script, each measured twice: by the audit layer
alone under torchrun (its records written back), and by the real `rehearse --own-script`.
Writes the transcript, the records and each rehearsal's result.json under $OUT.

Run there from the repository root with the project's dependencies on PYTHONPATH
(docs/gpu-runs/README.md); on a CPU machine it runs too (gloo), without the GPU figures."""

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = tuple(os.environ.get("BOTTLENECK_MODES", "compute,input,checkpoint").split(","))
SCRIPT = """\
import argparse, os, time
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

MODE = "{mode}"
STEPS = 40
p = argparse.ArgumentParser()
p.add_argument("--config")
p.add_argument("--checkpoint-dir", default="/checkpoints")
args = p.parse_args()
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)


class Shards(Dataset):
    def __len__(self):
        return STEPS * 16

    def __getitem__(self, i):
        if MODE == "input":
            time.sleep(0.005)  # a slow file system: 5 ms a sample
        return torch.full((256, 256), float(i % 7))


width = {{"compute": 8192, "input": 1024, "checkpoint": 4096}}[MODE]
depth = {{"compute": 8, "input": 2, "checkpoint": 2}}[MODE]
if not cuda:  # the CPU try of this driver: the same shapes of work, smaller
    width = 256
layers = [torch.nn.Linear(256, width)] + [torch.nn.Linear(width, width) for _ in range(depth)]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
path = os.path.join(args.checkpoint_dir, "state.pt")
for step, x in enumerate(DataLoader(Shards(), batch_size=16), 1):
    x = x.view(-1, 256).to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    value = loss.item()  # logged every step, as most scripts do
    if MODE == "checkpoint" and step % 5 == 0 and dist.get_rank() == 0:
        torch.save({{"step": step, "model": model.state_dict(), "opt": opt.state_dict()}}, path)
if dist.get_rank() == 0:
    torch.save({{"step": STEPS, "model": model.state_dict()}}, path)
peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
print(f"{{MODE}}: {{STEPS}} steps, last loss {{value:.4g}}, peak {{peak:.2f}} GiB", flush=True)
dist.destroy_process_group()
"""
GUARDS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _direct(tree: Path, mode: str, env: dict[str, str]) -> tuple[str, list[str], str]:
    """The audit layer alone under torchrun: its signed record lines and the key."""
    audit, key = tree / f"audit-{mode}", secrets.token_hex(32)
    shutil.rmtree(audit, ignore_errors=True)
    argv = [
        "torchrun",
        "--standalone",
        "--nproc-per-node=1",
        "train.py",
        "--checkpoint-dir",
        str(tree / "ck"),
    ]
    layer = str(ROOT / "src" / "runai_spec" / "audit")
    denv = {**env, "RUNAI_SPEC_AUDIT_DIR": str(audit), "RUNAI_SPEC_AUDIT_KEY": key, "PYTHONPATH": layer}
    done = subprocess.run(argv, cwd=tree, env=denv, capture_output=True, text=True, timeout=240, check=False)
    lines = [line for f in sorted(audit.glob("rank-*.jsonl")) for line in f.read_text().splitlines()]
    text = (
        f"$ {' '.join(argv)}  # audit layer only, {mode}\n{done.stdout}{done.stderr}exit {done.returncode}\n"
    )
    return text, lines, key


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **GUARDS, "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    transcript, direct, results = [], {}, {}
    for mode in MODES:
        tree = Path(f"/tmp/bottleneck-{mode}")
        shutil.rmtree(tree, ignore_errors=True)
        (tree / "configs").mkdir(parents=True)
        (tree / "ck").mkdir()
        (tree / "train.py").write_text(SCRIPT.format(mode=mode))
        (tree / "configs" / "vit-l.yaml").write_text("{}\n")
        shutil.copyfile(ROOT / "examples" / "single-node" / "profile.yaml", tree / "profile.yaml")
        text, lines, key = _direct(tree, mode, env)
        transcript.append(text)
        print(text, flush=True)
        direct[mode] = {"key": key, "lines": lines}
        logs = tree / "logs"
        argv = [sys.executable, "-m", "runai_spec", "rehearse", "profile.yaml", "--own-script"]
        argv += ["--procs-per-pod", "1", "--logs", str(logs), "--timeout", "240"]
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        transcript.append(
            f"$ runai-spec {' '.join(argv[3:])}\n{done.stdout}{done.stderr}exit {done.returncode}\n"
        )
        print(transcript[-1], flush=True)
        if (logs / "result.json").exists():
            results[mode] = json.loads((logs / "result.json").read_text())
    (out / "bottleneck-run.log").write_text("\n".join(transcript))
    (out / "bottleneck-direct-records.json").write_text(json.dumps(direct, indent=1))
    (out / "bottleneck-results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
