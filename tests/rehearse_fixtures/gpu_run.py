"""Driver for the device machine: rehearse single-gpu and single-node with NCCL, then two
preflight ranks forced onto one GPU. Writes JSON results and logs under $OUT."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from runai_spec.rehearse import PreflightSettings, rehearse_manifests, result_dict

out = Path(os.environ.get("OUT", "/tmp/out"))
logs = Path("/tmp/gpu-rehearse")
summary = {}
for example, ppp in (("single-gpu", None), ("single-node", 1)):
    manifests = [yaml.safe_load(Path(f"examples/{example}/manifest.yaml").read_text())]
    r = rehearse_manifests(manifests, settings=PreflightSettings(local_batch=4, grad_accum=2),
                           procs_per_pod=ppp, device="cuda", python=sys.executable,
                           logs_dir=logs / example, timeout_s=240)
    summary[example] = result_dict(r)
    print(f"== rehearse {example} (procs_per_pod={ppp}) backend={r.backend} ok={r.ok}")
    for c in r.checks:
        print(f"  {c.check:14} {c.status:7} {c.message}")
env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
       "NVSHMEM_DISABLE_NVLS": "1", "CUDA_VISIBLE_DEVICES": "0"}
shared = subprocess.run(
    [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
     str(logs / "single-gpu" / "preflight" / "preflight.py"), "--checkpoint-dir",
     "/tmp/shared-ckpt", "--join-timeout", "60"],
    env=env, capture_output=True, text=True, timeout=240)
print(f"== two ranks on one GPU: exit {shared.returncode}")
print("\n".join(ln for ln in shared.stdout.splitlines() if "PREFLIGHT" in ln))
(out / "shared-gpu.log").write_text(shared.stdout + "\n--- stderr ---\n" + shared.stderr)
(out / "rehearse-results.json").write_text(json.dumps(summary, indent=2, default=str))
with tarfile.open(out / "rank-logs.tar.gz", "w:gz") as tar:
    tar.add(logs, arcname="gpu-rehearse")
