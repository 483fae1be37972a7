"""Rules on the researcher's accelerate config: training keys only, and none that contradicts the profile."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..facts.accelerate import ENGINEER_DEEPSPEED_KEYS, ENGINEER_KEYS, ENGINEER_PREFIXES
from ..findings import Finding
from .rules import Context, finding, rule

FIELD = "accelerate_config"
# accelerate's mixed_precision (utils/dataclasses.py PrecisionType) -> the profile's precisions
_PRECISIONS = {"no": ("fp32", "tf32"), "bf16": ("bf16",), "fp16": ("fp16",), "fp8": ("fp8",)}
# the config's plugin block -> the profile strategy it belongs to
_PLUGINS = {"fsdp_config": "fsdp", "deepspeed_config": "deepspeed"}
# DeepSpeed's batch arithmetic in the config -> the profile's batch field (DESIGN 4.9)
_DS_BATCH = {
    "gradient_accumulation_steps": "grad_accum",
    "train_micro_batch_size_per_gpu": "local",
    "train_batch_size": "global_",
}

# -- the engineers' keys, one definition for validate and the admission policy ----------------
# A key is the engineers' by its name wherever it stands in the config (DESIGN 4.7's list,
# facts.accelerate): accelerate 1.16.0's own nested blocks (fsdp_config, deepspeed_config,
# dynamo_config, megatron_lm_config, fp8_config) use none of these names, and the policy reads
# the rendered config as text, where a key's depth is not a regular language.
_NAMES = "|".join(re.escape(k) for k in (*ENGINEER_KEYS, *ENGINEER_DEEPSPEED_KEYS))
_PREFIXES = "|".join(re.escape(p) for p in ENGINEER_PREFIXES)
ENGINEER_NAME = f"({_NAMES}|({_PREFIXES}).*)"
_WS = "[ \\t\\n\\r]*"  # JSON's white space
# An engineers' key as a JSON object key in a config's text, after the `{` or `,` before it
# (inside a string a quote is escaped, so `,"name":` there is always a key): the name spelled out.
CONFIG_KEY_TAIL = f'{_WS}"({_NAMES}|({_PREFIXES})([^"\\\\]|\\\\.)*)"{_WS}:'
# After a character that is not a backslash: a `\\u00XX` escape of a printable ASCII character,
# which could spell a name another way (json.dumps writes those characters as themselves).
CONFIG_ESCAPE_TAIL = r"(\\\\)*\\u00[2-7][0-9a-fA-F]"


def engineer_name(key: object) -> bool:
    """Whether KEY, a key anywhere in an accelerate config, is the engineers'."""
    return isinstance(key, str) and re.fullmatch(ENGINEER_NAME, key, re.DOTALL) is not None


def engineer_paths(config: object, path: str = "") -> list[str]:
    """The engineers' keys CONFIG sets, at any depth, as dotted paths (`num_machines`,
    `deepspeed_config.deepspeed_hostfile`); an engineers' key's own value is not descended."""
    out: list[str] = []
    if isinstance(config, Mapping):
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            out += [where] if engineer_name(key) else engineer_paths(value, where)
    elif isinstance(config, list):
        for i, value in enumerate(config):
            out += engineer_paths(value, f"{path}[{i}]")
    return out


@rule(
    "accelerate-config",
    "error",
    "The accelerate config sets training keys only, and agrees with the profile",
)
def check_accelerate_config(ctx: Context) -> Iterator[Finding]:
    """`accelerate_config` (`launcher: accelerate`) passes its training keys into the config
    runai-spec renders: mixed precision, FSDP and DeepSpeed settings, dynamo. The keys that
    decide topology, transport and the machine are the engineers' (accelerate 1.16.0 reads them
    from the config for every flag left unset): `compute_environment`, `distributed_type`,
    `num_machines`, `machine_rank`, `num_processes`, `main_process_ip`, `main_process_port`,
    `same_network`, `rdzv_backend`, `gpu_ids`, `use_cpu`, `enable_cpu_affinity`,
    `mpirun_config`, `tpu_*`, and DeepSpeed's `deepspeed_multinode_launcher`,
    `deepspeed_hostfile`, `deepspeed_inclusion_filter`, `deepspeed_exclusion_filter`: each is
    refused with a line, wherever it stands in the config. A config that contradicts the
    profile is refused too: a plugin block of another strategy, `mixed_precision` other than
    `model.precision`, DeepSpeed's ZeRO stage or batch arithmetic other than the profile's. A
    DeepSpeed config file it names is warned of: accelerate takes the stage and the batch from
    the file over the rendered flags, and the file is in the image."""
    loaded = ctx.loaded
    config = loaded.accelerate_config
    if config is None:
        return
    profile = loaded.profile
    if profile.launcher != "accelerate" or ctx.approved.preset.layout == "single-gpu":
        yield finding(
            ctx,
            "accelerate-config",
            FIELD,
            "the accelerate config has no effect: accelerate launch runs only with `launcher: "
            "accelerate` on a multi-GPU preset (one GPU runs python)",
            "remove accelerate_config, or write `launcher: accelerate`",
        )
        return
    for path in engineer_paths(config):
        yield finding(
            ctx,
            "accelerate-config",
            FIELD,
            f"{path}: the engineers' key (topology, transport or the machine): the preset and "
            "the rendered flags decide it",
            f"remove {path} from {profile.accelerate_config}",
        )
    yield from _contradictions(ctx, config)


def _contradictions(ctx: Context, config: Mapping[str, Any]) -> Iterator[Finding]:
    profile = ctx.loaded.profile
    name = profile.accelerate_config
    for block, strategy in _PLUGINS.items():
        if config.get(block) and profile.strategy != strategy:
            yield finding(
                ctx,
                "accelerate-config",
                FIELD,
                f"{block} configures {strategy}, but the profile's strategy is {profile.strategy}",
                f"set `strategy: {strategy}` (if the preset allows it), or remove {block} from {name}",
            )
    mixed = config.get("mixed_precision")
    model = profile.model
    if mixed is not None and model is not None and model.precision not in _PRECISIONS.get(str(mixed), ()):
        yield finding(
            ctx,
            "accelerate-config",
            FIELD,
            f"mixed_precision {mixed!r} contradicts model.precision {model.precision!r}",
            "make them say the same (the engineers approve the memory estimate of model.precision)",
        )
    ds = config.get("deepspeed_config")
    if not isinstance(ds, Mapping):
        return
    yield from _deepspeed_file(ctx, ds)
    stage = ds.get("zero_stage")
    if stage is not None and profile.zero_stage is not None and stage != profile.zero_stage:
        yield finding(
            ctx,
            "accelerate-config",
            FIELD,
            f"deepspeed_config.zero_stage {stage} contradicts zero_stage {profile.zero_stage}",
            "make them say the same",
        )
    for key, field in _DS_BATCH.items():
        value, ours = ds.get(key), getattr(profile.batch, field)
        if value not in (None, "auto") and value != ours:
            yield finding(
                ctx,
                "accelerate-config",
                FIELD,
                f"deepspeed_config.{key} {value} contradicts batch.{field.rstrip('_')} {ours}",
                "make them say the same, or write `auto` (DeepSpeed asserts the batch arithmetic)",
            )


def _deepspeed_file(ctx: Context, ds: Mapping[str, Any]) -> Iterator[Finding]:
    """A DeepSpeed config file named in the accelerate config: accelerate 1.16.0's
    DeepSpeedPlugin reads it and takes the ZeRO stage, the batch arithmetic and the offload
    from it wherever it holds a value other than `auto` (utils/dataclasses.py,
    DeepSpeedPlugin.__post_init__'s plugin_to_config_mapping), over the rendered --zero_stage;
    the file is in the image, where validate cannot read it."""
    path = ds.get("deepspeed_config_file")
    if not isinstance(path, str) or path in ("", "none"):
        return
    stage = ctx.loaded.profile.zero_stage
    yield finding(
        ctx,
        "accelerate-config",
        FIELD,
        f"deepspeed_config.deepspeed_config_file {path!r}: accelerate takes the ZeRO stage and the "
        "batch arithmetic from that file wherever it has a value other than `auto`, over "
        f"the rendered --zero_stage{'' if stage is None else f'={stage}'} and the profile's batch, "
        "and validate cannot read it (it is in the image)",
        "write `auto` for zero_optimization.stage, gradient_accumulation_steps and "
        "train_micro_batch_size_per_gpu in the file, or say them in the profile and drop the file",
        severity="warning",
    )
