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

from conftest import ENGINEER as SIGNER
from conftest import ROOT, allow_signer, make_key
from outputs.admission.admission_policy import PROJECTS, REGISTRY, TODAY, Job, Policy, pods, shared_policy
from runai_spec.check.accelerate import engineer_paths
from runai_spec.check.training import STRATEGY_ALLOWED
from runai_spec.facts import accelerate as acc
from runai_spec.facts.accelerate import ENGINEER_DEEPSPEED_KEYS, ENGINEER_KEYS, config_text
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission
from runai_spec.outputs.admission.rules import ZERO_STAGES
from runai_spec.pipeline.smoke import smoke_workload
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.launcher.accelerate import (
    CONFIG_ANNOTATION,
    CONFIG_DIR,
    DEEPSPEED_MULTINODE_FLAG,
    DEEPSPEED_STANDARD,
    USE_DEEPSPEED_FLAG,
    USE_FSDP_FLAG,
)

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


def test_an_accelerate_job_of_another_strategy_is_admitted(policy: Policy, tmp_path: Path) -> None:
    job, errors = _render("accelerate-multi-node", {"mixed_precision": "bf16"}, tmp_path, strategy="fsdp")
    assert errors == set()
    assert USE_FSDP_FLAG in pods(job)[0]["spec"]["containers"][0]["command"]
    assert policy.denials(job) == {}


# -- strategies: each one the preset allows is a family of checks of its own (gate.preset_gates),
# derived from the probes rendered with it; a deepspeed job's ZeRO stage is a checked value


def _strategy_jobs(example: str, tmp: Path, registry: PresetRegistry = REGISTRY, **fields: Any) -> Renders:
    """EXAMPLE's job with FIELDS over its profile, its smoke job, and validate's rules."""
    folder = tmp / example
    shutil.copytree(ROOT / "examples" / example, folder)
    profile = yaml.safe_load((folder / "profile.yaml").read_text(encoding="utf-8")) | fields
    (folder / "profile.yaml").write_text(json.dumps(profile), encoding="utf-8")
    workload = prepare_workload(folder / "profile.yaml", registry)

    def job(manifests: Any) -> Job:
        return json.loads(json.dumps(next(m for m in manifests if m.get("kind") == "PyTorchJob")))  # type: ignore[no-any-return]

    return job(workload.manifests), job(smoke_workload(workload)), {f.rule for f in workload.errors}


Renders = tuple[Job, Job, set[str]]


def _command(job: Job) -> list[str]:
    (command,) = {tuple(t["spec"]["containers"][0]["command"]) for t in pods(job)}
    return list(command)


def _flags(strategy: str, stage: int | None, pods: int) -> list[str]:
    """The flags the launcher renders for STRATEGY (the test's own statement of them)."""
    if strategy == "fsdp":
        return [USE_FSDP_FLAG]
    if strategy == "deepspeed":
        multinode = [f"{DEEPSPEED_MULTINODE_FLAG}={DEEPSPEED_STANDARD}"] if pods > 1 else []
        return [USE_DEEPSPEED_FLAG, f"{acc.ZERO_STAGE_FLAG}={stage}", *multinode]
    return [acc.MULTI_GPU_FLAG]


# CI's cases: a stage on several pods (the multi-node launcher flag) and FSDP on one; the rest long
CI_STRATEGIES = {("accelerate-multi-node", "deepspeed", 2), ("accelerate-single-node", "fsdp", None)}
STRATEGIES = [
    pytest.param(
        e, s, n, marks=() if (e, s, n) in CI_STRATEGIES else pytest.mark.long, id=f"{e}-{s}{n or ''}"
    )
    for e in ("accelerate-single-node", "accelerate-multi-node")
    for s, n in [("fsdp", None), *(("deepspeed", n) for n in ZERO_STAGES)]  # ddp: the examples
]


@pytest.mark.parametrize(("example", "strategy", "stage"), STRATEGIES)
def test_each_strategy_and_stage_the_preset_allows_is_admitted_job_and_smoke(
    policy: Policy, tmp_path: Path, example: str, strategy: str, stage: int | None
) -> None:
    job, smoke, errors = _strategy_jobs(example, tmp_path, strategy=strategy, zero_stage=stage)
    assert errors == set()
    pods_n = 2 if example == "accelerate-multi-node" else 1
    command = _command(job)
    at = command.index(f"{acc.CONFIG_FILE_FLAG}={CONFIG_DIR}/{acc.CONFIG_NAME}") + 1
    assert command[at : at + len(_flags(strategy, stage, pods_n))] == _flags(strategy, stage, pods_n)
    # the smoke job runs preflight.py under the job's launcher as smoke.smoke_launcher builds it
    for each in (job, smoke):
        assert policy.denials(each) == {}, each["metadata"]["name"]


STAGE = f"{acc.ZERO_STAGE_FLAG}=2"
STANDARD = f"{DEEPSPEED_MULTINODE_FLAG}={DEEPSPEED_STANDARD}"
MULTI_GPU = acc.MULTI_GPU_FLAG
# name: (the job's strategy, an item of its command, what replaces that item): each denied
TAMPERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ddp+fsdp": ("ddp", MULTI_GPU, (MULTI_GPU, USE_FSDP_FLAG)),
    "ddp+stage": ("ddp", MULTI_GPU, (MULTI_GPU, STAGE)),
    "ddp-as-deepspeed-no-stage": ("ddp", MULTI_GPU, (USE_DEEPSPEED_FLAG, STANDARD)),
    "stage-4": ("deepspeed", STAGE, (f"{acc.ZERO_STAGE_FLAG}=4",)),
    "stage-02": ("deepspeed", STAGE, (f"{acc.ZERO_STAGE_FLAG}=02",)),
    "stage-empty": ("deepspeed", STAGE, (f"{acc.ZERO_STAGE_FLAG}=",)),
    "stage-dashed": ("deepspeed", STAGE, ("--zero-stage=2",)),
    "stage-dropped": ("deepspeed", STAGE, ()),
    "stage-twice": ("deepspeed", STAGE, (STAGE, f"{acc.ZERO_STAGE_FLAG}=3")),
    "pdsh": ("deepspeed", STANDARD, (f"{DEEPSPEED_MULTINODE_FLAG}=pdsh",)),
    "multinode-dropped": ("deepspeed", STANDARD, ()),
    "deepspeed-as-fsdp": ("deepspeed", USE_DEEPSPEED_FLAG, (USE_FSDP_FLAG,)),
    "deepspeed+fsdp": ("deepspeed", USE_DEEPSPEED_FLAG, (USE_DEEPSPEED_FLAG, USE_FSDP_FLAG)),
    "fsdp+multi_gpu": ("fsdp", USE_FSDP_FLAG, (USE_FSDP_FLAG, MULTI_GPU)),
}


@pytest.fixture(scope="module")
def strategy_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Renders]:
    """The multi-node example's job and smoke job with each strategy (deepspeed: stage 2)."""
    tmp = tmp_path_factory.mktemp("strategies")
    return {
        s: _strategy_jobs(
            "accelerate-multi-node", tmp / s, strategy=s, zero_stage=2 if s == "deepspeed" else None
        )
        for s in ("ddp", "fsdp", "deepspeed")
    }


def test_a_tampered_strategy_flag_or_stage_is_denied_naming_the_command(
    policy: Policy, strategy_jobs: dict[str, Renders]
) -> None:
    """Each tamper of the job (admitted as rendered), and of its smoke job where its command
    has the item (the smoke job's launcher: smoke.smoke_launcher)."""
    for name, (strategy, old, new) in TAMPERS.items():
        job, smoke, _ = strategy_jobs[strategy]
        assert old in _command(job), name
        for kind, each in (("job", job), ("smoke", smoke)):
            if old not in _command(each):
                continue
            assert policy.denials(each) == {}, (name, kind)
            tampered = json.loads(json.dumps(each))
            for template in pods(tampered):
                command = template["spec"]["containers"][0]["command"]
                at = command.index(old)
                command[at : at + 1] = list(new)
            denied = policy.denials(tampered)
            assert list(denied) == ["shape"], (name, kind, denied)
            assert ".command" in denied["shape"], (name, kind, denied)


def test_a_strategy_the_preset_does_not_allow_is_denied(
    policy: Policy, strategy_jobs: dict[str, Renders], tmp_path: Path
) -> None:
    """h200-2x8-ib with strategies [ddp] (signed by a throwaway key): the FSDP job validate
    refuses is denied by the policy derived from that preset, where the shipped one's admits it."""
    presets = shutil.copytree(ROOT / "presets", tmp_path / "presets")
    key = make_key(tmp_path, "engineer")
    allow_signer(presets, key, SIGNER)
    preset = presets / "h200-2x8-ib.yaml"
    body = yaml.safe_load(preset.read_text(encoding="utf-8"))
    assert body["strategies"][0] == "ddp" and "fsdp" in body["strategies"]
    preset.write_text(yaml.safe_dump(body | {"strategies": ["ddp"]}, sort_keys=False), encoding="utf-8")
    for other in presets.glob("h200-*.yaml"):
        if other != preset:
            other.unlink()
    PresetRegistry(presets).approve("h200-2x8-ib", key, expires="2027-12-31")
    registry = PresetRegistry(presets, today=TODAY)
    narrow = Policy(admission.policy_documents(registry), PROJECTS)
    job, _, errors = _strategy_jobs("accelerate-multi-node", tmp_path, registry, strategy="fsdp")
    assert STRATEGY_ALLOWED in errors
    shipped = strategy_jobs["fsdp"][0]
    # the same command as the shipped preset's render, which its own policy admits (the smoke
    # job's launcher carries no strategy: smoke.smoke_launcher)
    assert _command(job) == _command(shipped)
    assert policy.denials(shipped) == {}
    denied = narrow.denials(job)
    assert list(denied) == ["shape"], denied
    assert ".command" in denied["shape"] and acc.MULTI_GPU_FLAG in denied["shape"], denied
