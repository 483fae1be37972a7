"""`presets policy` for a site of many presets (issue 41 item 1): the size of the generated
policy (JSON, as the API server stores it) and of its parameters, and the time to generate
them, for the shipped presets and for N presets (tests/outputs/admission/many_presets.py: the
four shipped layouts in several shapes, signed by a throwaway key). `--mpi` adds two rows:
the shipped presets with the MPI preset of tests/mpi_presets.py (torchrun and mpi, signed by a
throwaway key), and that preset alone (its MPIJob checks are a family of their own).

Paired with another generator: `--src DIR` runs the same measure with DIR on the import path
(e.g. `git archive 2f8bad1 src | tar -x -C /tmp/today` and `--src /tmp/today/src`), whose
size refusal is lifted so that its size can be read."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mpi_folders(scratch: Path) -> dict[str, Path]:
    """The shipped presets with the MPI preset, and the MPI preset alone (with the site)."""
    import shutil

    from conftest import make_key
    from mpi_presets import PRESET, mpi_presets

    out = {}
    for name in ("shipped+mpi", "mpi alone"):
        folder = scratch / name.replace(" ", "-")
        shutil.copytree(ROOT / "presets", folder / "presets")
        out[name] = mpi_presets(folder / "presets", make_key(folder, "engineer"))
        for other in out[name].glob("h200-*.yaml"):
            if name == "mpi alone" and other.stem != PRESET:
                other.unlink()
    return out


def measure(src: Path, counts: list[int], rounds: int, mpi: bool = False) -> None:
    sys.path[:0] = [str(src), str(ROOT / "tests")]
    from outputs.admission.many_presets import many_presets
    from runai_spec.load.registry import PresetRegistry
    from runai_spec.outputs.admission import documents

    documents.MAX_POLICY_BYTES = 10**12  # read the size; the refusal is the tool's, not ours
    sizes = {}
    with tempfile.TemporaryDirectory() as scratch:
        folders: dict[int | str, Path] = {
            count: ROOT / "presets" if count == 4 else many_presets(Path(scratch) / str(count), count)
            for count in counts
        }
        if mpi:
            folders.update(_mpi_folders(Path(scratch)))
        for count, folder in folders.items():
            times, cpu = [], []
            for _ in range(rounds):
                start, started = time.perf_counter(), time.process_time()
                docs = documents.policy_documents(PresetRegistry(folder, today=dt.date(2027, 1, 1)))
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - started)
            policy, params = len(json.dumps(docs[0])), len(json.dumps(docs[-1]))
            if isinstance(count, int):
                sizes[count] = policy
            print(
                f"{count:>3} presets: policy {policy:>10,} bytes, parameters {params:>9,} bytes, "
                f"generated in {statistics.median(times):.2f} s, {statistics.median(cpu):.2f} s of CPU "
                f"(median of {rounds})"
            )
    first, last = min(sizes), max(sizes)
    if last > first:
        added = (sizes[last] - sizes[first]) / (last - first)
        print(f"bytes a preset adds ({first} -> {last}): {added:,.0f} (budget <= 10,000, issue 41)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the generator's src folder")
    parser.add_argument("--counts", default="4,8,50", help="preset counts (4: the shipped presets)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mpi", action="store_true", help="also the shipped presets with an MPI preset")
    args = parser.parse_args()
    measure(args.src, [int(c) for c in args.counts.split(",")], args.rounds, args.mpi)


if __name__ == "__main__":
    main()
