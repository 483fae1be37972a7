"""`launcher: accelerate`: accelerate 1.16.0's own argument handling on the rendered command, in
each pod's env as the operator and the kubelet make it, gives torchrun c10d, the preset's
restarts and the shutdown window; a naive `accelerate launch` gives neither."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, pytorch_container, run
from runai_spec.facts.accelerate import CONFIG_FILE_FLAG, ENGINEER_KEYS, config_text
from runai_spec.facts.kubeflow import operator_env
from runai_spec.facts.kubelet import container_env, expand_command
from runai_spec.facts.torchrun import SHUTDOWN_TIMEOUT_ENV, shutdown_timeout_s, split_command
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.launcher import choose_launcher

pytest.importorskip("accelerate", minversion="1.16.0")

MULTI = ROOT / "examples" / "accelerate-multi-node" / "profile.yaml"
SINGLE = ROOT / "examples" / "accelerate-single-node" / "profile.yaml"


def _pods(job: Mapping[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            yield role, index, pytorch_container(job, role)


def _torchrun_config(
    argv: list[str], env: dict[str, str], config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """What accelerate launch hands torchrun for ARGV in ENV: its own parser, its validation
    (the config file), its multi-GPU env, its filter onto torchrun's parser (whose defaults are
    the env's PET_*), then torchrun's LaunchConfig."""
    from accelerate.commands.launch import (  # type: ignore[import-untyped]
        _validate_launch_command,
        launch_command_parser,
    )
    from accelerate.utils.launch import _filter_args, prepare_multi_gpu_env  # type: ignore[import-untyped]
    from torch.distributed import run as distrib_run

    monkeypatch.setattr("os.environ", dict(env))
    monkeypatch.setenv("HF_HOME", str(config_dir / "hf"))  # no default config of this machine
    parser = launch_command_parser()
    args = parser.parse_args(argv[2:])
    args, _, _ = _validate_launch_command(args)
    prepare_multi_gpu_env(args)
    filtered = _filter_args(
        args,
        distrib_run.get_args_parser(),
        ["--training_script", args.training_script, "--training_script_args", args.training_script_args],
    )
    assert isinstance(filtered, argparse.Namespace)
    config, _, _ = distrib_run.config_from_args(filtered)
    config.node_rank = filtered.node_rank  # type: ignore[attr-defined]  # torchrun's --node-rank, beside it
    return config


def _pod_argv(
    job: Mapping[str, Any], role: str, index: int, container: Mapping[str, Any], tmp: Path
) -> tuple[list[str], dict[str, str]]:
    """The pod's argv and env as the kubelet starts it: the operator's variables appended, the
    command expanded; the config file (a pod annotation) written where --config_file says."""
    items = [(e["name"], e.get("value", "pod-0")) for e in container["env"]]
    env = container_env([*items, *operator_env(job, role, index).items()])
    argv = expand_command(container["command"], env)
    annotations = job["spec"]["pytorchReplicaSpecs"][role]["template"]["metadata"]["annotations"]
    (config,) = [a for a in argv if a.startswith(CONFIG_FILE_FLAG + "=")]
    local = tmp / f"{role}-{index}.json"
    local.write_text(next(v for k, v in annotations.items() if k.endswith("accelerate-config")))
    return [f"{CONFIG_FILE_FLAG}={local}" if a == config else a for a in argv], env


def test_accelerates_own_parser_gives_torchrun_c10d_restarts_and_shutdown_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = prepare_workload(MULTI)
    preset = workload.approved.preset
    (job,) = workload.manifests
    seen = []
    for role, index, container in _pods(job):
        argv, env = _pod_argv(job, role, index, container, tmp_path)
        with monkeypatch.context() as m:
            config = _torchrun_config(argv, env, tmp_path, m)
        assert config.rdzv_backend == "c10d"
        assert config.max_restarts == preset.rendezvous.max_restarts
        assert config.shutdown_timeout == shutdown_timeout_s(preset.termination_grace_period_seconds)
        assert config.run_id == workload.plan.name
        assert (config.min_nodes, config.max_nodes) == (preset.nodes, preset.nodes)
        assert config.nproc_per_node == preset.gpus_per_pod
        assert config.rdzv_endpoint == f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        assert config.rdzv_configs["join_timeout"] == str(preset.rendezvous.join_timeout_seconds)
        assert config.rdzv_configs["read_timeout"] == str(preset.rendezvous.read_timeout_seconds)
        seen.append(config.node_rank)
        assert env[SHUTDOWN_TIMEOUT_ENV] == str(shutdown_timeout_s(preset.termination_grace_period_seconds))
    assert seen == list(range(preset.nodes))  # each pod its own machine rank, the operator's


def test_a_naive_accelerate_launch_keeps_neither_c10d_nor_the_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the render guards against: the operator's PET_RDZV_BACKEND / PET_MAX_RESTARTS are
    overridden by accelerate's defaults (static, 0)."""
    (job,) = prepare_workload(MULTI).manifests
    role, index, container = next(_pods(job))
    _, env = _pod_argv(job, role, index, container, tmp_path)
    env |= {"PET_RDZV_BACKEND": "c10d", "PET_MAX_RESTARTS": "3"}
    naive = ["accelerate", "launch", "--multi_gpu", "--num_machines=2", "--num_processes=16"]
    naive += [
        "--machine_rank=0",
        f"--main_process_ip={env['MASTER_ADDR']}",
        "--main_process_port=23456",
        "t.py",
    ]
    config = _torchrun_config(naive, env, tmp_path, monkeypatch)
    assert (config.rdzv_backend, config.max_restarts) == ("static", 0)


def test_one_node_runs_c10d_on_a_local_port_with_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = prepare_workload(SINGLE)
    (job,) = workload.manifests
    ((role, index, container),) = list(_pods(job))
    argv, env = _pod_argv(job, role, index, container, tmp_path)
    config = _torchrun_config(argv, env, tmp_path, monkeypatch)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("c10d", "localhost:0")
    assert (config.min_nodes, config.nproc_per_node) == (1, workload.approved.preset.gpus_per_pod)
    assert config.shutdown_timeout == shutdown_timeout_s(
        workload.approved.preset.termination_grace_period_seconds
    )


def test_the_rendered_command_splits_into_accelerates_head_and_the_entry_point() -> None:
    workload = prepare_workload(MULTI)
    launcher = split_command(list(workload.plan.command))
    assert launcher.kind == "accelerate" and launcher.head[:2] == ("accelerate", "launch")
    assert launcher.entry == tuple(workload.loaded.profile.command)


def test_the_config_sets_every_engineer_key_but_the_per_pod_address() -> None:
    # the address and port differ per job: the flags carry them ($(MASTER_ADDR), expanded)
    config = json.loads(config_text(2, 16))
    assert set(config) == set(ENGINEER_KEYS) - {"main_process_ip", "main_process_port"}
    assert (config["num_machines"], config["num_processes"], config["rdzv_backend"]) == (2, 16, "c10d")


def test_the_launcher_is_chosen_by_the_profile_except_on_one_gpu_and_elastic_presets() -> None:
    assert choose_launcher("multi-node", profile="accelerate") == "accelerate"
    assert choose_launcher("single-node", profile="accelerate") == "accelerate"
    assert choose_launcher("single-gpu", profile="accelerate") == "python"
    assert choose_launcher("multi-node", profile="accelerate", elastic=True) == "torchrun"


def write_profile_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _profile(tmp_path: Path, preset: str) -> Path:
    text = (
        SINGLE.read_text().replace("preset: h200-8gpu", f"preset: {preset}").replace("vision-lab", "nlp-lab")
    )
    return write_profile_text(tmp_path, text)


def test_an_elastic_preset_refuses_accelerate_with_the_reason(tmp_path: Path) -> None:
    code = run("validate", str(_profile(tmp_path, "h200-elastic-2to4x8-ib")))
    assert code.exit_code == 1, code.output
    assert "is elastic, which accelerate cannot express" in code.output
    assert "launcher: torchrun" in code.output


def test_a_command_that_starts_with_accelerate_is_told_to_use_the_field(tmp_path: Path) -> None:
    text = (
        SINGLE.read_text()
        .replace("launcher: accelerate\n", "")
        .replace("command: [sft.py,", "command: [accelerate, launch, --num_processes, '8', sft.py,")
    )
    result = run("validate", str(write_profile_text(tmp_path, text)))
    assert result.exit_code == 1, result.output
    assert "`launcher: accelerate`" in result.output
    assert "'sft.py', '--config'" in result.output


def test_a_site_or_preset_that_does_not_allow_accelerate_refuses_it(tmp_path: Path) -> None:
    registry = PresetRegistry(ROOT / "presets")
    site = registry.site()
    assert site.launchers == ["torchrun", "accelerate"]  # the shipped site (the default)
    from runai_spec.check.launcher import check_launcher
    from runai_spec.check.rules import Context

    workload = prepare_workload(SINGLE)
    narrowed = workload.approved._replace(
        preset=workload.approved.preset.model_copy(update={"launchers": ["torchrun"]})
    )
    ctx = Context(workload.loaded, narrowed, site, workload.plan, workload.manifests)
    messages = [f.message for f in check_launcher(ctx)]
    assert messages == ["preset 'h200-8gpu' does not allow launcher 'accelerate' (allowed here: torchrun)"]
    ctx = Context(
        workload.loaded,
        workload.approved,
        site.model_copy(update={"launchers": ["torchrun"]}),
        workload.plan,
        workload.manifests,
    )
    assert [f.message for f in check_launcher(ctx)] == [
        "the site does not allow launcher 'accelerate' (allowed here: torchrun)"
    ]


def _strategy_profile(tmp_path: Path, base: Path, strategy: str, config: Mapping[str, Any]) -> Path:
    """BASE's profile with STRATEGY and an accelerate_config CONFIG beside it."""
    (tmp_path / "accelerate.json").write_text(json.dumps(config), encoding="utf-8")
    text = (
        base.read_text()
        .replace("strategy: ddp\n", f"strategy: {strategy}\n")
        .replace("working_dir: /workspace\n", "working_dir: /workspace\naccelerate_config: accelerate.json\n")
    )
    return write_profile_text(tmp_path, text)


def _validated(argv: list[str], env: dict[str, str], tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """accelerate 1.16.0's own parsing and validation of ARGV (the config file read) in ENV."""
    from accelerate.commands.launch import (
        _validate_launch_command,
        launch_command_parser,
    )

    monkeypatch.setattr("os.environ", dict(env))
    monkeypatch.setenv("HF_HOME", str(tmp / "hf"))
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(argv[2:]))
    return args


FSDP = {"fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_state_dict_type": "SHARDED_STATE_DICT"}}


@pytest.mark.parametrize("base", [MULTI, SINGLE], ids=["multi-node", "single-node"])
def test_strategy_fsdp_launches_fsdp_with_the_configs_fsdp_settings(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--multi_gpu would pick MULTI_GPU and pass none of fsdp_config on (no ACCELERATE_USE_FSDP):
    the strategy's --use_fsdp makes launch_command run FSDP, its settings in the ranks' env."""
    from accelerate.utils.launch import prepare_multi_gpu_env

    workload = prepare_workload(_strategy_profile(tmp_path, base, "fsdp", FSDP))
    (job,) = workload.manifests
    role, index, container = next(_pods(job))
    argv, env = _pod_argv(job, role, index, container, tmp_path)
    assert "--use_fsdp" in argv and "--multi_gpu" not in argv
    with monkeypatch.context() as m:
        args = _validated(argv, env, tmp_path, m)
        assert (args.use_fsdp, args.multi_gpu, args.use_deepspeed) == (True, False, False)
        ranks = prepare_multi_gpu_env(args)
    assert ranks["ACCELERATE_USE_FSDP"] == "true"
    assert ranks["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD"
    assert ranks["FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"
    with monkeypatch.context() as m:  # what the render wrote before: the config does nothing
        old = _validated([a if a != "--use_fsdp" else "--multi_gpu" for a in argv], env, tmp_path, m)
        assert "ACCELERATE_USE_FSDP" not in prepare_multi_gpu_env(old)
    with monkeypatch.context() as m:  # torchrun's semantics stay the render's
        config = _torchrun_config(argv, env, tmp_path, m)
    assert config.rdzv_backend == "c10d" and config.nproc_per_node == workload.approved.preset.gpus_per_pod
    if base == MULTI:
        assert config.max_restarts == workload.approved.preset.rendezvous.max_restarts


@pytest.mark.parametrize("base", [MULTI, SINGLE], ids=["multi-node", "single-node"])
def test_strategy_deepspeed_launches_deepspeed_through_torchrun_on_every_pod(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--use_deepspeed: deepspeed_launcher; on several pods only `--deepspeed_multinode_launcher
    standard` keeps it torchrun in accelerate's process (prepare_deepspeed_cmd_env returns no
    command); its default, pdsh, would run DeepSpeed's own runner over ssh."""
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    config = {"deepspeed_config": {"zero_stage": 2, "offload_optimizer_device": "none"}}
    workload = prepare_workload(_strategy_profile(tmp_path, base, "deepspeed", config))
    (job,) = workload.manifests
    role, index, container = next(_pods(job))
    argv, env = _pod_argv(job, role, index, container, tmp_path)
    multi = base == MULTI
    assert "--use_deepspeed" in argv and "--multi_gpu" not in argv
    assert ("--deepspeed_multinode_launcher=standard" in argv) == multi
    with monkeypatch.context() as m:
        args = _validated(argv, env, tmp_path, m)
        assert (args.use_deepspeed, args.multi_gpu, args.use_fsdp) == (True, False, False)
        args.deepspeed_fields_from_accelerate_config = "zero_stage"
        cmd, ranks = prepare_deepspeed_cmd_env(args)
    assert cmd is None  # torchrun (_run_torchrun), never the pdsh runner
    assert ranks["ACCELERATE_USE_DEEPSPEED"] == "true" and ranks["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "2"
    if multi:
        with monkeypatch.context() as m:  # without the flag: DeepSpeed's pdsh runner
            naive = _validated(
                [a for a in argv if not a.startswith("--deepspeed_multinode")], env, tmp_path, m
            )
            naive.deepspeed_fields_from_accelerate_config = ""
            assert prepare_deepspeed_cmd_env(naive)[0][0] == "deepspeed"
    with monkeypatch.context() as m:
        torchrun = _torchrun_config(argv, env, tmp_path, m)
    assert torchrun.rdzv_backend == "c10d"


@pytest.mark.parametrize("base", [MULTI, SINGLE], ids=["multi-node", "single-node"])
@pytest.mark.parametrize("config", [{}, {"deepspeed_config": {"zero_stage": 3}}], ids=["no-config", "config"])
def test_strategy_deepspeed_runs_the_profiles_zero_stage(
    base: Path, config: Mapping[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile's zero_stage reaches the ranks as accelerate's --zero_stage: the tool's
    config carries no stage of its own (only a researcher's deepspeed_config.zero_stage, which
    validate holds equal), and with none DeepSpeedPlugin runs stage 2 (accelerate 1.16.0
    utils/dataclasses.py) whatever the profile and its memory estimate say."""
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    path = _strategy_profile(tmp_path, base, "deepspeed", config)
    path.write_text(path.read_text().replace("strategy: deepspeed\n", "strategy: deepspeed\nzero_stage: 3\n"))
    workload = prepare_workload(path)
    assert [f.message for f in workload.errors] == []
    (job,) = workload.manifests
    role, index, container = next(_pods(job))
    argv, env = _pod_argv(job, role, index, container, tmp_path)
    assert argv.count("--zero_stage=3") == 1
    i = list(workload.plan.launcher).index("--zero_stage=3")
    assert workload.plan.origins[f"launcher[{i}]"].field == "zero_stage"
    with monkeypatch.context() as m:
        args = _validated(argv, env, tmp_path, m)
        args.deepspeed_fields_from_accelerate_config = ",".join(config.get("deepspeed_config", {}))
        _, ranks = prepare_deepspeed_cmd_env(args)
    assert ranks["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    with monkeypatch.context() as m:  # the render before: the config's stage or none at all
        old = _validated([a for a in argv if a != "--zero_stage=3"], env, tmp_path, m)
        old.deepspeed_fields_from_accelerate_config = ""
        stage = prepare_deepspeed_cmd_env(old)[1].get("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    assert stage == ("3" if config else None)


def test_only_strategy_deepspeed_renders_a_zero_stage() -> None:
    workload = prepare_workload(MULTI)
    assert workload.loaded.profile.zero_stage is None
    assert not [a for a in workload.plan.launcher if a.startswith("--zero_stage")]


def test_the_smoke_job_meets_under_its_own_rendezvous_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """accelerate has no --rdzv_id: torchrun reads PET_RDZV_ID, which the smoke job sets to its
    own name, as torchrun's smoke job passes its own --rdzv-id (a smoke test beside the real
    job never joins the real job's rendezvous)."""
    from runai_spec.pipeline.smoke import smoke_names, smoke_workload

    workload = prepare_workload(MULTI)
    _, job = smoke_workload(workload)
    ids = set()
    for role, index, container in _pods(job):
        argv, env = _pod_argv(job, role, index, container, tmp_path)
        with monkeypatch.context() as m:
            config = _torchrun_config(argv, env, tmp_path, m)
        ids.add(config.run_id)
        assert (config.rdzv_backend, config.max_restarts) == ("c10d", 0)
    assert ids == {smoke_names(workload.plan.name)[0]}
