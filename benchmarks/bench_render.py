"""`runai-spec render` of the multi-node example, `--version` and `--help`, each a whole
process, against the floor of what render must load (typer, jinja2, yaml, pydantic's BaseModel
and runai_spec's models), the bare import floor and (when installed) torchx's dry run of the
same 2x8 job. Instruction counts (callgrind: the machine's load does not move them) when
valgrind is installed, else (or with --paired N) paired runs: the sides alternate and each
ratio is the median of the per-pair ratios. Budgets: issue 29."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from measure import ENV, ROOT, byte_compile, instructions, once, paired, ratio, spread, valgrind

PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"
BUDGET_FLOOR = 1.6  # render <= 1.6 x the floor of what it must load
BUDGET_VERSION = 0.5  # --version <= 0.5 x render
BUDGET_TORCHX = 0.4  # render <= 0.4 x torchx's dry run


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
import runai_spec.load.profile
marks.append(time.perf_counter())
import runai_spec.load.registry
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
PHASE_NAMES = (
    "the floor's imports",
    "pydantic's first model (any model at all)",
    "runai_spec.load.profile (its models)",
    "runai_spec.load.registry (the preset, site and ledger models)",
    "the rest of runai_spec.cli",
    "render itself: Typer, Jinja, rules, signatures, print",
)


def phases(runs: int) -> None:
    """Median milliseconds of each phase over RUNS fresh processes."""
    seen: list[list[float]] = [[] for _ in PHASE_NAMES]
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PHASES, str(PROFILE)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=ENV,
        ).stdout
        for bucket, ms in zip(seen, json.loads(out), strict=True):
            bucket.append(ms)
    for name, bucket in zip(PHASE_NAMES, seen, strict=True):
        print(f"{statistics.median(bucket):7.1f} ms  {name}")


# Where render's instructions go (run with --steps): one process per step, each importing what
# the steps before it imported and then its own modules, in the order render loads them; the
# last step runs render itself. A step's share is its count less the step before it.
STEPS = (
    ("python, runai_spec", "import runai_spec"),
    ("typer, the CLI's common module", "import runai_spec.cli.common, runai_spec.cli.offline"),
    ("pydantic's BaseModel", "from pydantic import BaseModel"),
    ("yaml", "import yaml"),
    ("the profile models (the first model imports pydantic.types)", "import runai_spec.load.profile"),
    ("the preset, site and ledger models, signing", "import runai_spec.load.registry"),
    ("plan", "import runai_spec.plan.plan"),
    ("render: the encoder, the compiled templates' runtime (no jinja2)", "import runai_spec.render"),
    ("check: the rules", "import runai_spec.check.catalogue"),
    ("pipeline", "import runai_spec.pipeline.stream"),
    ("cryptography (Ed25519)", "import cryptography.hazmat.primitives.asymmetric.ed25519"),
)
RUN = (
    "import sys; sys.argv = ['runai-spec', 'render', {profile!r}]\n"
    "from runai_spec.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
)


def steps() -> None:
    """Instructions of each step of render (STEPS, then the run), one process each."""
    os.environ["PYTHONHASHSEED"] = "0"
    ENV["PYTHONHASHSEED"] = "0"
    code, before = "", 0
    for name, line in (*STEPS, ("the run: Typer, load, validate, verify, plan, render, rules, print", "")):
        code = f"{code}\n{line}" if line else f"{code}\n{RUN.format(profile=str(PROFILE))}"
        count = instructions([sys.executable, "-c", code])
        print(f"{count / 1e6:9.1f} M  +{(count - before) / 1e6:7.1f} M  {name}")
        before = count


def torchx_argv(torchx: str, folder: Path) -> list[str]:
    """The same job as the multi-node example (2 pods x 8 GPUs, its image, command, variable
    and the checkpoint and data volumes), as torchx's `dist.ddp` component renders it for
    Kubernetes (torchx 0.7.0, torchx/components/dist.py, schedulers/kubernetes_scheduler.py:
    a Volcano Job). No workspace, so torchx builds no image."""
    (folder / "train.py").write_text("print('train')\n")
    image = next(
        line.split(": ", 1)[1] for line in PROFILE.read_text().splitlines() if line.startswith("image: ")
    )
    return [
        torchx,
        "run",
        "--workspace",
        "",
        "--dryrun",
        "-s",
        "kubernetes",
        "-cfg",
        "queue=nlp-lab,namespace=runai-nlp-lab",
        "dist.ddp",
        "-j",
        "2x8",
        "--gpu",
        "8",
        "--image",
        image,
        "--env",
        "TOKENIZERS_PARALLELISM=false",
        "--mounts",
        "type=volume,src=nlp-lab-checkpoints,dst=/checkpoints,type=volume,src=datasets-shared,dst=/data",
        "--script",
        str(folder / "train.py"),
        "--",
        "--config",
        "configs/7b.yaml",
        "--checkpoint-dir",
        "/checkpoints",
    ]


def sides(folder: Path, torchx: str | None) -> dict[str, list[str]]:
    exe = sys.executable
    cli = str(Path(exe).parent / "runai-spec")
    found = {
        "bare import floor": [exe, "-c", "import typer, pydantic, jinja2, yaml"],
        "import floor": [exe, "-c", "import typer, jinja2, yaml; from pydantic import BaseModel"],
        # what render must load: the import floor and runai_spec's pydantic models defined
        "floor": [
            exe,
            "-c",
            "import typer, jinja2, yaml; from pydantic import BaseModel; "
            "import runai_spec.load.profile, runai_spec.load.registry",
        ],
        "render": [cli, "render", str(PROFILE)],
        "--version": [cli, "--version"],
        "--help": [cli, "--help"],
    }
    if torchx:
        found["torchx --dryrun"] = torchx_argv(torchx, folder)
    return found


def report(measured: dict[str, list[float]], unit: str) -> bool:
    """The ratio lines; True when every budget holds."""
    render = measured["render"]

    def line(name: str, over: str, budget: float | None = None) -> bool:
        value = ratio(measured[name], measured[over])
        shown = f"{value:.3f} x" + (
            f" (runs {spread(measured[name], measured[over])})" if len(render) > 1 else ""
        )
        verdict = "" if budget is None else f", budget <= {budget}: " + ("ok" if value <= budget else "OVER")
        print(f"ratio {name} / {over}: {shown}{verdict}")
        return budget is None or value <= budget

    for name, seen in measured.items():
        print(f"{name:18} {statistics.median(seen):14,.{0 if unit == 'instructions' else 4}f} {unit}")
    ok = line("render", "floor", BUDGET_FLOOR)
    line("render", "import floor")
    line("render", "bare import floor")
    ok = line("--version", "render", BUDGET_VERSION) and ok
    line("--help", "render")
    if "torchx --dryrun" in measured:
        ok = line("render", "torchx --dryrun", BUDGET_TORCHX) and ok
    else:
        print(
            "torchx not installed: `pip install torchx` to compare (budget: render <= "
            f"{BUDGET_TORCHX} x its dry run)"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--paired", type=int, metavar="N", help="N paired timed runs instead of instruction counts"
    )
    parser.add_argument("--torchx", help="torchx executable (default: the one on PATH)")
    parser.add_argument(
        "--phases", type=int, metavar="N", help="where render's time goes instead (medians of N processes)"
    )
    parser.add_argument(
        "--steps",
        action="store_true",
        help="where render's instructions go instead (callgrind, step by step)",
    )
    args = parser.parse_args()
    byte_compile()
    if args.phases:
        phases(args.phases)
        return 0
    if args.steps:
        steps()
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        argvs = sides(Path(tmp), args.torchx or shutil.which("torchx"))
        if args.paired or not valgrind():
            runs = args.paired or 15
            print(f"paired timed runs: {runs} (median of per-pair ratios)")
            makers: list[Callable[[], float]] = [lambda argv=argv: once(argv) for argv in argvs.values()]  # type: ignore[misc]
            measured = dict(zip(argvs, paired(makers, runs), strict=True))
            ok = report(measured, "s")
        else:
            print("instruction counts (callgrind, PYTHONHASHSEED=0)")
            os.environ["PYTHONHASHSEED"] = "0"
            ENV["PYTHONHASHSEED"] = "0"
            measured = {name: [float(instructions(argv))] for name, argv in argvs.items()}
            ok = report(measured, "instructions")
    print("OK" if ok else "OVER BUDGET")
    return 0


if __name__ == "__main__":
    sys.exit(main())
