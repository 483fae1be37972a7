"""Peak memory and time of `render -d`, `validate` and `diff --against` over many profiles in
one call (DESIGN.md section 8: 10,000 profiles with peak memory <= 150 MB, time linear in
their number): each command at --count and at a tenth of it, side by side with a baseline
checkout of runai-spec when --baseline names its src/ folder; print the ratios."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["single-gpu", "single-node", "multi-node", "elastic"]
BUDGET_MB = 150.0


def generate(folder: Path, count: int) -> list[str]:
    """count profiles: the four examples under distinct names."""
    folder.mkdir(parents=True)
    texts = [(ROOT / "examples" / e / "profile.yaml").read_text() for e in EXAMPLES]
    paths = []
    for i in range(count):
        text = re.sub(r"^name: (\S+)", lambda m, i=i: f"name: b{i}-{m.group(1)}"[:40],
                      texts[i % len(texts)], count=1, flags=re.M)
        path = folder / f"p{i:05d}.yaml"
        path.write_text(text)
        paths.append(str(path))
    return paths


def measure(argv: list[str], src: Path) -> tuple[float, float]:
    """(seconds, peak resident MB) of one whole process."""
    env = dict(os.environ, PYTHONPATH=str(src))
    start = time.perf_counter()
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        assert proc.stderr is not None
        tail = proc.stderr.read()[-400:]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} exited {proc.returncode}: {tail.decode()}")
    return seconds, usage.ru_maxrss / 1024  # KiB on Linux


def commands(paths: list[str], out: Path, committed: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "runai_spec"]
    return {"render -d": [*cli, "render", *paths, "-d", str(out)],
            "validate": [*cli, "validate", *paths],
            "diff": [*cli, "diff", *paths, "--against", str(committed)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--baseline", type=Path, help="src/ folder of another runai-spec "
                        "checkout, measured side by side (e.g. ../main/src)")
    args = parser.parse_args()
    sources = {"this": ROOT / "src", **({"baseline": args.baseline} if args.baseline else {})}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        counts = (args.count // 10, args.count)
        for count in counts:
            generate(Path(tmp) / f"p{count}", count)
        # each count diffs against its own committed folder: a committed file without its
        # profile is a stale file, which diff reports (exit 1)
        for count in counts:
            committed = Path(tmp) / f"committed-{count}"
            paths = sorted(str(p) for p in (Path(tmp) / f"p{count}").glob("*.yaml"))
            subprocess.run(commands(paths, committed, committed)["render -d"], check=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), capture_output=True)
        print(f"{'command':10} {'source':9} {'profiles':>8} {'seconds':>8} {'peak MB':>8}")
        for name in ("render -d", "validate", "diff"):
            results: dict[str, list[tuple[float, float]]] = {}
            for count in counts:
                paths = sorted(str(p) for p in (Path(tmp) / f"p{count}").glob("*.yaml"))
                for label, src in sources.items():  # alternated: background load hits both
                    argv = commands(paths, Path(tmp) / f"out-{label}-{count}",
                                    Path(tmp) / f"committed-{count}")[name]
                    seconds, peak = measure(argv, src)
                    results.setdefault(label, []).append((seconds, peak))
                    print(f"{name:10} {label:9} {count:8d} {seconds:8.2f} {peak:8.1f}")
            for label, ((t1, m1), (t2, m2)) in results.items():
                print(f"  {label}: time x{t2 / t1:.1f} for x10 profiles (linear or better: <= ~10), "
                      f"peak memory x{m2 / m1:.2f} (flat: ~1), {m2:.0f} MB of {BUDGET_MB:.0f}")
            if "baseline" in results:
                (t, m), (bt, bm) = results["this"][-1], results["baseline"][-1]
                print(f"  this / baseline at {args.count}: time {t / bt:.2f}, memory {m / bm:.2f}")
            ok = ok and results["this"][-1][1] <= BUDGET_MB
    print("OK" if ok else "OVER BUDGET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
