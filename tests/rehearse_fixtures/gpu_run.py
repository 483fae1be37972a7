"""Driver for the device machine (one H200): the real `runai-spec rehearse` command with NCCL
for the single-gpu and single-node examples, a restart after the checkpoint on the GPU, then
two preflight ranks forced onto one GPU. Writes the transcript, results and logs under $OUT.

Run there with the project's dependencies on PYTHONPATH (docs/gpu-runs/README.md)."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

out = Path(os.environ.get("OUT", "/tmp/out"))
logs = Path("/tmp/gpu-rehearse")
# NVLink multicast stays off on these shared hosts (device KINDS.md).
safe = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "COLUMNS": "160",
}
env = {**os.environ, **safe}
transcript: list[str] = []
results: dict[str, Any] = {}  # per run: its result.json


def run(argv: list[str], name: str, **extra: str) -> int:
    res = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=280)
    transcript.append(f"$ {' '.join(argv[2:])}\n{res.stdout}{res.stderr}exit {res.returncode}\n")
    print(transcript[-1], flush=True)
    result = logs / name / "result.json"
    if result.exists():
        results[name] = json.loads(result.read_text())
    return res.returncode


cli = [sys.executable, "-m", "runai_spec", "rehearse"]
run([*cli, "examples/single-gpu/profile.yaml", "--logs", str(logs / "single-gpu")], "single-gpu")
run(
    [*cli, "examples/single-node/profile.yaml", "--procs-per-pod", "1", "--logs", str(logs / "single-node")],
    "single-node",
)
run(
    [*cli, "examples/single-gpu/profile.yaml", "--restart-after-checkpoint", "--logs", str(logs / "restart")],
    "restart",
)
# Two ranks on one GPU: the preflight must say so before NCCL's first collective crashes.
shared = subprocess.run(
    [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "src/runai_spec/preflight.py",
        "--checkpoint-dir",
        "/tmp/shared-ckpt",
        "--join-timeout",
        "60",
    ],
    env={**env, "CUDA_VISIBLE_DEVICES": "0"},
    capture_output=True,
    text=True,
    timeout=240,
)
lines = [ln for ln in shared.stdout.splitlines() if '"check": "device"' in ln or "summary" in ln]
transcript.append(
    "$ torchrun --standalone --nproc-per-node=2 preflight.py  (CUDA_VISIBLE_DEVICES=0)\n"
    + "\n".join(lines)
    + f"\nexit {shared.returncode}\n"
)
print(transcript[-1], flush=True)
(out / "gpu-run.log").write_text("\n".join(transcript))
(out / "shared-gpu.log").write_text(shared.stdout + "\n--- stderr ---\n" + shared.stderr)
(out / "rehearse-results.json").write_text(json.dumps(results, indent=2, default=str))
with tarfile.open(out / "rank-logs.tar.gz", "w:gz") as tar:
    tar.add(logs, arcname="gpu-rehearse")
