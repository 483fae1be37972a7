"""Rules on the training: batch arithmetic, strategy, restarts and preemption, metrics, memory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from ..facts.torchrun import SHUTDOWN_TIMEOUT_ENV, shutdown_timeout_s
from ..findings import Finding
from ..plan.launcher import launcher_named
from ..plan.memory import MemoryEstimate, memory_estimate
from .env import env_line
from .rules import Context, finding, rule

# The ids of this module's rules, each spelled once (rules.py's registry: `runai-spec rules`).
GLOBAL_BATCH = "global-batch"
STRATEGY_ALLOWED = "strategy-allowed"
PREEMPTIBLE_NEEDS_RESUME = "preemptible-needs-resume"
SIGTERM_ONE_GPU = "sigterm-one-gpu"
SHUTDOWN_WINDOW = "shutdown-window"
RANK0_METRICS = "rank0-metrics"
DDP_REPLICA_FITS = "ddp-replica-fits"
MODEL_STATE_FITS = "model-state-fits"
DEEPSPEED_AUTOTUNE = "deepspeed-autotune"


@rule(GLOBAL_BATCH, "error", "global batch = local x processes x grad_accum", milder=("warning",))
def check_global_batch(ctx: Context) -> Iterator[Finding]:
    """The guide: record local batch, accumulation and the intended global batch."""
    batch = ctx.loaded.profile.batch
    procs = ctx.plan.world_size
    expected = batch.local * procs * batch.grad_accum
    elastic = ctx.plan.elastic
    scales = elastic is not None and elastic.min_pods != elastic.max_pods
    # an elastic job declares its global batch at the most pods (the rendered world size);
    # the error and the warning below both say so, and name the same number (issue 26 item 2)
    at_most = (
        f" (at {elastic.max_pods} pods, the elastic preset's most)"
        if (elastic is not None and scales)
        else ""
    )
    if expected != batch.global_:
        yield finding(
            ctx,
            GLOBAL_BATCH,
            "batch.global",
            f"{batch.global_} != local {batch.local} x processes {procs} x "
            f"grad_accum {batch.grad_accum} = {expected}{at_most}",
            f"set batch.global to {expected}, or change local/grad_accum",
        )
    if elastic is not None and scales:
        low = batch.local * elastic.min_pods * ctx.plan.procs_per_pod * batch.grad_accum
        yield finding(
            ctx,
            GLOBAL_BATCH,
            "batch.global",
            f"elastic preset: the effective global batch ranges {low}..{expected} "
            f"as pods scale {elastic.min_pods}..{elastic.max_pods}; batch.global "
            f"is declared at {elastic.max_pods} pods ({expected})",
            "scale grad_accum or the learning rate with WORLD_SIZE in the script",
            severity="warning",
        )


@rule(STRATEGY_ALLOWED, "error", "The strategy is one the preset allows")
def check_strategy(ctx: Context) -> Iterator[Finding]:
    """Each preset lists the strategies its engineers approved for it."""
    profile = ctx.loaded.profile
    allowed = ctx.approved.preset.strategies
    if profile.strategy not in allowed:
        yield finding(
            ctx,
            STRATEGY_ALLOWED,
            "strategy",
            f"{profile.strategy} is not allowed by preset {ctx.approved.name}",
            "allowed: " + ", ".join(allowed) + "; other topologies need a review",
        )
    if profile.strategy == "deepspeed" and profile.zero_stage is None:
        yield finding(
            ctx,
            STRATEGY_ALLOWED,
            "zero_stage",
            "deepspeed needs an explicit ZeRO stage",
            "set zero_stage: 0..3",
        )
    if profile.zero_stage is not None and profile.strategy != "deepspeed":
        yield finding(
            ctx,
            STRATEGY_ALLOWED,
            "zero_stage",
            "zero_stage only applies to strategy deepspeed",
            "remove zero_stage",
        )


@rule(
    PREEMPTIBLE_NEEDS_RESUME,
    "error",
    "A preemptible preset needs checkpoints on a PVC and a resume setting",
)
def check_preemptible_resume(ctx: Context) -> Iterator[Finding]:
    """The guide: confirm the framework can restore after a pod restart or preemption. On a
    preemptible preset that is not optional: the job will be stopped and started again, so it
    needs `checkpoint.resume`; that checkpoints live on a PVC is `checkpoint-on-pvc`'s check."""
    if not ctx.approved.preset.preemptible:
        return
    ckpt = ctx.loaded.profile.checkpoint
    if ckpt.resume is None:
        yield finding(
            ctx,
            PREEMPTIBLE_NEEDS_RESUME,
            "checkpoint.resume",
            f"preset {ctx.approved.name} is preemptible but checkpoint.resume is not set",
            f"say how the script resumes, e.g. `resume: latest checkpoint in {ckpt.dir}`, "
            "and test it in the rehearsal",
        )


@rule(
    SIGTERM_ONE_GPU,
    "warning",
    "One GPU: a script that does not handle SIGTERM holds its GPU for the grace period",
)
def check_sigterm_one_gpu(ctx: Context) -> Iterator[Finding]:
    """In the one-GPU layout the container runs `python -u <script>` (or the wrapper script)
    as its PID 1, and the kernel gives PID 1 no default action for SIGTERM: a script without
    a handler keeps running when the pod is deleted (preemption, eviction) and holds the GPU
    for the whole `terminationGracePeriodSeconds` until SIGKILL (measured in a PID namespace:
    still running at the grace period; under a forwarding launcher such as torchrun it ended
    0.8 s after SIGTERM). The layout keeps `python` as PID 1 rather than a forwarding
    launcher: a launcher would change the one-GPU process tree the site guide prescribes, and
    torchrun would cut a script that does save on SIGTERM to 30 s on torch before 2.12; so
    `validate` says so instead, unless the profile declares `checkpoint.on_sigterm` (which
    the rehearsal's `--preempt` then checks)."""
    plan = ctx.plan
    grace = plan.termination_grace_period_seconds
    if launcher_named(plan.launcher_name).forwards_sigterm or plan.checkpoint_on_sigterm or grace <= 0:
        return
    yield finding(
        ctx,
        SIGTERM_ONE_GPU,
        "checkpoint.on_sigterm",
        f"the script is PID 1 of its container, which ignores SIGTERM unless the "
        f"script handles it: each preemption holds the GPU idle for the preset's "
        f"{grace} s grace period before SIGKILL",
        "handle SIGTERM in the script (save, then exit) and declare "
        "`checkpoint: {on_sigterm: true}`; `rehearse --preempt` checks it",
        severity="warning",
    )


@rule(
    SHUTDOWN_WINDOW,
    "warning",
    "torch before 2.12 gives torchrun's ranks 30 s to save on SIGTERM, not the grace period",
)
def check_shutdown_window(ctx: Context) -> Iterator[Finding]:
    """torchrun, PID 1 of a torchrun pod, forwards SIGTERM to its ranks and SIGKILLs them its
    shutdown timeout later (launcher.shutdown_window): the render sets it to the preset's
    grace period less a margin (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), which torch reads from 2.12
    on; torch 2.11 and older kill the ranks after 30 s. Where the profile declares such a torch and a save on
    SIGTERM, the save has 30 s, not the grace period."""
    plan = ctx.plan
    grace = plan.termination_grace_period_seconds
    launcher = launcher_named(plan.launcher_name)
    if not launcher.forwards_sigterm or not plan.checkpoint_on_sigterm:
        return
    window = launcher.shutdown_window(plan.torch_version, grace)
    if window is None or window >= shutdown_timeout_s(grace):
        return
    yield finding(
        ctx,
        SHUTDOWN_WINDOW,
        "torch_version",
        f"torch {plan.torch_version} gives the ranks {window} s from SIGTERM to "
        f"SIGKILL (torchrun's fixed shutdown timeout), not the preset's {grace} s "
        "grace period: a checkpoint on SIGTERM that takes longer is cut off",
        f"use an image with torch 2.12 or later (it reads {SHUTDOWN_TIMEOUT_ENV}, "
        f"which the render sets to the grace period less a margin), or keep the save on SIGTERM "
        f"under {window} s",
        severity="warning",
    )


@rule(RANK0_METRICS, "error", "Only rank 0 writes shared metrics", milder=("warning",))
def check_rank0_metrics(ctx: Context) -> Iterator[Finding]:
    """The guide: ensure only rank 0 writes shared metrics or non-sharded output. A tool cannot
    read the script, so the profile declares it (`metrics: {writer: rank0}`): undeclared on
    more than one process is a warning, `writer: all-ranks` an error."""
    if ctx.plan.world_size <= 1 and ctx.plan.elastic is None:
        return
    metrics = ctx.loaded.profile.metrics
    if metrics is None:
        yield finding(
            ctx,
            RANK0_METRICS,
            "metrics",
            f"{ctx.plan.world_size} processes and no declaration of who writes metrics",
            "guard metric writes with `if int(os.environ['RANK']) == 0` and declare "
            "`metrics: {writer: rank0}`",
            severity="warning",
        )
    elif metrics.writer == "all-ranks":
        yield finding(
            ctx,
            RANK0_METRICS,
            "metrics.writer",
            f"every one of {ctx.plan.world_size} ranks writes the same metrics "
            f"(each value {ctx.plan.world_size} times)",
            "write from global rank 0 only (torchrun's per-process RANK), or use "
            "`writer: per-rank` with one file per rank",
        )


HEADROOM = 0.8  # model state above this share of GPU memory leaves too little for activations


@rule(DDP_REPLICA_FITS, "error", "The model state fits the preset's GPU memory", milder=("warning", "info"))
def check_replica_fits(ctx: Context) -> Iterator[Finding]:
    """The guide: DDP assumes a complete replica fits on every GPU. Estimates weights,
    gradients and optimizer state (parameters x bytes at the profile's precision); activations
    need the rest, so more than 80% of GPU memory is a warning, more than 100% an error.
    FSDP and ZeRO shard the state: model-state-fits judges them."""
    profile = ctx.loaded.profile
    gpu = ctx.approved.preset.gpu
    if profile.model is None:
        if ctx.plan.world_size > 1:
            yield finding(
                ctx,
                DDP_REPLICA_FITS,
                "model",
                "model size and precision are not declared; the memory check and the review need them",
                "add `model: {parameters: N, precision: bf16, sequence_length: N}`",
                severity="warning",
            )
        return
    estimate = memory_estimate(profile, ctx.plan, gpu.memory_gb)
    if estimate is None:
        yield finding(
            ctx,
            DDP_REPLICA_FITS,
            "strategy",
            f"no memory estimate for {profile.strategy}: it depends on the parallel "
            "degrees, which are part of the review",
            "run `runai-spec plan` and agree the topology with your AI Engineer",
            severity="info",
        )
        return
    if estimate.shards > 1:  # FSDP or ZeRO: model-state-fits says it (issue 40 item 6)
        return
    yield from _fits(ctx, DDP_REPLICA_FITS, estimate)


@rule(MODEL_STATE_FITS, "error", "The sharded model state fits the preset's GPU memory", milder=("info",))
def check_sharded_state_fits(ctx: Context) -> Iterator[Finding]:
    """FSDP and ZeRO shard the model state over the GPUs: the per-GPU estimate (weights,
    gradients and optimizer state over the shards) more than the GPU's memory is an error,
    else it is reported as a note (activations come on top)."""
    profile = ctx.loaded.profile
    if profile.model is None:
        return
    estimate = memory_estimate(profile, ctx.plan, ctx.approved.preset.gpu.memory_gb)
    if estimate is not None and estimate.shards > 1:
        yield from _fits(ctx, MODEL_STATE_FITS, estimate)


def _fits(ctx: Context, rule_id: str, estimate: MemoryEstimate) -> Iterator[Finding]:
    """RULE_ID's findings for a memory ESTIMATE (plan.memory)."""
    profile, gpu = ctx.loaded.profile, ctx.approved.preset.gpu
    sharded = estimate.shards > 1
    where = "strategy" if sharded else "model.parameters"
    if estimate.share > 1 or (estimate.share > HEADROOM and not sharded):
        worst = estimate.share > 1
        message = (
            f"{'does not fit' if worst else 'leaves under 20% for activations'}: "
            f"{estimate.describe()} ({gpu.model})"
        )
        options = []
        for strategy, stage in (("fsdp", None), ("deepspeed", 2), ("deepspeed", 3)):
            alt = memory_estimate(profile, ctx.plan, gpu.memory_gb, strategy, stage)
            if alt is not None and alt.shards > 1 and strategy in ctx.approved.preset.strategies:
                options.append(f"{alt.method}: {alt.total_gb:.1f} GB per GPU")
        hint = (
            "shard the model state: " + "; ".join(options)
            if options and not sharded
            else "a bigger preset or a model-parallel topology; run `runai-spec plan` "
            "and ask your AI Engineer"
        )
        yield finding(ctx, rule_id, where, message, hint, severity=None if worst else "warning")
    elif sharded:
        yield finding(
            ctx,
            rule_id,
            "strategy",
            f"model state estimate: {estimate.describe()}",
            "activations come on top; measure peak memory in the rehearsal",
            severity="info",
        )


AUTOTUNE = re.compile(r"(?i)autotun")


MODEL_PARALLEL_FLAG = re.compile(
    r"(?i)^--?[\w.-]*?(tensor|pipe|pipeline|model|context|sequence|expert)[-_]?(model[-_]?)?"
    r"parallel(ism)?[-_]?(size|degree|stages?)(=(?P<value>.*))?$"
    r"|^--(tp|pp|cp|ep)([-_](size|degree))?(=(?P<short>.*))?$"
    r"|^--(num[-_]stages|pipeline[-_]stages)(=(?P<stages>.*))?$"
)


MODEL_PARALLEL_ENV = re.compile(
    r"(?i)^(TP|PP|CP|EP|TENSOR_PARALLEL|PIPELINE_PARALLEL|MODEL_PARALLEL|PIPE_PARALLEL|"
    r"CONTEXT_PARALLEL|EXPERT_PARALLEL)(_(SIZE|DEGREE|DIM))?$"
)


# The rule asks these of every argument and variable of every profile: the answers are
# pure functions of the text, kept for the texts a batch repeats.
@lru_cache(maxsize=4096)
def _autotune(text: str) -> bool:
    return AUTOTUNE.search(text) is not None


@lru_cache(maxsize=4096)
def _parallel_flag(arg: str) -> re.Match[str] | None:
    return MODEL_PARALLEL_FLAG.match(arg)


def _degree(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@rule(DEEPSPEED_AUTOTUNE, "error", "No DeepSpeed autotuning sweep or copied model-parallel configuration")
def check_deepspeed_autotune(ctx: Context) -> Iterator[Finding]:
    """The guide: do not start a DeepSpeed autotuning sweep or copy a model-parallel
    configuration from another cluster; share model size, precision, sequence length,
    checkpoint format and topology with the AI Engineer first."""
    profile = ctx.loaded.profile
    review = (
        "remove it; `runai-spec plan PROFILE` writes the review request for your SCC AI "
        "Engineer, who approves a bounded test plan"
    )
    command = profile.command
    for index, arg in enumerate(command):
        if _autotune(arg):
            yield finding(
                ctx,
                DEEPSPEED_AUTOTUNE,
                f"command[{index}]",
                f"{arg!r} requests a DeepSpeed autotuning sweep",
                review,
            )
            continue
        match = _parallel_flag(arg)
        if match:
            value = match.group("value") or match.group("short") or match.group("stages")
            if value is None and index + 1 < len(command):
                value = command[index + 1]
            if _degree(value) == 1:  # a degree of 1 is no model parallelism at all
                continue
            yield finding(
                ctx,
                DEEPSPEED_AUTOTUNE,
                f"command[{index}]",
                f"{arg!r} sets a model-parallel degree ({value}) the preset was not reviewed for",
                review,
            )
    for name, value in profile.env_strings().items():
        if _autotune(name) or _autotune(value):
            yield finding(
                ctx, DEEPSPEED_AUTOTUNE, env_line(name), f"{name} requests DeepSpeed autotuning", review
            )
        elif MODEL_PARALLEL_ENV.match(name) and _degree(value) != 1:
            yield finding(
                ctx,
                DEEPSPEED_AUTOTUNE,
                env_line(name),
                f"{name}={value} sets a model-parallel degree",
                review,
            )
