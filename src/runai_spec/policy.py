"""The site rules: small functions, each yielding findings with a stable rule id."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .findings import Finding, Severity
from .manifests import Manifest
from .plan import Plan
from .presets import ApprovedPreset, Site
from .profile import LoadedProfile


@dataclass(frozen=True)
class Context:
    """What every rule may look at."""

    loaded: LoadedProfile
    approved: ApprovedPreset
    site: Site
    plan: Plan
    manifests: tuple[Manifest, ...] = ()


RuleFn = Callable[[Context], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """A named site rule (its docstring feeds docs/rules.md)."""

    id: str
    severity: Severity
    summary: str
    check: RuleFn


RULES: dict[str, Rule] = {}


def rule(rule_id: str, severity: Severity, summary: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES[rule_id] = Rule(rule_id, severity, summary, fn)
        return fn
    return register


def _finding(ctx: Context, rule_id: str, path: str, message: str, hint: str | None = None,
             severity: Severity | None = None) -> Finding:
    return Finding(rule=rule_id, path=path, message=message, hint=hint,
                   severity=severity or RULES[rule_id].severity, file=ctx.loaded.path,
                   line=ctx.loaded.lines.get(path))


IMAGE = re.compile(r"^(?P<registry>[a-z0-9.-]+(:[0-9]+)?)/(?P<repo>[a-z0-9._/-]+)"
                   r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@sha256:(?P<digest>[0-9a-f]{64}))?$")

NCCL_TRANSPORT = re.compile(
    r"^(NCCL_SOCKET_IFNAME|NCCL_IB_.*|NCCL_NET.*|NCCL_P2P_.*|NCCL_SHM_.*|NCCL_ALGO|NCCL_PROTO|"
    r"NCCL_CROSS_NIC|NCCL_TOPO_.*|NCCL_COLLNET_.*|NCCL_NVLS_.*|NCCL_MNNVL_.*|NCCL_IGNORE_CPU_AFFINITY|"
    r"NCCL_SOCKET_.*|NCCL_GDR.*|NCCL_DMABUF_.*|UCX_.*|GLOO_SOCKET_IFNAME|TP_SOCKET_IFNAME)$")
OPERATOR_ENV = re.compile(r"^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK|"
                          r"LOCAL_WORLD_SIZE|GROUP_RANK|PET_.*|TORCHELASTIC_.*|"
                          r"CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES)$")
LAUNCHERS = {"python", "python3", "torchrun", "accelerate", "deepspeed", "mpirun", "srun",
             "bash", "sh"}
LAUNCHER_FLAGS = re.compile(r"^--(nproc[-_]per[-_]node|nnodes|node[-_]rank|master[-_]addr|"
                            r"master[-_]port|rdzv[-_].*|standalone)(=|$)")


def _env_line(name: str) -> str:
    return f"env.{name}"


@rule("reserved-field", "error", "Fields the site guide reserves for the SCC AI Engineers")
def check_reserved(ctx: Context) -> Iterator[Finding]:
    """Compute preset values, GPUs per pod, workers, priority, preemptibility, elasticity,
    node pools and the network attachment come from the approved preset, never the profile."""
    yield from ctx.loaded.findings


@rule("nccl-transport-env", "error", "NCCL interface and transport variables are engineer-owned")
def check_nccl_transport(ctx: Context) -> Iterator[Finding]:
    """The guide: do not force interface names or transport settings yourself."""
    for name in ctx.loaded.profile.env:
        if NCCL_TRANSPORT.match(name):
            yield _finding(ctx, "nccl-transport-env", _env_line(name),
                           f"{name} forces a network interface or transport",
                           "remove it; the preset supplies the approved network path. "
                           "For a hang, keep per-rank logs and ask your AI Engineer")


@rule("nccl-debug-temporary", "error", "NCCL_DEBUG only through the temporary diagnostics switch")
def check_nccl_debug(ctx: Context) -> Iterator[Finding]:
    """NCCL_DEBUG=INFO is a temporary diagnostic; it is switched on explicitly and reported."""
    profile = ctx.loaded.profile
    if "NCCL_DEBUG" in profile.env or "NCCL_DEBUG_SUBSYS" in profile.env:
        yield _finding(ctx, "nccl-debug-temporary", "env.NCCL_DEBUG",
                       "NCCL_DEBUG set as a plain variable stays on after diagnosis",
                       "use `diagnostics: {nccl_debug: true, reason: ...}` and remove it afterwards")
    if profile.diagnostics.nccl_debug:
        reason = profile.diagnostics.reason or "no reason given"
        yield _finding(ctx, "nccl-debug-temporary", "diagnostics.nccl_debug",
                       f"temporary diagnostic NCCL_DEBUG=INFO is on ({reason})",
                       "save a log per rank (`runai-spec logs --out DIR`) and switch it off "
                       "after diagnosis", severity="warning")


@rule("reserved-env", "error", "Variables the operator or torchrun inject")
def check_operator_env(ctx: Context) -> Iterator[Finding]:
    """Rank, world size, master address and device visibility are set per process."""
    for name in ctx.loaded.profile.env:
        if OPERATOR_ENV.match(name):
            yield _finding(ctx, "reserved-env", _env_line(name),
                           f"{name} is injected by the PyTorch operator or torchrun",
                           "remove it; read RANK, LOCAL_RANK and WORLD_SIZE in the script")


@rule("image-digest", "error", "Images are pinned by digest (immutable)")
def check_image_digest(ctx: Context) -> Iterator[Finding]:
    """The guide: make the command reproducible with an immutable image."""
    image = ctx.loaded.profile.image
    match = IMAGE.match(image)
    if match is None:
        yield _finding(ctx, "image-digest", "image",
                       f"{image!r} is not registry/repo[:tag]@sha256:<64 hex>",
                       "write the full reference, e.g. registry.example.org/team/train@sha256:<64 hex>")
    elif match.group("digest") is None:
        yield _finding(ctx, "image-digest", "image", "tag-only images are mutable",
                       "pin the digest, e.g. repo:tag@sha256:<64 hex> "
                       "(`docker buildx imagetools inspect IMAGE` shows it)")


@rule("registry", "error", "Images come from a registry the site allows")
def check_registry(ctx: Context) -> Iterator[Finding]:
    """Only the registries listed in presets/site.yaml are allowed."""
    match = IMAGE.match(ctx.loaded.profile.image)
    if match and match.group("registry") not in ctx.site.registries:
        yield _finding(ctx, "registry", "image",
                       f"registry {match.group('registry')!r} is not allowed on {ctx.site.cluster}",
                       "use one of: " + ", ".join(ctx.site.registries))


@rule("global-batch", "error", "global batch = local x processes x grad_accum")
def check_global_batch(ctx: Context) -> Iterator[Finding]:
    """The guide: record local batch, accumulation and the intended global batch."""
    batch = ctx.loaded.profile.batch
    procs = ctx.plan.world_size
    expected = batch.local * procs * batch.grad_accum
    if expected != batch.global_:
        yield _finding(ctx, "global-batch", "batch.global",
                       f"{batch.global_} != local {batch.local} x processes {procs} x "
                       f"grad_accum {batch.grad_accum} = {expected}",
                       f"set batch.global to {expected}, or change local/grad_accum")
    elastic = ctx.plan.elastic
    if elastic and elastic.min_pods != elastic.max_pods:
        low = batch.local * elastic.min_pods * ctx.plan.procs_per_pod * batch.grad_accum
        high = batch.local * elastic.max_pods * ctx.plan.procs_per_pod * batch.grad_accum
        yield _finding(ctx, "global-batch", "batch.global",
                       f"elastic preset: the effective global batch ranges {low}..{high} "
                       f"as pods scale {elastic.min_pods}..{elastic.max_pods}",
                       "scale grad_accum or the learning rate with WORLD_SIZE in the script",
                       severity="warning")


@rule("strategy-allowed", "error", "The strategy is one the preset allows")
def check_strategy(ctx: Context) -> Iterator[Finding]:
    """Each preset lists the strategies its engineers approved for it."""
    profile = ctx.loaded.profile
    allowed = ctx.approved.preset.strategies
    if profile.strategy not in allowed:
        yield _finding(ctx, "strategy-allowed", "strategy",
                       f"{profile.strategy} is not allowed by preset {ctx.approved.name}",
                       "allowed: " + ", ".join(allowed) + "; other topologies need a review")
    if profile.strategy == "deepspeed" and profile.zero_stage is None:
        yield _finding(ctx, "strategy-allowed", "zero_stage",
                       "deepspeed needs an explicit ZeRO stage", "set zero_stage: 0..3")
    if profile.zero_stage is not None and profile.strategy != "deepspeed":
        yield _finding(ctx, "strategy-allowed", "zero_stage",
                       "zero_stage only applies to strategy deepspeed", "remove zero_stage")


@rule("name-length", "error", "Derived pod names stay within 63 characters")
def check_name_length(ctx: Context) -> Iterator[Finding]:
    """Pods and their headless services are named `<name>-worker-<N>`: a DNS label."""
    longest = ctx.plan.longest_pod_name
    if len(longest) > 63:
        room = 63 - (len(longest) - len(ctx.plan.name))
        yield _finding(ctx, "name-length", "name",
                       f"pod name {longest!r} has {len(longest)} characters (limit 63)",
                       f"shorten name to at most {room} characters")


@rule("checkpoint-on-pvc", "error", "Checkpoints go to a PVC or an approved data source")
def check_checkpoint(ctx: Context) -> Iterator[Finding]:
    """The guide: write checkpoints to a PVC or approved data source, not the image."""
    ckpt = ctx.loaded.profile.checkpoint
    if (ckpt.pvc is None) == (ckpt.source is None):
        yield _finding(ctx, "checkpoint-on-pvc", "checkpoint",
                       "set exactly one of checkpoint.pvc or checkpoint.source",
                       "checkpoints written to the image filesystem are lost on restart")
    elif ckpt.source is not None and ckpt.source not in ctx.site.data_sources:
        yield _finding(ctx, "checkpoint-on-pvc", "checkpoint.source",
                       f"{ckpt.source!r} is not an approved data source",
                       "approved: " + ", ".join(ctx.site.data_sources))
    for index, data in enumerate(ctx.loaded.profile.data):
        path = f"data[{index}]"
        if (data.pvc is None) == (data.source is None):
            yield _finding(ctx, "checkpoint-on-pvc", path, "set exactly one of pvc or source")
        elif data.source is not None and data.source not in ctx.site.data_sources:
            yield _finding(ctx, "checkpoint-on-pvc", f"{path}.source",
                           f"{data.source!r} is not an approved data source",
                           "approved: " + ", ".join(ctx.site.data_sources))


@rule("launcher", "error", "The tool adds the launcher; the command is the entry point only")
def check_launcher(ctx: Context) -> Iterator[Finding]:
    """`python` for one GPU, `torchrun` otherwise, with flags derived from the preset."""
    command = ctx.loaded.profile.command
    if command[0].rsplit("/", 1)[-1] in LAUNCHERS:
        yield _finding(ctx, "launcher", "command[0]",
                       f"{command[0]!r} is a launcher; runai-spec adds the right one per layout",
                       f"start the command with the script, e.g. [{command[-1]!r}]"
                       if len(command) > 1 else "start the command with the script")
    for index, arg in enumerate(command):
        if LAUNCHER_FLAGS.match(arg):
            yield _finding(ctx, "launcher", f"command[{index}]",
                           f"{arg!r} is a torchrun flag; the preset decides the topology",
                           "remove it")


@rule("nproc-gpus", "error", "Processes per pod equal the GPUs visible in the pod")
def check_nproc(ctx: Context) -> Iterator[Finding]:
    """The guide: the process count must match the GPUs visible inside the pod."""
    for manifest in ctx.manifests:
        if manifest.get("kind") != "PyTorchJob":
            continue
        nproc = manifest["spec"].get("nprocPerNode")
        for role, spec in manifest["spec"]["pytorchReplicaSpecs"].items():
            container = spec["template"]["spec"]["containers"][0]
            gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            flags = [a.split("=", 1)[1] for a in container.get("command", [])
                     if a.startswith("--nproc-per-node=")]
            if str(gpus) != str(nproc) or any(flag != str(gpus) for flag in flags):
                yield _finding(ctx, "nproc-gpus", f"spec.pytorchReplicaSpecs.{role}",
                               f"{gpus} GPUs per pod but nprocPerNode {nproc} / flags {flags}",
                               "this is a runai-spec or preset bug; tell the AI Engineers")


def check_all(ctx: Context) -> list[Finding]:
    """Every rule's findings, in rule order; never stops at the first."""
    findings: list[Finding] = []
    for entry in RULES.values():
        findings.extend(entry.check(ctx))
    return findings
