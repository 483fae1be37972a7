"""Driver for the device machine (one H200): the shipped render of issue 11 on NCCL. The real
`runai-spec rehearse` of the single-node example (torchrun with the rendered --log-dir/--tee,
one process here), the same with diagnostics.nccl_debug (one NCCL_DEBUG_FILE per rank), a
kill after the first checkpoint (the container restarted in place by the kubelet model) and
a preemption; then what landed in the rehearsal's checkpoint volume. Writes the transcript,
each rehearsal's result.json and the logs under $OUT.

Run there with the project's dependencies on PYTHONPATH (docs/gpu-runs/README.md):
    PYTHONPATH=/tmp/site:$PWD/src python3 tests/rehearse_fixtures/gpu_shipped.py"""

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

out = Path(os.environ.get("OUT", "/tmp/out"))
logs = Path("/tmp/gpu-shipped")
# NVLink multicast stays off on these shared hosts (device KINDS.md).
safe = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "COLUMNS": "200",
}
env = {**os.environ, **safe}
transcript: list[str] = []
results: dict[str, object] = {}
EXAMPLE = Path("examples/single-node/profile.yaml")


def run(name: str, profile: Path, *options: str) -> int:
    argv = [
        sys.executable,
        "-m",
        "runai_spec",
        "rehearse",
        str(profile),
        "--procs-per-pod",
        "1",
        "--logs",
        str(logs / name),
        *options,
    ]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=280)
    transcript.append(f"$ runai-spec {' '.join(argv[3:])}\n{res.stdout}{res.stderr}exit {res.returncode}\n")
    print(transcript[-1], flush=True)
    result = logs / name / "result.json"
    results[name] = {
        "exit": res.returncode,
        "result": json.loads(result.read_text()) if result.exists() else None,
    }
    return res.returncode


def volume_files(name: str) -> list[str]:
    """What the pods left on the rehearsal's checkpoint volume under logs/."""
    found = sorted(p for p in (logs / name / "volumes").glob("*/logs/**/*") if p.is_file())
    return [f"{p.relative_to(logs / name)} ({p.stat().st_size} bytes)" for p in found]


run("straight", EXAMPLE)
with tempfile.TemporaryDirectory() as tmp:
    debug = Path(tmp) / "profile.yaml"
    debug.write_text(
        EXAMPLE.read_text() + "diagnostics: {nccl_debug: true, reason: GPU check of NCCL_DEBUG_FILE}\n"
    )
    run("nccl-debug", debug)
run("kill", EXAMPLE, "--restart-after-checkpoint", "--backoff-scale", "0.1")
run("preempt", EXAMPLE, "--preempt", "checkpoint", "--backoff-scale", "0.1")

for name in results:
    files = volume_files(name)
    transcript.append(f"# {name}: files under the checkpoint volume's logs/\n" + "\n".join(files))
    print(transcript[-1], flush=True)
nccl = [p for p in (logs / "nccl-debug" / "volumes").glob("*/logs/*/nccl.*.log")]
lines = sum(1 for p in nccl for ln in p.read_text(errors="replace").splitlines() if "NCCL INFO" in ln)
transcript.append(
    f"# NCCL_DEBUG_FILE: {len(nccl)} file(s), {lines} 'NCCL INFO' lines: " + ", ".join(p.name for p in nccl)
)
print(transcript[-1], flush=True)
out.mkdir(parents=True, exist_ok=True)
(out / "gpu-shipped.log").write_text("\n".join(transcript) + "\n")
(out / "gpu-shipped-results.json").write_text(json.dumps(results, indent=2, default=str))
with tarfile.open(out / "gpu-shipped-logs.tar.gz", "w:gz") as tar:
    tar.add(logs, arcname="gpu-shipped")
