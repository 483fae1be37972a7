"""The probe profiles a preset is rendered on: every value a profile can set, as two distinct texts."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ...load.profile import Profile
from ...load.registry import ApprovedPreset
from ...load.site import Site

# -- probe profiles -----------------------------------------------------------------------
# Each value a profile can set, as two distinct texts (probe A, probe B), the rule that admits
# it and the profile field it is (profile_fields()'s path). The texts are unlike anything a
# preset or template writes, so that finding one in a rendered leaf says where the leaf came
# from. A profile field with no token is UNPROBED, with the reason: tests/outputs/admission/
# test_admission_probes.py fails for a field of the profile model that is neither.


@dataclass(frozen=True)
class Token:
    a: Any
    b: Any
    rule: str
    field: str  # the profile field it stands for, as profile_fields() spells it


def profile_fields(model: type[BaseModel] = Profile, prefix: str = "") -> tuple[str, ...]:
    """Every value a profile can set, derived from the profile model: `checkpoint.dir`,
    `command[]` (a list's items), `env{key}` and `env{value}` (a mapping's keys and values),
    `secret_env{value}.secret` (a field of a mapping's values)."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        out += _field_paths(info.annotation, f"{prefix}{info.alias or name}")
    return tuple(out)


def _field_paths(annotation: Any, path: str) -> list[str]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _field_paths(args[0], path)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return _field_paths(kept[0], path) if len(kept) == 1 else [path]
    if origin is list:
        return _field_paths(args[0], f"{path}[]")
    if origin is dict:
        return [*_field_paths(args[0], f"{path}{{key}}"), *_field_paths(args[1], f"{path}{{value}}")]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(profile_fields(annotation, f"{path}."))
    return [path]


# The profile's fields with no token, and why no render depends on them through the profile:
# the probes render each preset once per entry kind and world, so a field here that starts to
# reach the manifest must get a token instead.
UNPROBED = {
    "preset": "the preset being rendered: the policy's gate is per preset",
    "command[]": "the entry point (ENTRY_KINDS) and the arguments (arg tokens) are probed by position",
    "torch_version": "read by validate's shutdown-window warning only",
    "launcher": "a choice, not a value: each launcher the preset allows is rendered on its own "
    "probes and gets its own checks (gate.preset_gates)",
    "batch.global": "derived: the probes set local x grad_accum x world",
    "strategy": "a choice, not a value: each strategy the preset allows is rendered on its own "
    "probes (torchrun's renders do not carry it and are one gate; accelerate's carry it: "
    "--use_fsdp, --use_deepspeed), each with its own checks (gate.preset_gates)",
    "model.parameters": "the memory estimate's: the render does not carry it",
    "model.precision": "the memory estimate's: the render does not carry it",
    "model.sequence_length": "the memory estimate's: the render does not carry it",
    "model.optimizer": "the memory estimate's: the render does not carry it",
    "checkpoint.source": "a data source resolves to its claim, which checkpoint.pvc probes",
    "checkpoint.on_sigterm": "a switch: the full probe sets it, the minimal one does not",
    "data[].source": "a data source resolves to its claim, which data[].pvc probes",
    "metrics.writer": "validate's rank0-metrics rule: the render does not carry it",
    "metrics.tracker": "the render does not carry it",
    "diagnostics.nccl_debug": "a switch: the full probe sets it, the minimal one does not",
}


def probe_tokens(minimal: bool) -> dict[str, Token]:
    t = {
        "name": Token("qzjoba", "qzjobb", "name", "name"),
        "project": Token("qzproja", "qzprojb", "project", "project"),
        "image": Token(
            "{registry}/qzimga/train:qztaga@sha256:" + "a" * 64,
            "{registry}/qzimgb/train:qztagb@sha256:" + "b" * 64,
            "image",
            "image",
        ),
        "checkpoint.dir": Token("/qzckpta", "/qzckptb", "mount", "checkpoint.dir"),
        "checkpoint.pvc": Token("qzpvca", "qzpvcb", "claim", "checkpoint.pvc"),
        "checkpoint.resume": Token("qzresumea", "qzresumeb", "text", "checkpoint.resume"),
        "checkpoint.format": Token("dcp", "safetensors", "checkpoint-format", "checkpoint.format"),
        "batch.local": Token("3", "5", "count", "batch.local"),
        "batch.grad_accum": Token("2", "7", "count", "batch.grad_accum"),
        # a deepspeed probe's stage (validate requires one): accelerate renders --zero_stage
        "zero_stage": Token("0", "1", "zero-stage", "zero_stage"),
    }
    if minimal:
        return t
    t.update(
        {
            "working_dir": Token("/qzwda", "/qzwdb", "working-dir", "working_dir"),
            "arg1": Token("qzarg1a", "qzarg1b", "arg", "command[]"),
            "arg2": Token("qzarg2a", "qzarg2b", "arg", "command[]"),
            "env1": Token("QZENV1A", "QZENV1B", "env-name", "env{key}"),
            "env1.value": Token("qzval1a", "qzval1b", "env-value", "env{value}"),
            "env2": Token("QZENV2A", "QZENV2B", "env-name", "env{key}"),
            "env2.value": Token("qzval2a", "qzval2b", "env-value", "env{value}"),
            "secret1": Token("QZSEC1A", "QZSEC1B", "env-name", "secret_env{key}"),
            "secret1.secret": Token("qzsecreta1", "qzsecretb1", "secret", "secret_env{value}.secret"),
            "secret1.key": Token("qzkeya1", "qzkeyb1", "secret-key", "secret_env{value}.key"),
            "secret2": Token("QZSEC2A", "QZSEC2B", "env-name", "secret_env{key}"),
            "secret2.secret": Token("qzsecreta2", "qzsecretb2", "secret", "secret_env{value}.secret"),
            "secret2.key": Token("qzkeya2", "qzkeyb2", "secret-key", "secret_env{value}.key"),
            "data0.path": Token("/qzdata0a", "/qzdata0b", "mount", "data[].path"),
            "data0.pvc": Token("qzclaim0a", "qzclaim0b", "claim", "data[].pvc"),
            "data1.path": Token("/qzdata1a", "/qzdata1b", "mount", "data[].path"),
            "data1.pvc": Token("qzclaim1a", "qzclaim1b", "claim", "data[].pvc"),
            "data.read_only": Token(True, False, "bool", "data[].read_only"),
            "reason": Token("qzreasona", "qzreasonb", "text", "diagnostics.reason"),
            # the researcher's part of the rendered accelerate config (facts.accelerate.config_text)
            "accelerate_config": Token(
                '"qzaccela":1,', '"qzaccelb":1,', "accelerate-config", "accelerate_config"
            ),
        }
    )
    return t


ENTRY_KINDS = {  # entry point kind -> (probe A's command head, probe B's, rule of its items)
    "python": (["qzentrya.py"], ["qzentryb.py"], ["entry-python"]),
    "executable": (["./qzentrya.sh"], ["./qzentryb.sh"], ["entry-executable"]),
    "shell": (["bash", "./qzentrya.sh"], ["bash", "./qzentryb.sh"], ["shell", "script"]),
    "module": (["-m", "qzmodulea"], ["-m", "qzmoduleb"], ["pin", "module"]),
}


def probe_profile(
    approved: ApprovedPreset,
    site: Site,
    side: str,
    *,
    minimal: bool,
    entry: str = "python",
    world: int = 1,
    launcher: str | None = None,
    strategy: str | None = None,
) -> dict[str, Any]:
    """Probe SIDE (a or b) of APPROVED: the full or MINIMAL profile, with the ENTRY kind, the
    global batch of WORLD processes, LAUNCHER (else the profile's default) and STRATEGY (else
    the preset's first)."""
    tokens = probe_tokens(minimal)

    def v(key: str) -> Any:
        value = getattr(tokens[key], side)
        return value.replace("{registry}", site.registries[0]) if isinstance(value, str) else value

    head = ENTRY_KINDS[entry][0 if side == "a" else 1]
    preset = approved.preset
    profile: dict[str, Any] = {
        "name": v("name"),
        "project": v("project"),
        "preset": approved.name,
        "image": v("image"),
        "command": list(head),
        "batch": {
            "local": int(v("batch.local")),
            "grad_accum": int(v("batch.grad_accum")),
            "global": world * int(v("batch.local")) * int(v("batch.grad_accum")),
        },
        "strategy": strategy or preset.strategies[0],
        "checkpoint": {
            "dir": v("checkpoint.dir"),
            "pvc": v("checkpoint.pvc"),
            "resume": v("checkpoint.resume"),
            "format": v("checkpoint.format"),
        },
        "metrics": {"writer": "rank0"},
    }
    if launcher is not None:
        profile["launcher"] = launcher
    if profile["strategy"] == "deepspeed":
        profile["zero_stage"] = int(v("zero_stage"))
    if minimal:
        return profile
    profile["command"] += [v("arg1"), v("arg2")]
    profile["working_dir"] = v("working_dir")
    profile["env"] = {v("env1"): v("env1.value"), v("env2"): v("env2.value")}
    profile["secret_env"] = {
        v(f"secret{i}"): {"secret": v(f"secret{i}.secret"), "key": v(f"secret{i}.key")} for i in (1, 2)
    }
    profile["data"] = [
        {"pvc": v(f"data{i}.pvc"), "path": v(f"data{i}.path"), "read_only": v("data.read_only")}
        for i in (0, 1)
    ]
    profile["diagnostics"] = {"nccl_debug": True, "reason": v("reason")}
    profile["checkpoint"]["on_sigterm"] = True
    if launcher == "accelerate" and preset.layout != "single-gpu":  # one GPU runs python
        profile["accelerate_config"] = ACCELERATE_CONFIG_FILE
    return profile


# The file a full probe's accelerate_config names (shape writes it beside the probe profile),
# and its content: one researcher key, the accelerate_config token's text once rendered.
ACCELERATE_CONFIG_FILE = "qzaccel.json"


def probe_accelerate_config(side: str) -> dict[str, Any]:
    return {f"qzaccel{side}": 1}
