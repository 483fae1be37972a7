"""A site of many presets (issue 41): the four shipped layouts, each in several shapes (GPU
model and node pool, CPU and memory, priority, grace period), approved with a throwaway key.
The size test and benchmarks/bench_policy.py generate their policies from it."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
BASES = ("h200-1gpu", "h200-8gpu", "h200-2x8-ib", "h200-elastic-2to4x8-ib")
SIGNER = "bench-engineer@scc.example.org"
# (model, memory_gb, node pool prefix), (cpu per GPU, memory GiB per GPU), priority
GPUS = (("NVIDIA H200", 141, "h200"), ("NVIDIA H100 80GB HBM3", 80, "h100"))
SIZES = ((12, 200), (16, 240), (8, 120))
PRIORITIES = ("low", "medium", "high")


def _key(folder: Path) -> Path:
    key = folder / "engineer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", str(key)], check=True)
    return key


def variant(base: dict[str, object], i: int) -> dict[str, object]:
    """Shape I of the preset BASE (a mapping of its YAML): another GPU pool, size, priority."""
    model, memory_gb, pool = GPUS[i % len(GPUS)]
    cpu, memory = SIZES[(i // len(GPUS)) % len(SIZES)]
    gpus = int(str(base["gpus_per_pod"]))
    out = dict(base)
    out["description"] = f"{base['description']} (shape {i})"
    out["gpu"] = {"model": model, "memory_gb": memory_gb}
    out["cpu"] = str(cpu * gpus)
    out["memory"] = f"{memory * gpus}Gi"
    out["node_pool"] = str(base["node_pool"]).replace("h200", pool)
    out["priority"] = PRIORITIES[i % len(PRIORITIES)]
    out["termination_grace_period_seconds"] = 120 + 30 * (i % 5)
    return out


def many_presets(folder: Path, count: int) -> Path:
    """FOLDER/presets: the shipped presets and COUNT - 4 shapes of them (COUNT presets in
    all), every file approved by a throwaway key listed in its allowed_signers. Returns it."""
    from runai_spec.load.registry import PresetRegistry

    target = folder / "presets"
    shutil.copytree(ROOT / "presets", target)
    key = _key(folder)
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    with (target / "allowed_signers").open("a", encoding="utf-8") as out:
        out.write(f'{SIGNER} namespaces="runai-spec" {kind} {blob}\n')
    names: list[str] = []
    for i in range(count - len(BASES)):
        base_name = BASES[i % len(BASES)]
        base = yaml.safe_load((target / f"{base_name}.yaml").read_text())
        name = f"s{i:02d}-{base_name}"
        (target / f"{name}.yaml").write_text(yaml.safe_dump(variant(base, i // len(BASES)), sort_keys=False))
        names.append(name)
    # each shape is placed on the fabric as its base is (site.yaml's topology)
    site = yaml.safe_load((target / "site.yaml").read_text())
    placement = site["topology"]["placement"]
    bases = {n: n.split("-", 1)[1] for n in names}
    placement.update({n: dict(placement[b]) for n, b in bases.items() if b in placement})
    (target / "site.yaml").write_text(yaml.safe_dump(site, sort_keys=False))
    registry = PresetRegistry(target, today=dt.date(2027, 1, 1))
    for name in ["site", *names]:
        registry.approve(name, key, expires="2027-12-31")
    return target
