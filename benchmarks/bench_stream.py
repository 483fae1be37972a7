"""Peak memory and time of `render -d`, `validate` and `diff --against` over many profiles in
one call (issue 29: 100,000 profiles with peak memory <= 100 MB, time linear in their number):
each command at --count and at a tenth of it, side by side with a baseline checkout of
runai-spec when --baseline names its src/ folder; print the ratios. The profiles are passed
by their names relative to their folder: on the command line (`argv`, with a stack limit that
lets 100,000 of them through exec: ARG_MAX is a quarter of it), and with `@FILE`, a list of
them (`list`). The interpreter alone, given the same command line, is measured too: what a
long command line costs before any of runai-spec runs."""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import ROOT, byte_compile, generate

BUDGET_MB = 100.0
STACK = 512 << 20  # bytes: ARG_MAX 128 MiB


def big_stack() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(
        resource.RLIMIT_STACK, (STACK if hard == resource.RLIM_INFINITY else min(STACK, hard), hard)
    )


def measure(argv: list[str], src: Path, cwd: Path) -> tuple[float, float]:
    """(seconds, peak resident MB) of one whole process."""
    env = dict(os.environ, PYTHONPATH=str(src))
    start = time.perf_counter()
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd, preexec_fn=big_stack
    ) as proc:
        assert proc.stderr is not None
        tail = proc.stderr.read()[-400:]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} exited {proc.returncode}: {tail.decode()}")
    return seconds, usage.ru_maxrss / 1024  # KiB on Linux


def commands(paths: list[str], out: Path, committed: Path) -> dict[str, list[str]]:
    """The three commands over PATHS (profile names, or one `@FILE`)."""
    cli = [sys.executable, "-m", "runai_spec"]
    return {
        "render -d": [*cli, "render", *paths, "-d", str(out)],
        "validate": [*cli, "validate", *paths],
        "diff": [*cli, "diff", *paths, "--against", str(committed)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="src/ folder of another runai-spec checkout, measured side by side (e.g. ../main/src)",
    )
    parser.add_argument("--via", choices=("argv", "list", "both"), default="both")
    args = parser.parse_args()
    sources = {"this": ROOT / "src", **({"baseline": args.baseline} if args.baseline else {})}
    vias = ("argv", "list") if args.via == "both" else (args.via,)
    byte_compile()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        counts = (args.count // 10, args.count)
        names = {count: [Path(p).name for p in generate(Path(tmp) / f"p{count}", count)] for count in counts}
        for count in counts:
            (Path(tmp) / f"p{count}.list").write_text("".join(f"{n}\n" for n in names[count]))
        given = {
            (via, count): names[count] if via == "argv" else [f"@{Path(tmp) / f'p{count}.list'}"]
            for via in vias
            for count in counts
        }
        # each count diffs against its own committed folder (a committed file without its
        # profile is a stale file, which diff reports: exit 1), rendered by the same source
        # (another checkout's presets and site file render other digests)
        for count in counts:
            for label, src in sources.items():
                committed = Path(tmp) / f"committed-{label}-{count}"
                measure(
                    commands(names[count], committed, committed)["render -d"], src, Path(tmp) / f"p{count}"
                )
        _, floor = measure([sys.executable, "-c", "pass", *names[args.count]], ROOT, Path(tmp))
        print(f"the interpreter alone with {args.count} arguments: {floor:.1f} MB")
        print(f"{'command':10} {'via':5} {'source':9} {'profiles':>8} {'seconds':>8} {'peak MB':>8}")
        for name in ("render -d", "validate", "diff"):
            for via in vias:
                ok = _measure_command(name, via, given, sources, tmp, counts) and ok
    print("OK" if ok else "OVER BUDGET")
    return 0


def _measure_command(
    name: str,
    via: str,
    given: dict[tuple[str, int], list[str]],
    sources: dict[str, Path],
    tmp: str,
    counts: tuple[int, int],
) -> bool:
    """NAME at both counts, each source in turn; its lines; whether the budget holds."""
    results: dict[str, list[tuple[float, float]]] = {}
    for count in counts:
        for label, src in sources.items():  # alternated: background load hits both
            if via == "list" and label == "baseline" and not _reads_lists(src):
                continue
            argv = commands(
                given[via, count],
                Path(tmp) / f"out-{label}-{count}",
                Path(tmp) / f"committed-{label}-{count}",
            )[name]
            seconds, peak = measure(argv, src, Path(tmp) / f"p{count}")
            results.setdefault(label, []).append((seconds, peak))
            print(f"{name:10} {via:5} {label:9} {count:8d} {seconds:8.2f} {peak:8.1f}")
    for label, ((t1, m1), (t2, m2)) in results.items():
        print(
            f"  {label}: {name} ({via}): time x{t2 / t1:.1f} for x10 profiles (linear or better: "
            f"<= ~10), peak memory x{m2 / m1:.2f} (flat: ~1), {m2:.0f} MB of {BUDGET_MB:.0f}"
        )
    if "baseline" in results:
        (t, m), (bt, bm) = results["this"][-1], results["baseline"][-1]
        print(f"  this / baseline at {counts[1]} ({via}): time {t / bt:.2f}, memory {m / bm:.2f}")
    return results["this"][-1][1] <= BUDGET_MB


def _reads_lists(src: Path) -> bool:
    """Whether the checkout at SRC reads `@FILE` (older ones take it for a profile's name)."""
    return "_listed" in (src / "runai_spec" / "pipeline" / "stream.py").read_text()


if __name__ == "__main__":
    sys.exit(main())
