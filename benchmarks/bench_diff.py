"""Time `runai-spec diff` of 1,000 profiles against their committed manifests as one whole
process (DESIGN.md section 8: <= 1 s), side by side with the import floor; print medians and
ratios."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["single-gpu", "single-node", "multi-node", "elastic"]
EXE = str(Path(sys.executable).parent / "runai-spec")
FLOOR = [sys.executable, "-c", "import typer, pydantic, jinja2, yaml"]
BUDGET_S = 1.0


def generate(folder: Path, count: int) -> list[str]:
    """count profiles (the four examples under distinct names), and their rendered goldens."""
    profiles = folder / "profiles"
    manifests = folder / "manifests"
    profiles.mkdir()
    manifests.mkdir()
    texts = [(ROOT / "examples" / e / "profile.yaml").read_text() for e in EXAMPLES]
    paths = []
    for i in range(count):
        text = texts[i % len(texts)]
        text = re.sub(r"^name: (\S+)", lambda m, i=i: f"name: b{i}-{m.group(1)}"[:40], text,
                      count=1, flags=re.M)
        path = profiles / f"p{i:04d}.yaml"
        path.write_text(text)
        paths.append(str(path))
    subprocess.run([EXE, "render", *paths, "--out", str(manifests)], check=True,
                   capture_output=True)
    return paths


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    res = subprocess.run(argv, capture_output=True)
    if res.returncode not in (0,):
        raise SystemExit(f"{argv[:2]} exited {res.returncode}: {res.stderr.decode()[-500:]}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = generate(Path(tmp), opts.count)
        diff = [EXE, "diff", *paths, "--against", str(Path(tmp) / "manifests")]
        once(diff)
        once(FLOOR)
        diffs, floors = [], []
        for _ in range(opts.runs):
            diffs.append(once(diff))
            floors.append(once(FLOOR))
    d, f = statistics.median(diffs), statistics.median(floors)
    print(f"diff of {opts.count} profiles: median {d:.3f} s over {opts.runs} runs "
          f"(budget {BUDGET_S:.1f} s, {d / BUDGET_S:.2f} x budget)")
    print(f"import floor: median {f:.3f} s; diff / floor = {d / f:.2f}")
    print("OK" if d <= BUDGET_S else "OVER BUDGET")


if __name__ == "__main__":
    main()
