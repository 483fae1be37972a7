"""The probe profiles a preset is rendered on: every value a profile can set, as two distinct texts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...load.registry import ApprovedPreset
from ...load.site import Site

# -- probe profiles -----------------------------------------------------------------------
# Each value a profile can set, as two distinct texts (probe A, probe B) and the rule that
# admits it. The texts are unlike anything a preset or template writes, so that finding one
# in a rendered leaf says where the leaf came from.


@dataclass(frozen=True)
class Token:
    a: Any
    b: Any
    rule: str


def probe_tokens(minimal: bool) -> dict[str, Token]:
    t = {
        "name": Token("qzjoba", "qzjobb", "name"),
        "project": Token("qzproja", "qzprojb", "project"),
        "image": Token(
            "{registry}/qzimga/train:qztaga@sha256:" + "a" * 64,
            "{registry}/qzimgb/train:qztagb@sha256:" + "b" * 64,
            "image",
        ),
        "checkpoint.dir": Token("/qzckpta", "/qzckptb", "mount"),
        "checkpoint.pvc": Token("qzpvca", "qzpvcb", "claim"),
        "checkpoint.resume": Token("qzresumea", "qzresumeb", "text"),
        "checkpoint.format": Token("dcp", "safetensors", "checkpoint-format"),
        "batch.local": Token("3", "5", "count"),
        "batch.grad_accum": Token("2", "7", "count"),
    }
    if minimal:
        return t
    t.update(
        {
            "working_dir": Token("/qzwda", "/qzwdb", "working-dir"),
            "arg1": Token("qzarg1a", "qzarg1b", "arg"),
            "arg2": Token("qzarg2a", "qzarg2b", "arg"),
            "env1": Token("QZENV1A", "QZENV1B", "env-name"),
            "env1.value": Token("qzval1a", "qzval1b", "env-value"),
            "env2": Token("QZENV2A", "QZENV2B", "env-name"),
            "env2.value": Token("qzval2a", "qzval2b", "env-value"),
            "secret1": Token("QZSEC1A", "QZSEC1B", "env-name"),
            "secret1.secret": Token("qzsecreta1", "qzsecretb1", "secret"),
            "secret1.key": Token("qzkeya1", "qzkeyb1", "secret-key"),
            "secret2": Token("QZSEC2A", "QZSEC2B", "env-name"),
            "secret2.secret": Token("qzsecreta2", "qzsecretb2", "secret"),
            "secret2.key": Token("qzkeya2", "qzkeyb2", "secret-key"),
            "data0.path": Token("/qzdata0a", "/qzdata0b", "mount"),
            "data0.pvc": Token("qzclaim0a", "qzclaim0b", "claim"),
            "data1.path": Token("/qzdata1a", "/qzdata1b", "mount"),
            "data1.pvc": Token("qzclaim1a", "qzclaim1b", "claim"),
            "data.read_only": Token(True, False, "bool"),
            "reason": Token("qzreasona", "qzreasonb", "text"),
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
    approved: ApprovedPreset, site: Site, side: str, *, minimal: bool, entry: str = "python", world: int = 1
) -> dict[str, Any]:
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
        "strategy": preset.strategies[0],
        "checkpoint": {
            "dir": v("checkpoint.dir"),
            "pvc": v("checkpoint.pvc"),
            "resume": v("checkpoint.resume"),
            "format": v("checkpoint.format"),
        },
        "metrics": {"writer": "rank0"},
    }
    if preset.strategies[0] == "deepspeed":
        profile["zero_stage"] = 0
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
    return profile
