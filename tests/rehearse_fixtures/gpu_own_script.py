"""Driver for the device machine (one H200): `rehearse --own-script` of a well-behaved GPU
training script (issue 15), once straight through and once with its pod killed right after
its first checkpoint. Writes the transcript and each rehearsal's result.json under $OUT.

Run there from the repository root with the project's dependencies on PYTHONPATH
(docs/gpu-runs/README.md); it also runs on a CPU machine (gloo), where the device row is a
skip."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WELL_BEHAVED = """\
import argparse, os, time
import torch, torch.distributed as dist

TOTAL_STEPS = 8
p = argparse.ArgumentParser()
p.add_argument("--config")
p.add_argument("--checkpoint-dir", default="/checkpoints")
args = p.parse_args()
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
local = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
torch.manual_seed(0)
model = torch.nn.Linear(64, 64).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
path = os.path.join(args.checkpoint_dir, "state.pt")
start = 0
if os.path.exists(path):  # restore after a restart or a preemption
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    start = state["step"]
for step in range(start + 1, TOTAL_STEPS + 1):
    loss = model(torch.randn(32, 64, device=device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 0 and dist.get_rank() == 0:  # rank 0 alone, on the checkpoint volume
        torch.save({"step": step, "model": model.state_dict()}, path)
    dist.barrier()
    time.sleep(0.5)
print(f"rank {dist.get_rank()} done at step {TOTAL_STEPS} on {device}", flush=True)
dist.destroy_process_group()
"""


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    tree = Path("/tmp/own-script-tree")
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "configs").mkdir(parents=True)
    (tree / "train.py").write_text(WELL_BEHAVED)
    (tree / "configs" / "resnet50.yaml").write_text("{}\n")
    shutil.copyfile(ROOT / "examples" / "single-gpu" / "profile.yaml", tree / "profile.yaml")
    env = {
        **os.environ,
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    transcript, results, codes = [], {}, {}
    runs = {"straight": [], "kill": ["--kill", "master-0@checkpoint", "--backoff-scale", "0.1"]}
    for name, extra in runs.items():
        logs = tree / f"logs-{name}"
        argv = [
            sys.executable,
            "-m",
            "runai_spec",
            "rehearse",
            "profile.yaml",
            "--own-script",
            "--logs",
            str(logs),
            "--timeout",
            "240",
            *extra,
        ]
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        transcript.append(
            f"$ runai-spec {' '.join(argv[3:])}\n{done.stdout}{done.stderr}exit {done.returncode}\n"
        )
        print(transcript[-1], flush=True)
        codes[name] = done.returncode
        if (logs / "result.json").exists():
            results[name] = json.loads((logs / "result.json").read_text())
    (out / "own-script-run.log").write_text("\n".join(transcript))
    (out / "own-script-results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
