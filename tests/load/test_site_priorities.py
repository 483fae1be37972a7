"""The site's priority dictionary: a preset naming a class the cluster does not serve is
refused (the scheduler would silently run the job as low, preemptible)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from runai_spec.errors import PresetError
from runai_spec.load import signing
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.site import RUNAI_PRIORITIES, Site


def test_every_shipped_preset_names_a_priority_of_the_shipped_site() -> None:
    registry = PresetRegistry(ROOT / "presets")
    served = registry.site().priorities
    assert served == list(RUNAI_PRIORITIES)
    for name in registry.names():
        assert registry.get(name).preset.priority in served


def test_the_old_train_priority_is_refused_once_approved(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(re.sub(r"(?m)^priority: .*$", "priority: train", path.read_text()))
    registry = PresetRegistry(presets_dir)
    with pytest.raises(PresetError, match="not a class the cluster serves"):
        registry.approve("h200-8gpu", engineer_key)  # cannot be approved
    # approved anyway (an engineer signed the entry by hand): refused at load, with the line
    # and a hint
    signed = signing.sign_approval(
        "h200-8gpu.yaml",
        hashlib.sha256(path.read_bytes()).hexdigest(),
        engineer_key,
        presets_dir / "allowed_signers",
        approved_at="2026-12-03",
    )
    ledger = yaml.safe_load((presets_dir / "approvals.yaml").read_text())
    ledger["approvals"]["h200-8gpu.yaml"] = {
        "sha256": signed.statement.sha256,
        "approved_by": signed.statement.approver,
        "approved_at": signed.statement.approved_at,
        "signature": signed.signature,
    }
    (presets_dir / "approvals.yaml").write_text(yaml.safe_dump(ledger))
    with pytest.raises(PresetError) as caught:
        PresetRegistry(presets_dir).get("h200-8gpu")
    lines = caught.value.lines()
    assert lines[0].startswith(f"error: {path}:9: priority: 'train' is not a class the cluster serves")
    assert lines[1].startswith("hint: use one of the site's priorities")


def test_a_site_may_declare_its_own_dictionary() -> None:
    site = Site.model_validate(
        {"cluster": "old", "registries": ["r.example"], "priorities": ["train", "build"]}
    )
    assert site.priorities == ["train", "build"]
