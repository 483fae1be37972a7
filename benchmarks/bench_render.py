"""Time `runai-spec render` of the multi-node example as a whole process, side by side with
the import floor and (when installed) torchx's dry run of the same 2x8 job; print medians
and ratios against the budgets of DESIGN.md section 8."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def median_seconds(argv: list[str], runs: int) -> float:
    once(argv)  # warm the file cache
    return statistics.median(once(argv) for _ in range(runs))


def side_by_side(a: list[str], b: list[str], runs: int) -> tuple[float, float]:
    """Alternate the two commands so background load hits both alike."""
    once(a)
    once(b)
    times_a, times_b = [], []
    for _ in range(runs):
        times_a.append(once(a))
        times_b.append(once(b))
    return statistics.median(times_a), statistics.median(times_b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--torchx", help="torchx executable (default: the one on PATH)")
    args = parser.parse_args()
    exe = Path(sys.executable)
    floor_argv = [str(exe), "-c", "import typer, pydantic, jinja2, yaml"]
    render_argv = [str(exe), "-m", "runai_spec", "render", str(PROFILE)]
    floor, render = side_by_side(floor_argv, render_argv, args.runs)
    # `import pydantic` is lazy: the floor loads none of the BaseModel machinery that any
    # pydantic model (the brief's profile validation) needs. Shown so the budget is read
    # against what the floor does not pay for.
    models_argv = [*floor_argv[:2], floor_argv[2] + "; from pydantic import BaseModel, Field"]
    _, models = side_by_side(floor_argv, models_argv, args.runs)
    print(f"import floor      median {floor * 1000:7.1f} ms")
    print(f"floor + BaseModel median {models * 1000:7.1f} ms  ratio {models / floor:.2f} x floor")
    print(f"runai-spec render median {render * 1000:7.1f} ms  ratio {render / floor:.2f} x floor "
          f"(budget <= 1.30)")
    torchx = args.torchx or shutil.which("torchx")
    if torchx:
        # The same job: 2 nodes x 8 processes. No workspace, so torchx builds no image.
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "train.py").write_text("print('train')\n")
            tx_argv = [torchx, "run", "--workspace", "", "--dryrun", "-s", "kubernetes",
                       "-cfg", "queue=nlp-lab", "dist.ddp", "-j", "2x8", "--script",
                       str(Path(tmp) / "train.py")]
            try:
                render_again, tx = side_by_side(render_argv, tx_argv, max(5, args.runs // 2))
                print(f"torchx --dryrun   median {tx * 1000:7.1f} ms  render {render_again * 1000:.1f}"
                      f" ms: ratio {render_again / tx:.2f} x torchx (budget <= 0.30)")
            except subprocess.CalledProcessError as exc:
                print(f"torchx --dryrun failed (exit {exc.returncode}); not compared")
    else:
        print("torchx not installed: `pip install torchx` to compare (budget render <= 0.3 x torchx)")
    return 0 if render / floor <= 1.3 else 1


if __name__ == "__main__":
    sys.exit(main())
