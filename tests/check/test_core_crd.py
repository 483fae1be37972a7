"""`validate --crd`: the cluster's own CRD, derived from the file at every call (no cache)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CRD, ROOT, run, upstream_crd
from runai_spec.check.crd import crd_findings, load_crd_schemas
from runai_spec.errors import InputError
from runai_spec.render.manifests import parse


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def job(example: str) -> dict[str, object]:
    (obj,) = parse((ROOT / "examples" / example / "manifest.yaml").read_text(), example)
    return obj


def test_examples_pass_the_upstream_crd_and_nothing_is_cached(cache_home: Path) -> None:
    schemas = load_crd_schemas(CRD)
    assert "v1" in schemas
    assert not cache_home.exists()  # nothing written outside the repository
    assert load_crd_schemas(CRD) == schemas
    for example in ("single-gpu", "multi-node", "elastic"):
        assert crd_findings([job(example)], schemas, "PyTorchJob", example) == []


def test_a_violation_becomes_a_finding_with_its_path(cache_home: Path) -> None:
    obj = job("multi-node")
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "1"  # type: ignore[index]
    (finding,) = crd_findings([obj], load_crd_schemas(CRD), "PyTorchJob", "p.yaml")
    assert finding.rule == "crd-schema"
    assert finding.path == "spec.pytorchReplicaSpecs.Worker.replicas"


def test_a_file_that_is_not_a_crd_is_bad_input(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "crd.yaml"
    path.write_text("kind: ConfigMap\n")
    with pytest.raises(InputError, match="not a CustomResourceDefinition"):
        load_crd_schemas(path)
    with pytest.raises(InputError, match="no such file"):
        load_crd_schemas(tmp_path / "missing.yaml")


# --- the command: validate --crd FILE ------------------------------------------------


def validate_crd(*args: str) -> Any:
    return run("validate", *args)


def test_validate_crd_passes_the_examples_against_the_upstream_crd(cache_home: Path) -> None:
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in ("multi-node", "elastic")]
    result = validate_crd(*profiles, "--crd", str(CRD))
    assert result.exit_code == 0, result.output
    assert result.stderr.count("ok: ") == 2


def test_validate_crd_reports_the_field_a_tampered_crd_refuses(tmp_path: Path, cache_home: Path) -> None:
    crd = copy.deepcopy(upstream_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    replica = spec["properties"]["pytorchReplicaSpecs"]["additionalProperties"]
    replica["properties"]["replicas"] = {"type": "string"}
    tampered = tmp_path / "crd.yaml"
    tampered.write_text(json.dumps(crd))
    profile = str(ROOT / "examples" / "multi-node" / "profile.yaml")
    result = validate_crd(profile, "--crd", str(tampered))
    assert result.exit_code == 1, result.output
    assert (
        f"error: {profile}: spec.pytorchReplicaSpecs.Master.replicas: 1 is not of type 'string' [crd-schema]"
    ) in result.stderr.splitlines()


def test_validate_crd_of_a_file_that_is_not_a_crd_is_bad_input(tmp_path: Path, cache_home: Path) -> None:
    bad = tmp_path / "crd.yaml"
    bad.write_text("kind: ConfigMap\n")
    result = validate_crd(str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--crd", str(bad))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad}: not a CustomResourceDefinition\nhint: ")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    assert (
        validate_crd(str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--crd", str(broken)).exit_code
        == 2
    )


def test_a_planted_cache_entry_never_turns_a_finding_into_a_pass(tmp_path: Path, cache_home: Path) -> None:
    # issue 23, item 10: the schemas derived from a CRD were read back from
    # ~/.cache/runai-spec/crd-<version>/<sha256 of the file>.json unverified; an entry that
    # accepts anything there made a tampered CRD's finding pass
    import hashlib

    from runai_spec import __version__

    crd = copy.deepcopy(upstream_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["pytorchReplicaSpecs"]["additionalProperties"]["properties"]["replicas"] = {
        "type": "string"
    }
    tampered = tmp_path / "crd.yaml"
    tampered.write_text(json.dumps(crd))
    digest = hashlib.sha256(tampered.read_bytes()).hexdigest()
    planted = cache_home / "runai-spec" / f"crd-{__version__}" / f"{digest}.json"
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"v1": {}}))  # a schema that accepts any object
    profile = str(ROOT / "examples" / "multi-node" / "profile.yaml")
    result = validate_crd(profile, "--crd", str(tampered))
    assert result.exit_code == 1, result.output
    assert "spec.pytorchReplicaSpecs.Master.replicas: 1 is not of type 'string'" in result.stderr
    assert planted.read_text() == json.dumps({"v1": {}})  # neither read nor rewritten
