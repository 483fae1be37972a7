"""Verify the shipped presets' approvals (site + every preset: what `presets verify` checks)
in-process (signing.verify_approval, cryptography) and through `ssh-keygen -Y verify` (one
process a signature, as runai-spec did before issue 29 item 3), alternated round by round;
print each side's median and the median of the paired ratios in-process / ssh-keygen.

Three measures: `warm`, both in this process after a first call (what a long run pays per
registry load); `cold`, a fresh interpreter per side (import runai_spec.load.signing, read the
ledger, verify all: what `presets verify` pays, cryptography's import included); `render`,
the same for the two approvals one `render` checks (site.yaml and one preset)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "presets"

SETUP = f"""
import sys, yaml
sys.path.insert(0, {str(ROOT / "src")!r})
from pathlib import Path
from runai_spec.load import signing
ledger = yaml.safe_load(Path({str(PRESETS / "approvals.yaml")!r}).read_text())["approvals"]
signed = [signing.SignedApproval(signing.Statement(name, e["sha256"], e["approved_by"],
          e["approved_at"], e.get("expires")), e["signature"]) for name, e in ledger.items()]
signers = Path({str(PRESETS / "allowed_signers")!r})
"""

SUBPROCESS = """
import os, subprocess, tempfile
def by_ssh_keygen(approval):
    st = approval.statement
    with tempfile.TemporaryDirectory() as folder:
        sig = os.path.join(folder, "statement.sig")
        with open(sig, "w") as out:
            out.write(approval.signature)
        done = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I",
                               st.approver, "-n", signing.NAMESPACE, "-s", sig,
                               "-Overify-time=" + st.approved_at.replace("-", "")],
                              input=st.text(), capture_output=True, text=True,
                              env={**os.environ, "LC_ALL": "C", "TZ": "UTC"})
    assert done.returncode == 0, done.stderr
"""

IN_PROCESS_RUN = "for a in signed: signing.verify_approval(a, signers)\n"
SUBPROCESS_RUN = "for a in signed: by_ssh_keygen(a)\n"
RENDER_ONLY = "signed = [a for a in signed if a.statement.file in ('site.yaml', 'h200-8gpu.yaml')]\n"


def cold(code: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "0"}
    )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=30)
    opts = ap.parse_args()
    space: dict[str, object] = {}
    exec(SETUP + SUBPROCESS, space)  # noqa: S102 - the benchmark's own code
    verify_all = lambda: exec(IN_PROCESS_RUN, space)  # noqa: E731
    keygen_all = lambda: exec(SUBPROCESS_RUN, space)  # noqa: E731
    verify_all()
    keygen_all()
    count = len(space["signed"])  # type: ignore[arg-type]
    for name, ours, theirs, floor in (
        ("warm", verify_all, keygen_all, None),
        (
            "cold",
            lambda: cold(SETUP + IN_PROCESS_RUN),
            lambda: cold(SETUP + SUBPROCESS + SUBPROCESS_RUN),
            lambda: cold(SETUP),
        ),
        (
            "render",
            lambda: cold(SETUP + RENDER_ONLY + IN_PROCESS_RUN),
            lambda: cold(SETUP + RENDER_ONLY + SUBPROCESS + SUBPROCESS_RUN),
            lambda: cold(SETUP),
        ),
    ):
        cold(SETUP)  # byte-compile once, as an install does
        times: dict[str, list[float]] = {"ours": [], "theirs": [], "floor": []}
        ratios, above = [], []
        for i in range(opts.rounds):
            sides = [("ours", ours), ("theirs", theirs)] + ([("floor", floor)] if floor else [])
            if i % 2:
                sides.reverse()
            got = {}
            for label, side in sides:
                start = time.perf_counter()
                side()
                got[label] = time.perf_counter() - start
                times[label].append(got[label])
            ratios.append(got["ours"] / got["theirs"])
            if floor:
                above.append((got["ours"] - got["floor"]) / (got["theirs"] - got["floor"]))
        shown = 2 if name == "render" else count
        median = {label: statistics.median(t) * 1000 for label, t in times.items() if t}
        line = (
            f"{name}: {shown} approvals, {opts.rounds} rounds: in-process "
            f"{median['ours']:.1f} ms, ssh-keygen {median['theirs']:.1f} ms, paired ratio "
            f"median {statistics.median(ratios):.3f} (quartiles "
            f"{statistics.quantiles(ratios, n=4)[0]:.3f}-"
            f"{statistics.quantiles(ratios, n=4)[2]:.3f})"
        )
        if floor:
            line += (
                f"; floor (interpreter, yaml, runai_spec.load.signing, the ledger) "
                f"{median['floor']:.1f} ms, above it paired ratio median "
                f"{statistics.median(above):.3f}"
            )
        print(line)


if __name__ == "__main__":
    main()
