"""Every example renders to its committed manifest, deterministically, and validates."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, pytorch_container, run, schema_errors
from runai_spec.facts.kubeflow import operator_problems
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.render.manifests import parse


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_matches_committed_manifest(example: str) -> None:
    profile = ROOT / "examples" / example / "profile.yaml"
    golden = ROOT / "examples" / example / "manifest.yaml"
    text = prepare_workload(profile).text
    expected = golden.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), str(golden), "rendered now"
            )
        )
        pytest.fail(
            f"{golden} is out of date:\n{diff}\nrefresh with:\n  runai-spec render "
            f"examples/{example}/profile.yaml > examples/{example}/manifest.yaml"
        )


def test_every_layout_has_an_example() -> None:
    layouts = {prepare_workload(ROOT / "examples" / e / "profile.yaml").plan.layout for e in EXAMPLES}
    elastic = [e for e in EXAMPLES if prepare_workload(ROOT / "examples" / e / "profile.yaml").plan.elastic]
    assert layouts == {"single-gpu", "single-node", "multi-node"}
    assert elastic


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_validates_against_upstream_crd_and_operator_rules(example: str) -> None:
    text = (ROOT / "examples" / example / "manifest.yaml").read_text(encoding="utf-8")
    (job,) = parse(text, example)
    assert schema_errors(job) == []
    assert operator_problems(job) == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_is_byte_identical_across_runs(example: str, tmp_path: Path) -> None:
    profile = str(ROOT / "examples" / example / "profile.yaml")
    first = run("render", profile)
    second = run("render", profile)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    assert first.stdout == (ROOT / "examples" / example / "manifest.yaml").read_text()


def test_render_out_dir_writes_one_file_per_workload(tmp_path: Path) -> None:
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in EXAMPLES]
    result = run("render", *profiles, "-d", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    names = sorted(f"{prepare_workload(Path(p)).plan.name}.yaml" for p in profiles)
    assert written == names
    for profile in profiles:
        workload = prepare_workload(Path(profile))
        assert (tmp_path / "out" / f"{workload.plan.name}.yaml").read_text() == workload.text


def test_schema_oracle_rejects_a_broken_job() -> None:
    # The oracle itself must be able to fail, or the tests above prove nothing.
    text = (ROOT / "examples" / "multi-node" / "manifest.yaml").read_text(encoding="utf-8")
    (job,) = parse(text, "multi-node")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    del pytorch_container(job)["name"]
    assert len(schema_errors(job)) == 2
