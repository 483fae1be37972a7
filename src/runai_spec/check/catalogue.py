"""Every site rule in the catalogue's order, what each reads, and one call that runs them all."""

from __future__ import annotations

from ..findings import Finding
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
    check_shutdown_window,
    check_sigterm_one_gpu,
    check_strategy,
)

# The catalogue's order: `runai-spec rules`, docs/rules.md and every report's findings follow
# it (tests/check/test_rules_catalogue.py keeps it complete).
CHECKS: tuple[RuleFn, ...] = (
    check_reserved,
    check_nccl_transport,
    check_nccl_debug,
    check_operator_env,
    check_image_digest,
    check_registry,
    check_global_batch,
    check_strategy,
    check_name_length,
    check_smoke_name,
    check_checkpoint,
    check_data_sources,
    check_mount_paths,
    check_launcher,
    check_nproc,
    check_preemptible_resume,
    check_sigterm_one_gpu,
    check_shutdown_window,
    check_rank0_metrics,
    check_replica_fits,
    check_deepspeed_autotune,
    check_preset_expiry,
    check_secret_env,
    check_preset_granted,
)
RULES: dict[str, Rule] = {
    entry.id: entry for check in CHECKS for entry in REGISTRY.values() if entry.check is check
}


# The profile's top-level fields each rule reads (beyond its findings' own fields): when one
# of them did not parse, the rule's findings are left out rather than guessed (issue 16 #4).
# A rule missing here is left out whenever any field did not parse; tests keep this complete.
READS: dict[str, tuple[str, ...]] = {
    "reserved-field": (),
    "nproc-gpus": (),
    "preset-expired": (),
    "nccl-transport-env": ("env", "secret_env"),
    "reserved-env": ("env", "secret_env"),
    "nccl-debug-temporary": ("env", "secret_env", "diagnostics"),
    "image-digest": ("image",),
    "registry": ("image",),
    "global-batch": ("batch",),
    "strategy-allowed": ("strategy", "zero_stage"),
    "name-length": ("name", "project"),
    "checkpoint-on-pvc": ("checkpoint",),
    "data-source": ("checkpoint", "data"),
    "launcher": ("command",),
    "preemptible-needs-resume": ("checkpoint",),
    "rank0-metrics": ("metrics",),
    "sigterm-one-gpu": ("checkpoint",),
    "shutdown-window": ("checkpoint", "torch_version"),
    "ddp-replica-fits": ("model", "strategy", "zero_stage"),
    "deepspeed-autotune": ("command", "env"),
    "secret-env": ("env", "secret_env", "command"),
    "preset-not-granted": ("project",),
    "smoke-name": ("name",),
    "mount-path": ("checkpoint", "data", "working_dir"),
}


def check_all(ctx: Context) -> list[Finding]:
    """Every rule's findings, in rule order; never stops at the first."""
    findings: list[Finding] = []
    for entry in RULES.values():
        findings.extend(entry.check(ctx))
    return findings
