"""Every site rule in the catalogue's order, what each reads, and one call that runs them all."""

from __future__ import annotations

from ..findings import Finding
from .accelerate import check_accelerate_config
from .env import check_nccl_debug, check_nccl_transport, check_operator_env, check_secret_env
from .identity import (
    check_image_digest,
    check_name_length,
    check_preset_expiry,
    check_preset_granted,
    check_registry,
    check_reserved,
    check_smoke_name,
)
from .launcher import check_launcher, check_nproc
from .rules import REGISTRY, Context, Rule, RuleFn
from .storage import check_checkpoint, check_data_sources, check_mount_paths
from .training import (
    check_deepspeed_autotune,
    check_global_batch,
    check_preemptible_resume,
    check_rank0_metrics,
    check_replica_fits,
    check_sharded_state_fits,
    check_shutdown_window,
    check_sigterm_one_gpu,
    check_strategy,
)

# The catalogue's order (`runai-spec rules`, docs/rules.md and every report's findings follow
# it), and the profile's top-level fields each rule reads beyond its findings' own fields: when
# one of them did not parse, the rule's findings are left out rather than guessed (issue 16 #4).
# Each rule's id is its decorator's alone (tests/check/test_rules_catalogue.py keeps this
# complete: a registered site rule missing here fails it).
CATALOGUE: tuple[tuple[RuleFn, tuple[str, ...]], ...] = (
    (check_reserved, ()),
    (check_nccl_transport, ("env", "secret_env")),
    (check_nccl_debug, ("env", "secret_env", "diagnostics")),
    (check_operator_env, ("env", "secret_env")),
    (check_image_digest, ("image",)),
    (check_registry, ("image",)),
    (check_global_batch, ("batch",)),
    (check_strategy, ("strategy", "zero_stage")),
    (check_name_length, ("name", "project")),
    (check_smoke_name, ("name",)),
    (check_checkpoint, ("checkpoint",)),
    (check_data_sources, ("checkpoint", "data")),
    (check_mount_paths, ("checkpoint", "data", "working_dir")),
    (check_launcher, ("command", "launcher")),
    (check_accelerate_config, ("accelerate_config", "launcher", "strategy", "zero_stage", "batch", "model")),
    (check_nproc, ()),
    (check_preemptible_resume, ("checkpoint",)),
    (check_sigterm_one_gpu, ("checkpoint",)),
    (check_shutdown_window, ("checkpoint", "torch_version")),
    (check_rank0_metrics, ("metrics",)),
    (check_replica_fits, ("model", "strategy", "zero_stage")),
    (check_sharded_state_fits, ("model", "strategy", "zero_stage")),
    (check_deepspeed_autotune, ("command", "env")),
    (check_preset_expiry, ()),
    (check_secret_env, ("env", "secret_env", "command")),
    (check_preset_granted, ("project",)),
)
CHECKS: tuple[RuleFn, ...] = tuple(check for check, _ in CATALOGUE)
_BY_CHECK = {entry.check: entry for entry in REGISTRY.values() if entry.kind == "site"}
RULES: dict[str, Rule] = {_BY_CHECK[check].id: _BY_CHECK[check] for check in CHECKS}
READS: dict[str, tuple[str, ...]] = {_BY_CHECK[check].id: reads for check, reads in CATALOGUE}


def check_all(ctx: Context) -> list[Finding]:
    """Every rule's findings, in rule order; never stops at the first."""
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(ctx))
    return findings
