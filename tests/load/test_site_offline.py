"""The site file knows the cluster: priorities, label keys, data sources, grants (issue 13)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import run
from runai_spec.errors import PresetError
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.site import RUNAI_PRIORITIES, Site

SHIPPED = PresetRegistry()


def test_no_shipped_preset_names_a_priority_outside_the_dictionary() -> None:
    site = SHIPPED.site()
    assert tuple(site.priorities) == RUNAI_PRIORITIES
    for name in SHIPPED.names():
        assert SHIPPED.get(name).preset.priority in site.priorities, name


def _set_priority(presets_dir: Path, priority: str) -> Path:
    path = presets_dir / "h200-2x8-ib.yaml"
    text = path.read_text(encoding="utf-8")
    old = next(line for line in text.splitlines() if line.startswith("priority:"))
    path.write_text(text.replace(old, f"priority: {priority}"), encoding="utf-8")
    return path


def test_train_against_the_current_dictionary_cannot_be_approved(
    presets_dir: Path, engineer_key: Path
) -> None:
    _set_priority(presets_dir, "train")
    with pytest.raises(PresetError, match="is not a class the cluster serves"):
        PresetRegistry(presets_dir).approve("h200-2x8-ib", engineer_key)
    result = run("presets", "approve", "h200-2x8-ib", "--key", str(engineer_key))
    assert result.exit_code == 2
    assert "'train' is not a class the cluster serves" in result.output
    assert "Traceback" not in result.output


def test_an_already_approved_train_preset_is_refused_at_load(presets_dir: Path, engineer_key: Path) -> None:
    _set_priority(presets_dir, "train")
    registry = PresetRegistry(presets_dir)
    # Approved under an older site whose dictionary still had `train`.
    site = presets_dir / "site.yaml"
    original = site.read_text(encoding="utf-8")
    site.write_text(
        original.replace("priorities: [very-low,", "priorities: [train, very-low,"), encoding="utf-8"
    )
    registry.approve("site", engineer_key)
    registry.approve("h200-2x8-ib", engineer_key)
    site.write_text(original, encoding="utf-8")
    registry = PresetRegistry(presets_dir)
    registry.approve("site", engineer_key)
    with pytest.raises(PresetError) as info:
        PresetRegistry(presets_dir).get("h200-2x8-ib")
    assert info.value.location.field == "priority"
    assert "'train'" in info.value.message


def test_a_dictionary_priority_is_approved(presets_dir: Path, engineer_key: Path) -> None:
    _set_priority(presets_dir, "very-high")
    registry = PresetRegistry(presets_dir)
    registry.approve("h200-2x8-ib", engineer_key)
    assert PresetRegistry(presets_dir).get("h200-2x8-ib").preset.priority == "very-high"


def test_label_keys_override_the_single_fields() -> None:
    site = Site.model_validate(
        {"cluster": "c", "registries": ["r"], "label_keys": {"queue": "kai.scheduler/queue"}}
    )
    assert site.queue_label == "kai.scheduler/queue"
    assert site.node_pool_label == "runai/node-pool"
    default = Site.model_validate({"cluster": "c", "registries": ["r"]})
    assert default.queue_label == "runai/queue"


def test_data_sources_map_to_claims_per_project() -> None:
    site = Site.model_validate(
        {
            "cluster": "c",
            "registries": ["r"],
            "data_sources": {
                "datasets": {"claim": "ds-{source}-{project}", "projects": {"team-a": "team-a-data"}},
                "plain": None,
            },
        }
    )
    assert site.claim_for("datasets", "nlp-lab") == "ds-datasets-nlp-lab"
    assert site.claim_for("datasets", "team-a") == "team-a-data"
    assert site.claim_for("plain", "x") == "plain"
    assert site.data_sources["plain"].read_only
    listed = Site.model_validate({"cluster": "c", "registries": ["r"], "data_sources": ["a"]})
    assert list(listed.data_sources) == ["a"] and listed.claim_for("a", "p") == "a"


def test_the_render_mounts_the_sources_claim(
    presets_dir: Path, write_profile: Callable[..., Path], base_profile: dict[str, Any], engineer_key: Path
) -> None:
    site = presets_dir / "site.yaml"
    text = site.read_text(encoding="utf-8")
    text = (
        text.replace("  - datasets-shared\n", "")
        .replace("data_sources:\n", 'data_sources:\n  datasets-shared:\n    claim: "{project}-datasets"\n')
        .replace("  - checkpoints-scratch\n", "  checkpoints-scratch: {}\n")
    )
    site.write_text(text, encoding="utf-8")
    PresetRegistry(presets_dir).approve("site", engineer_key)
    base_profile["data"] = [{"source": "datasets-shared", "path": "/data"}]
    profile = write_profile(base_profile)
    result = run("render", str(profile))
    assert result.exit_code == 0, result.output
    assert 'claimName: "team-a-datasets"' in result.stdout
    explain = run("explain", str(profile))
    line = next(x for x in explain.output.splitlines() if "team-a-datasets" in x)
    assert "data[0].source" in line
    plan = run("plan", str(profile))
    assert (
        "| data-0 | `/data` | read-only | data source `datasets-shared` (PVC `team-a-datasets` "
        "in the project's namespace) |"
    ) in plan.stdout, plan.stdout


def test_grants_shape_matches_admission() -> None:
    from runai_spec.outputs.admission.documents import granted_projects, site_grants

    grants = site_grants(SHIPPED.site())
    assert granted_projects(grants, "h200-1gpu") == ["*"]
    assert "vision-lab" not in granted_projects(grants, "h200-2x8-ib")
    assert "nlp-lab" in granted_projects(grants, "h200-2x8-ib")


def test_validate_offline_reports_preset_not_granted(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["project"] = "vision-lab"
    result = run("validate", str(write_profile(base_profile)))
    assert result.exit_code == 1
    assert "project vision-lab is not granted preset h200-2x8-ib [preset-not-granted]" in result.output
    assert "advance agreement" in result.output


def test_every_example_project_is_granted_its_preset() -> None:
    site = SHIPPED.site()
    assert site.granted("vision-lab", "h200-1gpu") and site.granted("anyone", "h200-1gpu")
    assert not site.granted("anyone", "h200-8gpu")
    assert dt.date.today() <= dt.date(2027, 12, 31)


@pytest.mark.parametrize(
    ("pattern", "wrong"),
    [
        ("runai-{proj}", "{proj}"),
        ("runai-{0}", "{0}"),
        ("runai-{project!r}", "{project!r}"),
        ("runai-{project:>9}", "{project:>9}"),
        ("runai-{", "is not a pattern"),
        ("runai-}", "is not a pattern"),
    ],
)
def test_a_namespace_pattern_names_only_the_project_as_it_is(pattern: str, wrong: str) -> None:
    """The site's namespace_pattern: a placeholder other than {project}, a conversion, a format
    spec or a lone brace is refused when the site loads, not when a render formats it."""
    from pydantic import ValidationError

    data = SHIPPED.site().model_dump(by_alias=True, exclude_none=True)
    assert (
        Site.model_validate({**data, "namespace_pattern": "runai-{project}"}).namespace_pattern
        == "runai-{project}"
    )
    with pytest.raises(ValidationError, match=re.escape(wrong)):
        Site.model_validate({**data, "namespace_pattern": pattern})
