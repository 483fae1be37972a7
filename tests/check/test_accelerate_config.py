"""`accelerate_config`: every engineer-owned key refused by validate, the training keys rendered into
the tool's config, which accelerate 1.16.0's own loader reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, run
from runai_spec.facts.accelerate import ENGINEER_DEEPSPEED_KEYS, ENGINEER_KEYS, config_text
from runai_spec.pipeline.workload import prepare_workload

SINGLE = ROOT / "examples" / "accelerate-single-node" / "profile.yaml"
ENGINEER_PATHS = [
    *ENGINEER_KEYS,
    "tpu_name",
    *(f"deepspeed_config.{key}" for key in ENGINEER_DEEPSPEED_KEYS),
]


def _profile(tmp_path: Path, config: dict[str, Any], **replace: str) -> Path:
    (tmp_path / "accelerate.json").write_text(json.dumps(config), encoding="utf-8")
    text = SINGLE.read_text(encoding="utf-8").replace(
        "working_dir: /workspace\n", "working_dir: /workspace\naccelerate_config: accelerate.json\n"
    )
    for old, new in replace.items():
        text = text.replace(old, new)
    path = tmp_path / "profile.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _nested(path: str) -> dict[str, Any]:
    top, _, sub = path.partition(".")
    return {top: {sub: "x"}} if sub else {top: "x"}


@pytest.mark.parametrize("path", ENGINEER_PATHS)
def test_every_engineer_key_is_refused_by_validate_with_a_line(tmp_path: Path, path: str) -> None:
    config = _nested(path)
    if path.startswith("deepspeed_config."):
        config["deepspeed_config"]["zero_stage"] = 2  # a researcher key beside it
    result = run("validate", str(_profile(tmp_path, config, **{"strategy: ddp": "strategy: deepspeed"})))
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if "[accelerate-config]" in line]
    assert [line for line in lines if f"accelerate_config: {path}: the engineers' key" in line], lines


def test_the_training_keys_are_rendered_into_a_config_accelerates_loader_reads(tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import ClusterConfig  # type: ignore[import-untyped]

    config = {"mixed_precision": "bf16", "dynamo_config": {"dynamo_backend": "INDUCTOR"}}
    workload = prepare_workload(_profile(tmp_path, config))
    assert workload.errors == ()
    (job,) = workload.manifests
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    text = template["metadata"]["annotations"]["runai-spec/accelerate-config"]
    assert text == config_text(1, 8, config)
    rendered = json.loads(text)
    assert rendered["mixed_precision"] == "bf16" and rendered["dynamo_config"] == config["dynamo_config"]
    (tmp_path / "rendered.json").write_text(text, encoding="utf-8")
    loaded = ClusterConfig.from_json_file(json_file=str(tmp_path / "rendered.json"))
    assert (loaded.num_processes, loaded.rdzv_backend, loaded.mixed_precision) == (8, "c10d", "bf16")


def test_the_engineers_keys_never_reach_the_render_even_unchecked() -> None:
    text = config_text(
        2, 16, {"num_machines": 9, "gpu_ids": "0", "deepspeed_config": {"deepspeed_hostfile": "h"}}
    )
    config = json.loads(text)
    assert (config["num_machines"], config["gpu_ids"]) == (2, "all")
    assert config["deepspeed_config"] == {}


def test_deepspeed_batch_arithmetic_and_stage_must_agree_with_the_profile(tmp_path: Path) -> None:
    ds = {"zero_stage": 3, "gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": "auto"}
    path = _profile(
        tmp_path, {"deepspeed_config": ds}, **{"strategy: ddp": "strategy: deepspeed\nzero_stage: 2"}
    )
    result = run("validate", str(path))
    assert result.exit_code == 1, result.output
    assert "deepspeed_config.zero_stage 3 contradicts zero_stage 2" in result.output
    assert "deepspeed_config.gradient_accumulation_steps 2 contradicts batch.grad_accum 4" in result.output
    assert "train_micro_batch_size_per_gpu" not in result.output  # auto: DeepSpeed fills it


def test_a_deepspeed_config_file_is_warned_of_as_overriding_the_rendered_stage(tmp_path: Path) -> None:
    """accelerate 1.16.0's DeepSpeedPlugin takes the stage from the named DeepSpeed file
    wherever it is not `auto`, over --zero_stage (utils/dataclasses.py)."""
    ds = {"deepspeed_config_file": "/workspace/ds.json"}
    path = _profile(
        tmp_path, {"deepspeed_config": ds}, **{"strategy: ddp": "strategy: deepspeed\nzero_stage: 2"}
    )
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if "deepspeed_config.deepspeed_config_file" in line]
    assert len(warned) == 1 and warned[0].startswith("warning:"), result.output
    assert "over the rendered --zero_stage=2" in warned[0]


def test_a_missing_config_file_is_bad_input_naming_the_field(tmp_path: Path) -> None:
    path = _profile(tmp_path, {})
    (tmp_path / "accelerate.json").unlink()
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert "accelerate_config: accelerate_config 'accelerate.json': no such file" in result.output


def test_a_config_outside_the_profiles_folder_is_refused(tmp_path: Path) -> None:
    path = _profile(tmp_path, {}, **{"accelerate_config: accelerate.json": "accelerate_config: ../x.json"})
    result = run("validate", str(path))
    assert result.exit_code == 2 and "leaves the profile's folder" in result.output
