"""`validate`, `render -d` and `diff --against` of COUNT profiles in one call (issue 29: 1,000
profiles, <= 1 s each above start-up), each paired with the start-up it pays anyway (`render`
of one profile): the sides alternate, and the figures are medians of the per-pair
differences (seconds above start-up) and ratios. With --instructions, callgrind's instruction
counts instead (the machine's load does not move them; PYTHONHASHSEED=0): each command's count
above start-up, per profile, and as a multiple of start-up."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from measure import ENV, ROOT, byte_compile, generate, instructions, once, paired, ratio

BUDGET_S = 1.0  # above start-up, per command, at 1,000 profiles


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--instructions", action="store_true", help="callgrind instruction counts, not seconds")
    opts = ap.parse_args()
    cli = [sys.executable, "-m", "runai_spec"]
    byte_compile()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        paths = generate(Path(tmp) / "profiles", opts.count)
        committed, out = Path(tmp) / "committed", Path(tmp) / "out"
        once([*cli, "render", *paths, "-d", str(committed)])
        start_up = [*cli, "render", str(ROOT / "examples" / "multi-node" / "profile.yaml")]
        commands = {
            "validate": [*cli, "validate", *paths],
            "render -d": [*cli, "render", *paths, "-d", str(out)],
            "diff --against": [*cli, "diff", *paths, "--against", str(committed)],
        }
        if opts.instructions:
            ENV["PYTHONHASHSEED"] = "0"
            counted(commands, start_up, opts.count)
            return 0
        for name, argv in commands.items():
            seen, base = paired(
                [lambda argv=argv: once(argv), lambda: once(start_up)],  # type: ignore[misc]
                opts.runs,
            )
            above = statistics.median(a - b for a, b in zip(seen, base, strict=True))
            within = above <= BUDGET_S * max(1.0, opts.count / 1000)  # linear past 1,000
            print(
                f"{name} of {opts.count} profiles: median {statistics.median(seen):.3f} s, "
                f"start-up (render of one) {statistics.median(base):.3f} s; above start-up "
                f"{above:.3f} s (budget {BUDGET_S:.1f} s at 1,000: "
                f"{'ok' if within else 'OVER'}), "
                f"ratio {ratio(seen, base):.2f} x start-up, {opts.runs} pairs"
            )
            ok = ok and within
    print("OK" if ok else "OVER BUDGET")
    return 0


def counted(commands: dict[str, list[str]], start_up: list[str], count: int) -> None:
    """Each command's instructions above start-up (render of one profile), one run each."""
    base = instructions(start_up)
    print(f"start-up (render of one profile): {base:,} instructions")
    for name, argv in commands.items():
        above = instructions(argv) - base
        print(
            f"{name} of {count} profiles: {above:,} instructions above start-up, "
            f"{above / count / 1e6:.2f} M a profile, {above / base:.2f} x start-up"
        )


if __name__ == "__main__":
    sys.exit(main())
