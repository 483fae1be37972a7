"""Every script in benchmarks/ runs, with a tiny count, and prints its ratio lines: a benchmark
that rots fails here. No timing is asserted (the figures are read in benchmarks/README.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT

BENCH = ROOT / "benchmarks"
# each script, its tiny run, and the lines it must print
CASES = {
    "bench_render.py": (
        ["--paired", "1"],
        [
            r"^ratio render / floor: [\d.]+ x.*budget <= 1\.6",
            r"^ratio --version / render: [\d.]+ x.*budget <= 0\.5",
            r"^ratio --help / render: [\d.]+ x",
        ],
    ),
    "bench_diff.py": (
        ["--count", "4", "--runs", "1"],
        [
            rf"^{name} of 4 profiles: .* above start-up -?[\d.]+ s .* ratio [\d.]+ x"
            for name in ("validate", "render -d", "diff --against")
        ],
    ),
    "bench_stream.py": (
        ["--count", "20"],
        [
            *(
                rf"^  this: {name} \({via}\): time x[\d.]+ for x10 profiles .*, peak memory x[\d.]+"
                for name in ("render -d", "validate", "diff")
                for via in ("argv", "list")
            ),
            r"^the interpreter alone with 20 arguments: [\d.]+ MB",
        ],
    ),
    "bench_policy.py": (
        ["--counts", "4,8", "--rounds", "1"],
        [r"^  4 presets: policy +[\d,]+ bytes", r"^bytes a preset adds \(4 -> 8\): [\d,]+ \(budget"],
    ),
    "bench_policy_cost.py": (
        ["--renders", "1"],
        [r"^ratio per-expression limit / costliest: [\d.]+ x", r"^ratio evaluation budget / costliest"],
    ),
    "bench_signatures.py": (
        ["--rounds", "2"],
        [r"^warm: .* paired ratio median [\d.]+", r"^cold: .* paired ratio", r"^render: .* paired ratio"],
    ),
}


def test_every_benchmark_script_is_covered() -> None:
    assert sorted(p.name for p in BENCH.glob("bench_*.py")) == sorted(CASES)


# cel-python compiles the whole policy before its first evaluation (about 25 CPU s for the shipped
# presets): the cost benchmark's line check runs with the long tests, not in CI's set; so do the two
# that start the CLI dozens of times (about 10 CPU s: issue 37, CI's time), whose tiny counts CI
# reads through bench_render's same start-up measure
LONG = {"bench_policy_cost.py", "bench_stream.py", "bench_diff.py"}


@pytest.mark.benchmark
@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.long) if s in LONG else s for s in sorted(CASES)]
)
def test_benchmark_prints_its_ratio_lines(script: str) -> None:
    args, patterns = CASES[script]
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for pattern in patterns:
        assert re.search(pattern, done.stdout, re.M), f"{pattern!r} not in:\n{done.stdout}"
