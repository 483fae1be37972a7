"""The registry fails closed; approve/verify/list/show behave for engineers and CI."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import pytest

from conftest import ENGINEER, run
from runai_spec.errors import PresetError
from runai_spec.load.registry import PresetRegistry


def test_shipped_presets_all_verify() -> None:
    result = run("presets", "verify")
    assert result.exit_code == 0, result.output
    for name in ("h200-1gpu", "h200-8gpu", "h200-2x8-ib", "h200-elastic-2to4x8-ib", "site"):
        assert f"ok: {name}.yaml" in result.stdout


def test_required_presets_have_the_agreed_shapes() -> None:
    registry = PresetRegistry()
    shapes = {name: registry.get(name).preset for name in registry.names()}
    assert (shapes["h200-1gpu"].layout, shapes["h200-1gpu"].gpus_per_pod) == ("single-gpu", 1)
    assert (shapes["h200-8gpu"].layout, shapes["h200-8gpu"].gpus_per_pod) == ("single-node", 8)
    ib = shapes["h200-2x8-ib"]
    assert (ib.layout, ib.nodes, ib.gpus_per_pod, ib.elastic) == ("multi-node", 2, 8, None)
    assert ib.network.annotations and ib.network.resources and "IPC_LOCK" in ib.network.capabilities
    elastic = shapes["h200-elastic-2to4x8-ib"].elastic
    assert elastic is not None and (elastic.min, elastic.max) == (2, 4)
    assert all(p.gpu.model == "NVIDIA H200" and p.gpu.memory_gb == 141 for p in shapes.values())


def refused(registry: PresetRegistry, name: str) -> str:
    with pytest.raises(PresetError) as info:
        registry.get(name)
    return str(info.value)


def test_edit_after_approval_is_refused(presets_dir: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text() + "\n")
    assert "edited since it was approved" in refused(PresetRegistry(presets_dir), "h200-8gpu")


def test_file_missing_from_ledger_is_refused(presets_dir: Path) -> None:
    (presets_dir / "new-one.yaml").write_text((presets_dir / "h200-8gpu.yaml").read_text())
    assert "not recorded in the approvals ledger" in refused(PresetRegistry(presets_dir), "new-one")


def test_expired_approval_is_refused(presets_dir: Path) -> None:
    later = PresetRegistry(presets_dir, today=dt.date(2030, 1, 1))
    assert "approval expired on 2027-12-31" in refused(later, "h200-1gpu")


def test_symlinked_preset_is_refused(presets_dir: Path) -> None:
    target = presets_dir / "h200-8gpu.yaml"
    link = presets_dir / "h200-8gpu-link.yaml"
    os.symlink(target, link)
    assert "symlink" in refused(PresetRegistry(presets_dir), "h200-8gpu-link")


@pytest.mark.parametrize("name", ["../etc/passwd", "H200", "site", "approvals", "a/b", "x" * 70])
def test_names_that_are_not_plain_labels_are_refused(presets_dir: Path, name: str) -> None:
    assert "is not a preset name" in refused(PresetRegistry(presets_dir), name)


def test_edited_site_file_refuses_everything(presets_dir: Path) -> None:
    site = presets_dir / "site.yaml"
    site.write_text(site.read_text().replace("nvcr.io", "docker.io"))
    with pytest.raises(PresetError, match="edited since it was approved"):
        PresetRegistry(presets_dir).site()


def test_the_approved_site_carries_the_ledger_entry_that_vouches_for_it() -> None:
    registry = PresetRegistry()
    approved = registry.approved_site()
    assert approved.site is registry.site()
    assert approved.approval == registry.ledger().approvals["site.yaml"]
    assert approved.sha256 == hashlib.sha256((registry.root / "site.yaml").read_bytes()).hexdigest()
    show = run("presets", "show", "site")
    assert show.exit_code == 0, show.output
    assert f'sha256: "{approved.sha256}"' in show.stdout


def test_approve_then_verify_round_trip(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("backoff_limit: 3", "backoff_limit: 5"))
    verify = run("presets", "verify", "--dir", str(presets_dir))
    assert verify.exit_code == 1
    assert "h200-8gpu.yaml: sha256: edited since it was approved" in verify.stderr
    approve = run(
        "presets",
        "approve",
        "h200-8gpu",
        "--key",
        str(engineer_key),
        "--expires",
        "2027-06-30",
        "--dir",
        str(presets_dir),
    )
    assert approve.exit_code == 0, approve.output
    assert run("presets", "verify", "--dir", str(presets_dir)).exit_code == 0
    record = PresetRegistry(presets_dir).get("h200-8gpu").approval
    assert (record.approved_by, record.expires) == (ENGINEER, "2027-06-30")  # the key's principal


def test_approve_refuses_an_invalid_preset(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("nodes: 1", "nodes: 3"))
    result = run("presets", "approve", "h200-8gpu", "--key", str(engineer_key), "--dir", str(presets_dir))
    assert result.exit_code == 2
    assert "layout single-node needs nodes: 1" in result.stderr


def test_every_schema_problem_of_a_preset_is_reported(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    text = path.read_text().replace("gpus_per_pod: 8", "gpus_per_pod: 0")
    path.write_text(text.replace("preemptible: true", "preemptible: maybe") + "colour: blue\n")
    result = run("presets", "approve", "h200-8gpu", "--key", str(engineer_key), "--dir", str(presets_dir))
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert [e.split(": ")[2] for e in errors] == ["gpus_per_pod", "preemptible", "colour"]
    assert result.stderr.count("hint:") == 1


def test_verify_reports_ledger_entries_without_files(presets_dir: Path) -> None:
    (presets_dir / "h200-1gpu.yaml").unlink()
    result = run("presets", "verify", "--dir", str(presets_dir))
    assert result.exit_code == 1
    assert "approvals.h200-1gpu.yaml: ledger entry for a file that does not exist" in result.stderr


def test_list_and_show() -> None:
    listing = run("presets", "list")
    assert listing.exit_code == 0
    assert "h200-2x8-ib" in listing.stdout and "non-preemptible" in listing.stdout
    show = run("presets", "show", "h200-2x8-ib")
    assert show.exit_code == 0
    assert 'approved_by: "scc-ai-engineers"' in show.stdout
    assert "nvidia.com/rdma_ib: 8" in show.stdout
    missing = run("presets", "show", "h200-8gpus")
    assert missing.exit_code == 2 and "did you mean 'h200-8gpu'?" in missing.stderr
