"""Time `runai-spec render` of the multi-node example as a whole process, side by side with
the floor of what it must load, the bare import floor and (when installed) torchx's dry run
of the same 2x8 job; print medians and ratios against the budget of DESIGN.md section 8."""

from __future__ import annotations

import argparse
import compileall
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"


def byte_compile() -> None:
    """Write runai_spec's bytecode, as `pip install` does. The floor's packages have theirs in
    site-packages; a checkout run with PYTHONDONTWRITEBYTECODE=1 would otherwise compile
    every runai_spec module from source on each run and time the compiler, not render."""
    found = subprocess.run([sys.executable, "-c", "import runai_spec; print(runai_spec.__file__)"],
                           check=True, capture_output=True, text=True).stdout.strip()
    compileall.compile_dir(str(Path(found).parent), quiet=1)


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def side_by_side(argvs: list[list[str]], runs: int) -> list[float]:
    """Median seconds of each command, alternated so background load hits them alike."""
    for argv in argvs:
        once(argv)  # warm the file cache
    times: list[list[float]] = [[] for _ in argvs]
    for _ in range(runs):
        for argv, seen in zip(argvs, times, strict=True):
            seen.append(once(argv))
    return [statistics.median(seen) for seen in times]


# Where render's time above the floor goes, in one fresh process per run: each phase's
# milliseconds, printed as JSON on stdout (run with --phases).
PHASES = r"""
import contextlib, io, json, sys, time
marks = [time.perf_counter()]
import typer, jinja2, yaml
from pydantic import BaseModel
marks.append(time.perf_counter())
class _First(BaseModel):
    x: int
marks.append(time.perf_counter())
import runai_spec.profile
marks.append(time.perf_counter())
import runai_spec.presets
marks.append(time.perf_counter())
import runai_spec.cli
marks.append(time.perf_counter())
sys.argv = ["runai-spec", "render", sys.argv[1]]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        runai_spec.cli.main()
    except SystemExit:
        pass
marks.append(time.perf_counter())
print(json.dumps([(b - a) * 1000 for a, b in zip(marks, marks[1:])]))
"""
PHASE_NAMES = ("the floor's imports", "pydantic's first model (any model at all)",
               "runai_spec.profile (its models)", "runai_spec.presets (its models)",
               "the rest of runai_spec.cli", "render itself: Typer, Jinja, rules, signatures, print")


def phases(runs: int) -> None:
    """Median milliseconds of each phase over RUNS fresh processes."""
    seen: list[list[float]] = [[] for _ in PHASE_NAMES]
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PHASES, str(PROFILE)], check=True,
                             capture_output=True, text=True, cwd=ROOT).stdout
        for bucket, ms in zip(seen, json.loads(out), strict=True):
            bucket.append(ms)
    for name, bucket in zip(PHASE_NAMES, seen, strict=True):
        print(f"{statistics.median(bucket):7.1f} ms  {name}")


BUDGET = 1.25  # x the floor of what render must load (DESIGN.md section 8)


def torchx_argv(torchx: str, folder: Path) -> list[str]:
    """The same job: 2 nodes x 8 processes. No workspace, so torchx builds no image."""
    (folder / "train.py").write_text("print('train')\n")
    return [torchx, "run", "--workspace", "", "--dryrun", "-s", "kubernetes", "-cfg",
            "queue=nlp-lab", "dist.ddp", "-j", "2x8", "--script", str(folder / "train.py")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--torchx", help="torchx executable (default: the one on PATH)")
    parser.add_argument("--phases", action="store_true",
                        help="print where render's time goes instead (medians, one process a run)")
    args = parser.parse_args()
    if args.phases:
        byte_compile()
        phases(args.runs)
        return 0
    exe = str(Path(sys.executable))
    bare = [exe, "-c", "import typer, pydantic, jinja2, yaml"]
    # `import pydantic` is lazy: the bare floor loads none of the BaseModel machinery that
    # any pydantic model needs; the budget is read against the floor that does.
    floor = [exe, "-c", "import typer, jinja2, yaml; from pydantic import BaseModel"]
    render = [exe, "-m", "runai_spec", "render", str(PROFILE)]
    byte_compile()
    t_bare, t_floor, t_render = side_by_side([bare, floor, render], args.runs)
    print(f"bare floor        median {t_bare * 1000:7.1f} ms  (import typer, pydantic, jinja2, yaml)")
    print(f"floor             median {t_floor * 1000:7.1f} ms  (... from pydantic import BaseModel)")
    print(f"runai-spec render median {t_render * 1000:7.1f} ms  ratio {t_render / t_floor:.2f} x "
          f"floor (budget <= {BUDGET}), {t_render / t_bare:.2f} x bare floor")
    torchx = args.torchx or shutil.which("torchx")
    if not torchx:
        print("torchx not installed: `pip install torchx` to compare (render must be ahead of it)")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                again, tx = side_by_side([render, torchx_argv(torchx, Path(tmp))],
                                         max(5, args.runs // 2))
                print(f"torchx --dryrun   median {tx * 1000:7.1f} ms  render {again * 1000:.1f} ms:"
                      f" ratio {again / tx:.2f} x torchx (ahead of it: < 1)")
            except subprocess.CalledProcessError as exc:
                print(f"torchx --dryrun failed (exit {exc.returncode}); not compared")
    return 0 if t_render / t_floor <= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
