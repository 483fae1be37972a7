"""Driver for the device machine (one GPU): the `bottleneck` row (issue 42) on a public script,
pytorch/examples' imagenet/main.py (commit 77f55b9, `--dummy`: torchvision's FakeData, ResNet-50),
rehearsed twice with `rehearse --own-script`: with no DataLoader worker (`-j 0`: every image is
made on the training thread) and with twelve (`--args '-j 12'`, which argparse takes over the
profile's `-j 0`). The verdict should go from input to compute.

The script is not part of this repository: the command that runs this driver carries it
(`.gpu-public/imagenet_main.py`, git-ignored, a copy of the file at that commit). Writes the
transcript, the machine and each rehearsal's result.json under $OUT."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / ".gpu-public" / "imagenet_main.py"
COMMAND = [
    "main.py",
    "--dummy",
    "-a",
    "resnet50",
    "-b",
    "64",
    "-j",
    "0",
    "--epochs",
    "1",
    "--print-freq",
    "100",
]
RUNS = {"workers-0": [], "workers-12": ["--args", "-j 12"]}
GUARDS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _machine(env: dict[str, str]) -> str:
    probes = [
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        [
            sys.executable,
            "-c",
            "import torch, torchvision; print(torch.__version__, torchvision.__version__)",
        ],
        ["nproc"],
    ]
    out = []
    for argv in probes:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        out.append(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}")
    return "".join(out)


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **GUARDS, "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    tree = Path("/tmp/imagenet-workers")
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    shutil.copyfile(PUBLIC, tree / "main.py")
    profile = yaml.safe_load((ROOT / "examples" / "single-gpu" / "profile.yaml").read_text())
    profile["command"] = COMMAND
    (tree / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    transcript, results = [_machine(env)], {}
    print(transcript[0], flush=True)
    for name, extra in RUNS.items():
        logs = tree / f"logs-{name}"
        argv = [sys.executable, "-m", "runai_spec", "rehearse", "profile.yaml", "--own-script"]
        argv += ["--logs", str(logs), "--timeout", "90", *extra]
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=240, check=False
        )
        transcript.append(
            f"$ runai-spec {' '.join(argv[3:])}\n{done.stdout}{done.stderr}exit {done.returncode}\n"
        )
        print(transcript[-1], flush=True)
        if (logs / "result.json").exists():
            results[name] = json.loads((logs / "result.json").read_text())
    (out / "workers-run.log").write_text("\n".join(transcript))
    (out / "workers-results.json").write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
