"""A presets/ copy whose site runs mpi-operator and whose preset allows `launcher: mpi`, signed by
a throwaway key (the shipped presets' key is deleted: docs/engineer.md), and its MPI profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from conftest import ENGINEER, ROOT, allow_signer
from runai_spec.load.registry import PresetRegistry

PRESET = "h200-2x8-ib-mpi"
PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"
# The engineers' MPI settings: OpenMPI's PML and its TCP transport off the IB rails' management
# port, as Horovod's example launcher line has them (transport: theirs, DESIGN 4.8).
MPI = {
    "implementation": "OpenMPI",
    "ssh_auth_mount_path": "/home/mpiuser/.ssh",
    "launcher_creation_policy": "WaitForWorkersReady",
    "mpirun_args": ["--mca", "pml", "ob1", "--mca", "btl", "^openib", "--bind-to", "none"],
    "worker_command": ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"],
}


def mpi_presets(presets: Path, key: Path, operator: str = "v0.6.0", **preset: Any) -> Path:
    """PRESETS (a copy of presets/) with site.yaml's mpi_operator OPERATOR and launchers
    torchrun, accelerate and mpi; a preset PRESET (h200-2x8-ib allowing torchrun and mpi, with
    MPI's settings, PRESET's fields over them) granted to nlp-lab; both approved with KEY."""
    allow_signer(presets, key, ENGINEER)
    site_path = presets / "site.yaml"
    site = yaml.safe_load(site_path.read_text(encoding="utf-8"))
    site |= {"mpi_operator": operator, "launchers": ["torchrun", "accelerate", "mpi"]}
    site["grants"]["nlp-lab"].append(PRESET)
    site_path.write_text(yaml.safe_dump(site, sort_keys=False), encoding="utf-8")
    body = yaml.safe_load((presets / "h200-2x8-ib.yaml").read_text(encoding="utf-8"))
    body |= {"launchers": ["torchrun", "mpi"], "mpi": dict(MPI)} | preset
    body["description"] = "Two pods of eight H200 GPUs over InfiniBand; MPI allowed."
    (presets / f"{PRESET}.yaml").write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    registry = PresetRegistry(presets)
    registry.approve("site", key, expires="2027-12-31")
    registry.approve(PRESET, key, expires="2027-12-31")
    return presets


def mpi_profile(folder: Path, **fields: Any) -> Path:
    """The multi-node example's profile on PRESET with `launcher: mpi` (FIELDS over it)."""
    profile = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    profile |= {"preset": PRESET, "launcher": "mpi", "name": "llm-7b-mpi"} | fields
    path = folder / "profile.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    return path
