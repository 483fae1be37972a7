"""The MPI example's proposal (examples/mpi-multi-node/proposal: its site.yaml and its preset, an
engineer's, unsigned) applied to a presets/ copy and signed by a throwaway key (the shipped
presets' key is deleted: docs/engineer.md), and profiles from the example's."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from conftest import ENGINEER, ROOT, allow_signer
from runai_spec.load.registry import PresetRegistry

EXAMPLE = ROOT / "examples" / "mpi-multi-node"
PROPOSAL = EXAMPLE / "proposal"
PRESET = "h200-2x8-ib-mpi"
PROFILE = EXAMPLE / "profile.yaml"
CRD = ROOT.parent / "shared" / "schemas" / "kubeflow.org_mpijobs.yaml"  # mpi-operator's own
# the proposal's operator line (mpi_presets' OPERATOR replaces its version)
PROPOSED_OPERATOR = "v0.6.0"
OPERATOR_LINE = f"mpi_operator: {PROPOSED_OPERATOR}  # PROPOSED\n"
# The engineers' MPI settings as the proposal has them.
MPI: dict[str, Any] = yaml.safe_load((PROPOSAL / f"{PRESET}.yaml").read_text(encoding="utf-8"))["mpi"]


def mpi_presets(presets: Path, key: Path, operator: str = PROPOSED_OPERATOR, **preset: Any) -> Path:
    """PRESETS (a copy of presets/) with the example's proposal in it, approved with KEY: its
    site.yaml (mpi_operator OPERATOR) and its preset PRESET (PRESET's fields over it, where given;
    else the proposal's text as it is, as an engineer would sign it)."""
    allow_signer(presets, key, ENGINEER)
    site = (PROPOSAL / "site.yaml").read_text(encoding="utf-8")
    assert OPERATOR_LINE in site
    site = site.replace(OPERATOR_LINE, OPERATOR_LINE.replace(PROPOSED_OPERATOR, operator))
    (presets / "site.yaml").write_text(site, encoding="utf-8")
    target = presets / f"{PRESET}.yaml"
    shutil.copyfile(PROPOSAL / target.name, target)
    if preset:
        body = yaml.safe_load(target.read_text(encoding="utf-8")) | preset
        target.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    registry = PresetRegistry(presets)
    registry.approve("site", key, expires="2027-12-31")
    registry.approve(PRESET, key, expires="2027-12-31")
    return presets


def mpi_profile(folder: Path, **fields: Any) -> Path:
    """The MPI example's profile (FIELDS over it) at FOLDER/profile.yaml."""
    profile = yaml.safe_load(PROFILE.read_text(encoding="utf-8")) | fields
    path = folder / "profile.yaml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    return path


@cache
def mpijob_schema() -> dict[str, Any]:
    """The published MPIJob CRD's v2beta1 schema (CRD; its header says its source and version)."""
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8").split("\n---\n", 1)[1])
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v2beta1")
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema
