"""The researcher's accelerate config in the rendered annotation (issue 38 item 3, the gate's
part): a render with training keys is admitted, each engineers' key smuggled into the
annotation is denied naming the annotation and the engineers' keys, as validate refuses it
(check.accelerate, one definition)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from outputs.admission.admission_policy import REGISTRY, Job, Policy, pods, shared_policy
from runai_spec.check.accelerate import engineer_paths
from runai_spec.facts.accelerate import ENGINEER_DEEPSPEED_KEYS, ENGINEER_KEYS, config_text
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.launcher.accelerate import CONFIG_ANNOTATION

pytest.importorskip("cel_expr_python.cel")

GOOD = {
    "mixed_precision": "bf16",
    "dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": "max-autotune"},
    "downcast_bf16": "no",
    # a string that holds a key's text is a value (its quotes escaped), and non-ASCII is escaped
    "main_training_function": 'main,"num_machines":caf\u00e9\u2028',
}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return shared_policy()


def _render(example: str, config: dict[str, Any], tmp: Path, **fields: Any) -> tuple[Job, set[str]]:
    folder = tmp / example
    shutil.copytree(ROOT / "examples" / example, folder)
    profile = yaml.safe_load((folder / "profile.yaml").read_text(encoding="utf-8")) | fields
    profile["accelerate_config"] = "accel.json"
    (folder / "accel.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "profile.yaml").write_text(json.dumps(profile), encoding="utf-8")
    workload = prepare_workload(folder / "profile.yaml", REGISTRY)
    job = next(m for m in workload.manifests if m.get("kind") == "PyTorchJob")
    return dict(job), {f.rule for f in workload.errors}


def _annotation(job: Job) -> str:
    (value,) = {t["metadata"]["annotations"][CONFIG_ANNOTATION] for t in pods(job)}
    assert isinstance(value, str)
    return value


def _set_annotation(job: Job, value: str) -> Job:
    for template in pods(job):
        template["metadata"]["annotations"][CONFIG_ANNOTATION] = value
    return job


@pytest.mark.parametrize("example", ["accelerate-single-node", "accelerate-multi-node"])
def test_a_render_with_the_researcher_s_training_keys_is_admitted(
    policy: Policy, tmp_path: Path, example: str
) -> None:
    job, errors = _render(example, GOOD, tmp_path)
    assert errors == set()
    text = _annotation(job)
    assert json.loads(text)["mixed_precision"] == "bf16"
    assert text.startswith('{"downcast_bf16":"no","dynamo_config":')
    assert policy.denials(job) == {}


def test_the_config_without_researcher_keys_is_the_engineers_part_alone() -> None:
    """The researcher's keys come first, each part sorted: with none, the text is the one the
    goldens hold (the engineers' keys sorted)."""
    alone = config_text(2, 16)
    assert alone == json.dumps(json.loads(alone), sort_keys=True, separators=(",", ":"))
    assert config_text(2, 16, {"mixed_precision": "bf16"}) == '{"mixed_precision":"bf16",' + alone[1:]


ENGINEER = [*ENGINEER_KEYS, *ENGINEER_DEEPSPEED_KEYS, "tpu_name"]


@pytest.mark.parametrize("key", ENGINEER)
def test_each_engineers_key_smuggled_into_the_annotation_is_denied_naming_it(
    policy: Policy, tmp_path: Path, key: str
) -> None:
    job, _ = _render("accelerate-multi-node", GOOD, tmp_path)
    text = _annotation(job)
    value = json.dumps({"x": 1} if key == "mpirun_config" else 7)
    spellings = {
        "first": "{" + f'"{key}":{value},' + text[1:],
        "after": text.replace('"bf16",', f'"bf16",\n  "{key}" : {value},'),
        "nested": text.replace('"dynamo_config":{', f'"dynamo_config":{{"{key}":{value},'),
        "escaped": "{" + f'"\\u{ord(key[0]):04x}{key[1:]}":{value},' + text[1:],
    }
    for how, smuggled in spellings.items():
        assert smuggled != text, how
        # validate refuses the same config, read as accelerate reads it
        assert engineer_paths(json.loads(smuggled)), (key, how)
        denied = policy.denials(_set_annotation(json.loads(json.dumps(job)), smuggled))
        assert list(denied) == ["shape"], (key, how)
        message = denied["shape"]
        assert CONFIG_ANNOTATION in message and "training keys only" in message, message
        assert ("tpu_*" if key.startswith("tpu_") else key) in message, message


def test_validate_refuses_the_same_keys_wherever_they_stand(tmp_path: Path) -> None:
    config = {**GOOD, "dynamo_config": {"dynamo_backend": "NO", "gpu_ids": "0"}, "tpu_zone": "x"}
    _, errors = _render("accelerate-multi-node", config, tmp_path)
    assert "accelerate-config" in errors
    assert engineer_paths(config) == ["dynamo_config.gpu_ids", "tpu_zone"]
    assert engineer_paths({"deepspeed_config": {"deepspeed_hostfile": "/h", "zero_stage": 2}}) == [
        "deepspeed_config.deepspeed_hostfile"
    ]


def test_an_engineers_value_changed_in_the_pinned_part_is_denied(policy: Policy, tmp_path: Path) -> None:
    job, _ = _render("accelerate-multi-node", GOOD, tmp_path)
    text = _annotation(job)
    assert '"num_machines":2' in text
    denied = policy.denials(_set_annotation(job, text.replace('"num_machines":2', '"num_machines":3')))
    assert list(denied) == ["shape"]


@pytest.mark.xfail(
    strict=True,
    reason="the gate's probes render the preset's first strategy (ddp): since 607f85a accelerate "
    "renders --use_fsdp/--use_deepspeed for those strategies, which the policy denies; checks per "
    "strategy push the shipped policy past presets policy's 1,400,000 bytes (measured 1,517,512)",
)
def test_an_accelerate_job_of_another_strategy_is_admitted(policy: Policy, tmp_path: Path) -> None:
    job, errors = _render("accelerate-multi-node", {"mixed_precision": "bf16"}, tmp_path, strategy="fsdp")
    assert errors == set()
    assert policy.denials(job) == {}
