"""What the benchmarks share: paired ratios of whole processes, instruction counts (callgrind),
byte-compiling runai_spec, and the example profiles multiplied under distinct names."""

from __future__ import annotations

import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["single-gpu", "single-node", "multi-node", "elastic"]
# Bytecode is read, as from an installed package (this environment sets
# PYTHONDONTWRITEBYTECODE=1; byte_compile writes it once).
ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "0"}


def byte_compile() -> None:
    """Write runai_spec's bytecode, as `pip install` does: the floor's packages have theirs in
    site-packages, and a checkout would otherwise time the compiler, not the command."""
    found = subprocess.run(
        [sys.executable, "-c", "import runai_spec; print(runai_spec.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    compileall.compile_dir(str(Path(found).parent), quiet=1)


def once(argv: Sequence[str], ok: Sequence[int] = (0,)) -> float:
    """Seconds of one whole process; exit codes other than OK stop the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(list(argv), capture_output=True, env=ENV)
    seconds = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(
            f"{' '.join(argv[:3])} exited {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}"
        )
    return seconds


def paired(sides: Sequence[Callable[[], float]], runs: int) -> list[list[float]]:
    """Each side's seconds, run by run: the sides alternate, their order reversed every other
    run, so that a noisy stretch of the machine hits the sides of one pair alike."""
    for side in sides:
        side()  # warm the file cache
    times: list[list[float]] = [[] for _ in sides]
    for i in range(runs):
        order = list(range(len(sides)))
        if i % 2:
            order.reverse()
        for k in order:
            times[k].append(sides[k]())
    return times


def ratio(numer: list[float], denom: list[float]) -> float:
    """The median of the per-pair ratios (not a ratio of medians)."""
    return statistics.median(a / b for a, b in zip(numer, denom, strict=True))


def spread(numer: list[float], denom: list[float]) -> str:
    ratios = sorted(a / b for a, b in zip(numer, denom, strict=True))
    return f"{ratios[0]:.2f}-{ratios[-1]:.2f}"


def valgrind() -> str | None:
    return shutil.which("valgrind")


def instructions(argv: Sequence[str], ok: Sequence[int] = (0,)) -> int:
    """Instructions one whole process executes (callgrind): the machine's load does not move it."""
    tool = valgrind()
    if tool is None:
        raise SystemExit("valgrind is not installed")
    done = subprocess.run(
        [tool, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        capture_output=True,
        text=True,
        env=ENV,
    )
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(argv[:3])} exited {done.returncode}: {done.stderr[-500:]}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count: {done.stderr[-500:]}")
    return int(found.group(1))


def generate(folder: Path, count: int) -> list[str]:
    """COUNT profiles: the four examples in turn under distinct names."""
    folder.mkdir(parents=True)
    texts = [(ROOT / "examples" / e / "profile.yaml").read_text() for e in EXAMPLES]
    paths = []
    for i in range(count):
        text = re.sub(
            r"^name: (\S+)",
            lambda m, i=i: f"name: b{i}-{m.group(1)}"[:40],
            texts[i % len(texts)],
            count=1,
            flags=re.M,
        )
        path = folder / f"p{i:06d}.yaml"
        path.write_text(text)
        paths.append(str(path))
    return paths
