"""`explain` / `render --explain`: every rendered field says where it came from."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import EXAMPLES, ROOT, kubelet_sees, run
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.yaml import parse_documents
from runai_spec.outputs.explain import explain_workload
from runai_spec.pipeline.workload import prepare_workload


def leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            out |= leaves(child, f"{path}.{key}" if path else key)
        return out
    if isinstance(value, list):
        out = {}
        for i, child in enumerate(value):
            out |= leaves(child, f"{path}[{i}]")
        return out
    return {path: value}


def line_of(path: Path, prefix: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(prefix))


def by_path(profile: Path) -> dict[str, Any]:
    result = explain_workload(prepare_workload(profile))
    return {f.path: f for f in result.fields}


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_rendered_value_of_every_example_has_an_origin(example: str) -> None:
    workload = prepare_workload(ROOT / "examples" / example / "profile.yaml")
    result = explain_workload(workload)
    (job,) = workload.manifests
    assert {f.path: f.value for f in result.fields} == leaves(job)
    kinds = {f.origin.kind for f in result.fields}
    assert {"profile", "preset", "site", "derived", "template", "ledger"} <= kinds


@pytest.mark.parametrize("example", EXAMPLES)
def test_annotated_yaml_reads_back_as_the_rendered_manifest(example: str) -> None:
    profile = ROOT / "examples" / example / "profile.yaml"
    workload = prepare_workload(profile)
    annotated = explain_workload(workload).annotated()
    assert "  # profile " in annotated and "  # preset presets/" in annotated
    assert parse_documents(annotated, "annotated") == list(workload.manifests)


def test_profile_values_point_at_their_line_and_preset_values_at_the_preset() -> None:
    profile = ROOT / "examples" / "multi-node" / "profile.yaml"
    fields = by_path(profile)
    container = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"
    image = fields[f"{container}.image"].origin
    assert (image.kind, image.field, image.line) == ("profile", "image", line_of(profile, "image:"))
    gpus = fields[f"{container}.resources.limits.nvidia.com/gpu"].origin
    preset_file = ROOT / "presets" / "h200-2x8-ib.yaml"
    assert (gpus.kind, gpus.file, gpus.field, gpus.line) == (
        "preset",
        "presets/h200-2x8-ib.yaml",
        "gpus_per_pod",
        line_of(preset_file, "gpus_per_pod:"),
    )
    rdma = fields[f"{container}.resources.limits.nvidia.com/rdma_ib"].origin
    assert rdma.field == "network.resources.nvidia.com/rdma_ib"
    scheduler = fields["spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName"].origin
    assert (scheduler.kind, scheduler.field) == ("site", "scheduler_name")
    workers = fields["spec.pytorchReplicaSpecs.Worker.replicas"].origin
    assert workers.kind == "derived" and "- 1 Master" in workers.field
    queue = fields["metadata.labels.runai/queue"]
    assert queue.origin.field == "project" and queue.key_origin is not None
    assert queue.key_origin.field == "queue_label"
    assert fields["kind"].origin.kind == "template"
    launcher = fields[f"{container}.command[0]"]
    assert launcher.value == "torchrun" and launcher.origin.kind == "derived"
    # the failure semantics are the preset's: each launcher flag names its field and line
    flags = {
        f.value.split("=", 1)[0]: f
        for f in fields.values()
        if f.path.startswith(f"{container}.command[") and str(f.value).startswith("--")
    }
    backend = flags["--rdzv-backend"].origin
    assert (backend.kind, backend.field, backend.line) == (
        "preset",
        "rendezvous.backend",
        line_of(preset_file, "  backend:"),
    )
    assert flags["--max-restarts"].origin.field == "rendezvous.max_restarts"
    assert flags["--rdzv-conf"].origin.field == "rendezvous"
    assert "MASTER_ADDR" in flags["--rdzv-endpoint"].origin.field
    assert flags["--rdzv-id"].origin.kind == "derived"
    command = [f.value for f in fields.values() if f.path.startswith(f"{container}.command[")]
    script = command.index("train.py")
    assert script == 8 and fields[f"{container}.command[{script}]"].origin.field == "command[0]"
    grace = fields["spec.pytorchReplicaSpecs.Worker.template.spec.terminationGracePeriodSeconds"]
    assert (grace.value, grace.origin.field, grace.origin.line) == (
        300,
        "termination_grace_period_seconds",
        line_of(preset_file, "termination_grace_period_seconds:"),
    )
    backoff = fields["spec.runPolicy.backoffLimit"].origin
    assert (backoff.field, backoff.line) == (
        "run_policy.backoff_limit",
        line_of(preset_file, "  backoff_limit:"),
    )


def test_single_gpu_local_rank_is_derived_and_nccl_debug_names_the_switch(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile |= {"preset": "h200-1gpu", "diagnostics": {"nccl_debug": True}}
    fields = by_path(write_profile(base_profile))
    env = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env"
    origin_of = {fields[f"{env}[{i}].value"].value: fields[f"{env}[{i}].value"].origin for i in range(3)}
    assert origin_of["0"].kind == "derived" and "LOCAL_RANK" in origin_of["0"].field
    assert origin_of["INFO"].field == "diagnostics.nccl_debug"
    assert origin_of["1"].field == "env.MY_FLAG"


def test_preset_network_env_and_defaults_are_attributed_to_the_preset(
    presets_dir: Path, write_profile: Callable[..., Path], base_profile: dict[str, Any], engineer_key: Path
) -> None:
    text = (presets_dir / "h200-2x8-ib.yaml").read_text()
    (presets_dir / "h200-2x8-ib.yaml").write_text(
        text.replace("  capabilities:", "  env: {NCCL_IB_HCA: mlx5}\n  capabilities:")
    )
    PresetRegistry(presets_dir).approve("h200-2x8-ib", engineer_key)
    fields = by_path(write_profile(base_profile))
    container = "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"
    hca = next(f for f in fields.values() if f.path.startswith(f"{container}.env") and f.value == "mlx5")
    assert (hca.origin.kind, hca.origin.field) == ("preset", "network.env.NCCL_IB_HCA")
    port = fields[f"{container}.ports[0].containerPort"].origin
    assert port.kind == "preset" and port.field == "master_port (default)" and port.line is None


def test_hostile_values_cannot_impersonate_a_marker_or_break_the_comments(
    write_profile: Callable[..., Path], base_profile: dict[str, Any]
) -> None:
    base_profile["command"] = ["train.py", "@@runai-spec-origin:image", "x  # not a comment\ny: 1"]
    workload = prepare_workload(write_profile(base_profile))
    result = explain_workload(workload)
    fields = {f.path: f for f in result.fields}
    at = len(workload.plan.launcher) + 1
    arg = fields[f"spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command[{at}]"]
    assert arg.value == "@@runai-spec-origin:image" and arg.origin.field == "command[1]"
    assert parse_documents(result.annotated(), "annotated") == list(workload.manifests)


def test_explain_command_text_json_and_render_flag() -> None:
    profile = str(ROOT / "examples" / "single-node" / "profile.yaml")
    text = run("explain", profile)
    assert text.exit_code == 0, text.output
    assert yaml.safe_load(text.stdout)["kind"] == "PyTorchJob"
    assert "# profile " in text.stdout
    as_json = run("explain", profile, "--format", "json")
    assert as_json.exit_code == 0
    fields = json.loads(as_json.stdout)["fields"]
    image = next(f for f in fields if f["path"].endswith(".image"))
    assert image["kind"] == "profile" and image["line"] == line_of(Path(profile), "image:")
    markdown = run("explain", profile, "--format", "markdown")
    assert markdown.exit_code == 2 and "error:" in markdown.stderr


def test_render_explain_annotates_every_profile_and_refuses_out() -> None:
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in ("single-gpu", "elastic")]
    result = run("render", *profiles, "--explain")
    assert result.exit_code == 0, result.output
    docs = parse_documents(result.stdout, "stdout")
    plain = run("render", *profiles)
    assert docs == parse_documents(plain.stdout, "plain")
    assert result.stdout.count("# profile ") > 10 and "# profile " not in plain.stdout
    refused = run("render", profiles[0], "--explain", "-d", "out")
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --explain:")


def test_any_hostile_value_keeps_the_annotated_output_exact(tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings

    from conftest import BASE_PROFILE
    from render.test_core_hostile import TEXT
    from runai_spec.render.manifests import dump

    seen: list[str] = []
    registry = PresetRegistry()  # read (ledger, signatures, presets) once, not per example

    @settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(TEXT)
    def check(value: str) -> None:
        seen.append(value)
        data = {**BASE_PROFILE, "env": {"HOSTILE": value}, "command": ["train.py", value or "x"]}
        workload = prepare_workload(tmp_path / "hostile.yaml", registry, text=dump([data]))
        result = explain_workload(workload)
        assert parse_documents(result.annotated(), "annotated") == list(workload.manifests)
        fields = {f.path: f for f in result.fields}
        at = len(workload.plan.launcher) + 1
        arg = fields[f"spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command[{at}]"]
        # the manifest's text, written for the kubelet (`$` as `$$`), gives the value typed
        assert kubelet_sees(arg.value) == (value or "x") and arg.origin.field == "command[1]"

    check()
    assert len(seen) >= settings().max_examples * 3 // 4  # hypothesis really ran them (the profile's count)
