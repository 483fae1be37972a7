"""The site rules: small functions, each yielding findings with a stable rule id."""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..errors import InputError, Location
from ..facts.kubeflow import (
    CONTAINER,
    DNS1123,
    GPU_RESOURCE,
    INJECTED_ENV,
    KIND,
    MASTER,
    NAME_MAX,
    OPERATOR_VERSIONS,
    POD_NAME_ENV,
    REPLICA_TYPES,
    SMOKE_MOUNT,
    SMOKE_SUFFIX,
    WORKER,
    nproc_flags,
    operator_env,
    pytorch_container,
    torchrun_procs,
)
from ..facts.torchrun import (
    EXECUTABLE_ENTRY,
    NCCL_DIAGNOSTICS,
    SHELLS,
    SHUTDOWN_TIMEOUT_ENV,
    TRANSPORT_ENV_NAMES,
    TRANSPORT_ENV_PREFIXES,
    entry_point_kind,
    launcher_entry,
    shutdown_window,
    split_command,
    without_launcher,
)
from ..findings import Finding, Severity
from ..load.presets import Approval, ApprovedPreset, Site
from ..load.profile import LoadedProfile, Profile
from ..plan.plan import DISABLE_SHARED_STORE, Plan
from ..render.manifests import Manifest
from ..secrets import looks_secret


@dataclass(frozen=True)
class Context:
    """What every rule may look at."""

    loaded: LoadedProfile
    approved: ApprovedPreset
    site: Site
    plan: Plan
    manifests: tuple[Manifest, ...] = ()
    # The registry's date, so expiry warnings stay a pure function of the inputs.
    today: dt.date | None = None
    site_approval: Approval | None = None


RuleFn = Callable[[Context], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """A named site rule (its docstring feeds docs/rules.md)."""

    id: str
    severity: Severity
    summary: str
    check: RuleFn
    milder: tuple[Severity, ...] = ()  # what it reports for a milder case (`rules` lists them)

    @property
    def severities(self) -> tuple[Severity, ...]:
        return (self.severity, *self.milder)


RULES: dict[str, Rule] = {}


def rule(rule_id: str, severity: Severity, summary: str, *, milder: tuple[Severity, ...] = ()
         ) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES[rule_id] = Rule(rule_id, severity, summary, fn, milder)
        return fn
    return register


def _finding(ctx: Context, rule_id: str, path: str, message: str, hint: str | None = None,
             severity: Severity | None = None) -> Finding:
    where = Location(ctx.loaded.path, ctx.loaded.line(path), path)
    return Finding(rule_id, where, message, hint, severity or RULES[rule_id].severity)


# An image reference's repository and tag (admission_rules.image_pattern builds the policy's
# from the same two, with the digest required and the registry one of the site's)
IMAGE_REPO = r"[a-z0-9._/-]+"
IMAGE_TAG = r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE = re.compile(rf"^(?P<registry>[a-z0-9.-]+(:[0-9]+)?)/(?P<repo>{IMAGE_REPO})"
                   rf"(?P<tagged>{IMAGE_TAG})?(@sha256:(?P<digest>[0-9a-f]{{64}}))?\Z")

# Turned around (red team): every NCCL_* variable is the preset's, because NCCL reads any of
# them (and NCCL >= 2.23 reads all of them from NCCL_CONF_FILE); so are the other transports'
# interface and plugin variables and the linker's, which can swap the transport library itself
# (the list: launcher.py, which admission.py reads too). Only the diagnostics switch's own
# variables are left out, for `nccl-debug-temporary`.
def transport_variable(name: str) -> bool:
    """A variable that chooses or configures the network path: the engineers' (the preset's)."""
    return ((name.startswith(TRANSPORT_ENV_PREFIXES) or name in TRANSPORT_ENV_NAMES)
            and name not in NCCL_DIAGNOSTICS)


# What each prefix or name of launcher.TRANSPORT_ENV_* configures, for the finding's message.
TRANSPORT_WHAT = {
    "NCCL_": "NCCL (the network path between GPUs)",
    "TORCH_NCCL_": "PyTorch's NCCL process group (its error handling, watchdog and heartbeat "
                   "timeouts: how a fault is noticed)",
    "UCX_": "UCX (a network transport)",
    "NVSHMEM_": "NVSHMEM (a network transport)",
    "FI_": "libfabric (the EFA/OFI network transport)",
    "SHARP_": "SHARP (in-network reductions)",
    "GLOO_SOCKET_IFNAME": "Gloo's network interface",
    "TP_SOCKET_IFNAME": "TensorPipe's network interface",
    "MELLANOX_VISIBLE_DEVICES": "the network devices the container sees",
    "LD_PRELOAD": "a library loaded into every process (it can replace NCCL's)",
    "LD_LIBRARY_PATH": "where the linker finds libraries (it can swap libnccl or its net plugin)",
    "UCC_": "UCC (a collective communication library)",
    "TORCH_UCC_": "PyTorch's UCC process group",
    "IBV_": "libibverbs (the RDMA verbs under every InfiniBand transport)",
    "RDMAV_": "libibverbs (the RDMA verbs under every InfiniBand transport)",
    "MLX5_": "the mlx5 verbs provider (the InfiniBand adapters)",
    "HCOLL_": "Mellanox HCOLL (hierarchical collectives)",
    "OMPI_MCA_": "Open MPI's components (its network transports)",
    "CUDA_MPS_": "CUDA MPS (a GPU shared between processes, and their limits)",
    "NVIDIA_REQUIRE_": "the CUDA and driver versions the NVIDIA container toolkit checks",
    "GLOO_DEVICE_TRANSPORT": "Gloo's transport",
    "NVIDIA_VISIBLE_DEVICES": "the GPUs the container sees (the device plugin sets it)",
    "NVIDIA_DRIVER_CAPABILITIES": "which driver libraries the NVIDIA container toolkit mounts",
    "NVIDIA_MIG_CONFIG_DEVICES": "the MIG devices the container may configure",
    "NVIDIA_MIG_MONITOR_DEVICES": "the MIG devices the container may monitor",
    "NVIDIA_DISABLE_REQUIRE": "the NVIDIA container toolkit's CUDA and driver version check",
}


def transport_what(name: str) -> str:
    return TRANSPORT_WHAT.get(name) or next(
        TRANSPORT_WHAT[p] for p in sorted(TRANSPORT_ENV_PREFIXES, key=len, reverse=True)
        if name.startswith(p))


LAUNCHERS = {"python", "python3", "torchrun", "accelerate", "deepspeed", "mpirun", "srun",
             "bash", "sh"}
LAUNCHER_FLAGS = re.compile(r"^--(nproc[-_]per[-_]node|nnodes|node[-_]rank|master[-_]addr|"
                            r"master[-_]port|rdzv[-_].*|standalone)(=|$)")


def _env_line(name: str) -> str:
    return f"env.{name}"


def _env_fields(profile: Profile) -> list[tuple[str, str]]:
    """(name, field) of every variable the profile sets: `env.NAME` or `secret_env.NAME`, so
    that a finding points at the line that sets it."""
    return ([(name, _env_line(name)) for name in profile.env]
            + [(name, f"secret_env.{name}") for name in profile.secret_env])


@rule("reserved-field", "error", "Fields the site guide reserves for the SCC AI Engineers")
def check_reserved(ctx: Context) -> Iterator[Finding]:
    """Compute preset values, GPUs per pod, workers, priority, preemptibility, elasticity,
    node pools and the network attachment come from the approved preset, never the profile."""
    yield from ctx.loaded.findings


@rule("nccl-transport-env", "error", "NCCL interface and transport variables are engineer-owned")
def check_nccl_transport(ctx: Context) -> Iterator[Finding]:
    """The guide: do not force interface names or transport settings yourself. In `env` and
    `secret_env` alike: every `NCCL_*` but the diagnostics switch (`nccl-debug-temporary`),
    `TORCH_NCCL_*` (PyTorch's NCCL process group: its error handling and the watchdog and
    heartbeat timeouts that decide how a fault is noticed), `UCX_*`, `NVSHMEM_*`, `FI_*`
    (libfabric), `SHARP_*`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME`,
    `MELLANOX_VISIBLE_DEVICES`, and the linker's `LD_PRELOAD` and `LD_LIBRARY_PATH`, which can
    swap libnccl or its net plugin. The transport-adjacent families too: `UCC_*`,
    `TORCH_UCC_*`, `GLOO_DEVICE_TRANSPORT`, the verbs stack (`IBV_*`, `RDMAV_*`, `MLX5_*`),
    `HCOLL_*`, Open MPI's `OMPI_MCA_*`, CUDA MPS (`CUDA_MPS_*`), and what the NVIDIA container
    toolkit reads (`NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`,
    `NVIDIA_MIG_CONFIG_DEVICES`, `NVIDIA_MIG_MONITOR_DEVICES`, `NVIDIA_REQUIRE_*`,
    `NVIDIA_DISABLE_REQUIRE`). A list of families the engineers own, not an allow-list:
    ordinary application variables (`WANDB_PROJECT`, `HF_HOME`) stay the researcher's. The
    cluster's admission policy refuses the same list."""
    for name, field in _env_fields(ctx.loaded.profile):
        if transport_variable(name):
            yield _finding(ctx, "nccl-transport-env", field,
                           f"{name} configures {transport_what(name)}, which the preset owns",
                           "remove it; the preset supplies the approved network path. "
                           "For a hang, keep per-rank logs and ask your AI Engineer")


@rule("nccl-debug-temporary", "error", "NCCL_DEBUG only through the temporary diagnostics switch",
      milder=("warning",))
def check_nccl_debug(ctx: Context) -> Iterator[Finding]:
    """NCCL_DEBUG=INFO is a temporary diagnostic; it is switched on explicitly and reported."""
    profile = ctx.loaded.profile
    for name, field in sorted(_env_fields(profile)):
        if name not in NCCL_DIAGNOSTICS:
            continue
        yield _finding(ctx, "nccl-debug-temporary", field,
                       f"{name} set as a variable stays on after diagnosis",
                       "use `diagnostics: {nccl_debug: true, reason: ...}` and remove it afterwards")
    if profile.diagnostics.nccl_debug:
        reason = profile.diagnostics.reason or "no reason given"
        yield _finding(ctx, "nccl-debug-temporary", "diagnostics.nccl_debug",
                       f"temporary diagnostic NCCL_DEBUG=INFO is on ({reason})",
                       "save a log per rank (`runai-spec logs --out DIR`) and switch it off "
                       "after diagnosis", severity="warning")


def _operator_names() -> frozenset[str]:
    """Every variable the modelled training-operator releases may append to the pytorch
    container (kubeflow.operator_env), whatever the job: a Master and Workers, with and
    without an elasticPolicy that sets all it can."""
    replica = {"replicas": 1, "template": {"spec": {"containers": [{"name": CONTAINER}]}}}
    elastic = {"maxRestarts": 1, "nProcPerNode": 1, "rdzvId": "id", "standalone": True,
               "rdzvConf": [{"key": "key", "value": "value"}]}
    names: set[str] = set()
    for version in OPERATOR_VERSIONS:
        for policy in ({}, {"elasticPolicy": elastic}):
            job = {"metadata": {"name": "job"}, "spec": {
                "nprocPerNode": "1", "pytorchReplicaSpecs": {MASTER: replica, WORKER: replica},
                **policy}}
            for role in REPLICA_TYPES:
                names.update(operator_env(job, role, 0, version))
    return frozenset(names)


OPERATOR_ENV_NAMES = _operator_names()


def env_owners(plan: Plan) -> dict[str, str]:
    """Who sets each variable the rendered container gets other than from the profile's `env`
    (a profile setting one would be dropped, or, in `secret_env`, a second entry of the same
    name): the preset's network.env, runai-spec's derived variables (whatever this layout
    renders, and the c10d rendezvous's on every layout), the operator's. The injected ones
    (INJECTED_ENV) have their own message."""
    owners = {name: "the training operator (on every pod)" for name in OPERATOR_ENV_NAMES}
    owners[DISABLE_SHARED_STORE[0]] = "runai-spec (for a c10d rendezvous)"
    for index, (name, _) in enumerate(plan.env):
        origin = plan.origins.get(f"env[{index}][1]")
        if origin is None or (origin.kind == "profile" and origin.field == _env_line(name)):
            continue
        owners[name] = (f"the preset ({origin.file} {origin.field})" if origin.kind == "preset"
                        else "runai-spec" if origin.kind in ("derived", "template")
                        else f"the profile's {origin.field}")
    for name, _ in plan.field_env:
        owners[name] = "runai-spec (the pod's own name, for its per-rank log folder)"
    return owners


@rule("reserved-env", "error", "Variables the operator, torchrun, the preset or runai-spec set")
def check_operator_env(ctx: Context) -> Iterator[Finding]:
    """Rank, world size, master address and device visibility are set per process; the
    operator sets PYTHONUNBUFFERED and its PET_* variables, the preset its network.env, and
    runai-spec its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, the per-rank log line prefix).
    Set in `env`, the profile's value would be dropped or lose to theirs; in `secret_env` the
    container would get two variables of one name (the later wins, and a server-side apply
    refuses the duplicate). The transport variables and the diagnostics switch have rules of
    their own (`nccl-transport-env`, `nccl-debug-temporary`)."""
    owners = env_owners(ctx.plan)
    for name, field in _env_fields(ctx.loaded.profile):
        if INJECTED_ENV.match(name):
            yield _finding(ctx, "reserved-env", field,
                           f"{name} is injected by the PyTorch operator or torchrun"
                           + (" (runai-spec sets it for the per-rank log folder)"
                              if name == POD_NAME_ENV[0] else ""),
                           "remove it; read RANK, LOCAL_RANK and WORLD_SIZE in the script")
        elif name in owners and not transport_variable(name) and name not in NCCL_DIAGNOSTICS:
            yield _finding(ctx, "reserved-env", field,
                           f"{name} is set by {owners[name]}: "
                           + ("the container would get a second variable of that name, and "
                              "the later one wins" if field.startswith("secret_env.")
                              else "a value set here never reaches the job"),
                           "remove it; ask your AI Engineer if the job needs another value")


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


@rule("global-batch", "error", "global batch = local x processes x grad_accum",
      milder=("warning",))
def check_global_batch(ctx: Context) -> Iterator[Finding]:
    """The guide: record local batch, accumulation and the intended global batch."""
    batch = ctx.loaded.profile.batch
    procs = ctx.plan.world_size
    expected = batch.local * procs * batch.grad_accum
    elastic = ctx.plan.elastic
    scales = elastic is not None and elastic.min_pods != elastic.max_pods
    # an elastic job declares its global batch at the most pods (the rendered world size);
    # the error and the warning below both say so, and name the same number (issue 26 item 2)
    at_most = f" (at {elastic.max_pods} pods, the elastic preset's most)" if (
        elastic is not None and scales) else ""
    if expected != batch.global_:
        yield _finding(ctx, "global-batch", "batch.global",
                       f"{batch.global_} != local {batch.local} x processes {procs} x "
                       f"grad_accum {batch.grad_accum} = {expected}{at_most}",
                       f"set batch.global to {expected}, or change local/grad_accum")
    if elastic is not None and scales:
        low = batch.local * elastic.min_pods * ctx.plan.procs_per_pod * batch.grad_accum
        yield _finding(ctx, "global-batch", "batch.global",
                       f"elastic preset: the effective global batch ranges {low}..{expected} "
                       f"as pods scale {elastic.min_pods}..{elastic.max_pods}; batch.global "
                       f"is declared at {elastic.max_pods} pods ({expected})",
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


def name_room(plan: Plan) -> int:
    """The longest workload name whose pods, and its smoke test's, stay DNS labels (the
    admission policy's bound on the name is this one)."""
    longest = plan.longest_pod_name
    return NAME_MAX - (len(longest) - len(plan.name)) - len(SMOKE_SUFFIX)


@rule("name-length", "error",
      f"Derived pod names, the smoke test's too, stay within {NAME_MAX} characters")
def check_name_length(ctx: Context) -> Iterator[Finding]:
    """Pods and their headless services are named `<name>-worker-<N>`: a DNS label. The smoke
    test's are `<name>-smoke-worker-<N>`; a name that only they outgrow is refused here too,
    so that validate passes nothing `render --smoke` and `submit --smoke` then refuse."""
    name, longest = ctx.plan.name, ctx.plan.longest_pod_name
    smoke = f"{name}{SMOKE_SUFFIX}{longest[len(name):]}"
    room = name_room(ctx.plan)
    hint = f"shorten name to at most {room} characters (its smoke test's pods add `{SMOKE_SUFFIX}`)"
    if len(longest) > NAME_MAX:
        yield _finding(ctx, "name-length", "name",
                       f"pod name {longest!r} has {len(longest)} characters (limit {NAME_MAX})",
                       hint)
    elif len(smoke) > NAME_MAX:
        yield _finding(ctx, "name-length", "name",
                       f"the smoke test's pod name {smoke!r} would have {len(smoke)} characters "
                       f"(limit {NAME_MAX}): `render --smoke` and `submit --smoke` refuse it", hint)
    namespace = ctx.plan.namespace
    if len(namespace) > NAME_MAX or not DNS1123.match(namespace):  # a namespace is a DNS-1123 label
        yield _finding(ctx, "name-length", "project",
                       f"project {ctx.loaded.profile.project!r} makes the namespace {namespace!r} "
                       f"({len(namespace)} characters), which is not a DNS label of at most "
                       f"{NAME_MAX}", "use the Run:ai project's name as the cluster knows it")


@rule("smoke-name", "error", f"A workload name never ends in `{SMOKE_SUFFIX}`")
def check_smoke_name(ctx: Context) -> Iterator[Finding]:
    """The smoke test of workload `X` is the job `X-smoke`, beside the real one in the same
    namespace. A workload named `X-smoke` would be that job: `submit --smoke` of `X` would
    refuse to replace it, or `delete X --smoke` remove the wrong job. Refusing the suffix
    rules out every such pair, in one batch of profiles or across a project's profiles."""
    name = ctx.loaded.profile.name
    if name.endswith(SMOKE_SUFFIX):
        yield _finding(ctx, "smoke-name", "name",
                       f"{name!r} ends in {SMOKE_SUFFIX!r}: it is the name of the smoke test "
                       f"of workload {name.removesuffix(SMOKE_SUFFIX)!r}",
                       f"rename it, e.g. {name.removesuffix(SMOKE_SUFFIX) + '-test'!r}; a smoke "
                       "test is `--smoke` of the real workload's profile, never a profile")


@rule("checkpoint-on-pvc", "error", "Checkpoints go to a PVC or an approved data source")
def check_checkpoint(ctx: Context) -> Iterator[Finding]:
    """The guide: write checkpoints to a PVC or approved data source, not the image."""
    ckpt = ctx.loaded.profile.checkpoint
    if (ckpt.pvc is None) == (ckpt.source is None):
        yield _finding(ctx, "checkpoint-on-pvc", "checkpoint",
                       "set exactly one of checkpoint.pvc or checkpoint.source",
                       "checkpoints written to the image filesystem are lost on restart")


@rule("data-source", "error", "Every volume is one PVC or one data source the site approved")
def check_data_sources(ctx: Context) -> Iterator[Finding]:
    """A `source` (of the checkpoint or of a data volume) names one of the site file's
    `data_sources`; a data volume sets exactly one of `pvc` and `source`."""
    ckpt = ctx.loaded.profile.checkpoint
    if ckpt.pvc is None and ckpt.source is not None and ckpt.source not in ctx.site.data_sources:
        yield _finding(ctx, "data-source", "checkpoint.source",
                       f"{ckpt.source!r} is not an approved data source",
                       "approved: " + ", ".join(ctx.site.data_sources))
    for index, data in enumerate(ctx.loaded.profile.data):
        path = f"data[{index}]"
        if (data.pvc is None) == (data.source is None):
            yield _finding(ctx, "data-source", path, "set exactly one of pvc or source",
                           "a data volume mounts one claim: `pvc: NAME` or `source: NAME` "
                           "(one of the site's approved data sources)")
        elif data.source is not None and data.source not in ctx.site.data_sources:
            yield _finding(ctx, "data-source", f"{path}.source",
                           f"{data.source!r} is not an approved data source",
                           "approved: " + ", ".join(ctx.site.data_sources))


# Mounting over these hides what the container needs (its programs and libraries, /proc, the
# service account's token), or shows the host's devices; `/` is every one of them. On a
# merged-/usr image /bin, /sbin and /lib* are /usr's (symbolic links the runtime follows), so a
# mount there hides /usr/bin or /usr/lib. /var/lib holds the image's own state (the package
# databases, dpkg's alternatives) and no data of a job, and /var/lib/kubelet is the kubelet's
# folder on the node: the whole of /var/lib is refused, not only the kubelet's folder.
SYSTEM_PATHS = ("/etc", "/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32",
                "/lib64", "/libx32", "/boot", "/var/lib", "/var/run/secrets", "/run/secrets")
# A working directory may lie in the image's own folders (`/usr/src/app` is a common one); only
# the kernel's virtual file systems and the mounted credentials are never a place to run from.
WORKDIR_REFUSED = ("/proc", "/sys", "/dev", "/var/run/secrets", "/run/secrets")
PATH_NAME_MAX = 255  # Linux NAME_MAX: bytes in one path component
_PATH_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _nested(a: str, b: str) -> bool:
    """a and b are the same folder, or one holds the other."""
    return a == b or b.startswith(a.rstrip("/") + "/") or a.startswith(b.rstrip("/") + "/")


def _path_problem(path: str) -> tuple[str, str] | None:
    """(message, hint) when a mount path is not one clean absolute path."""
    if _PATH_CONTROL.search(path):
        return (f"{path!r} contains a control character (a line break, a tab)",
                "write the path on one line, without control characters")
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path", f"write it from the root, e.g. /{path}"
    normal = "/" + posixpath.normpath(path).lstrip("/")  # normpath keeps a leading `//`
    if ".." in path.split("/"):
        return (f"{path!r} contains `..`: Kubernetes mounts it at {normal}",
                "write the folder's own absolute path, without `..`")
    if normal != path:
        return (f"{path!r} is not a normalised path (`//`, `/./` or a trailing `/`)",
                f"write {normal}")
    long = next((p for p in path.split("/") if len(p.encode("utf-8")) > PATH_NAME_MAX), None)
    if long is not None:
        return (f"{path[:40]!r}... has a folder name of {len(long.encode('utf-8'))} bytes: Linux "
                f"allows at most {PATH_NAME_MAX} (NAME_MAX), so nothing can be mounted there",
                f"shorten {long[:20]!r}... to at most {PATH_NAME_MAX} bytes")
    return None


def _system_path(path: str) -> str | None:
    """The system path that PATH is, lies under or holds (`/`: the root itself)."""
    return "/" if path == "/" else next((s for s in SYSTEM_PATHS if _nested(path, s)), None)


def _holds(folder: str, path: str) -> bool:
    """FOLDER is PATH or holds it."""
    return folder == path or path.startswith(folder.rstrip("/") + "/")


@rule("mount-path", "error", "Mount paths and the working directory are clean, absolute, not "
      "system paths, and never overlap")
def check_mount_paths(ctx: Context) -> Iterator[Finding]:
    """`checkpoint.dir`, every `data[].path` and `working_dir` are absolute and normalised (no
    `..`, `//`, `/./` or trailing `/`, no control characters, no folder name over 255 bytes).
    A mount is not a system path (`/etc`, `/proc`, `/sys`, `/dev`, `/usr`, `/bin`, `/sbin`,
    `/lib`, `/lib32`, `/lib64`, `/libx32`, `/boot`, `/var/lib`, `/var/run/secrets`,
    `/run/secrets`), under one, `/`, or a folder that holds one; `working_dir` may lie in the
    image's own folders (`/usr/src/app`) but not under `/proc`, `/sys`, `/dev` or the secrets
    mounts, nor under the preset's or the tool's mounts. No two
    mounts are equal or nested: not the profile's own, nor the preset's (`/dev/shm`), nor the
    tool's (`/opt/runai-spec`, where the smoke test mounts preflight.py). Kubernetes mounts
    `/var/../dev/shm` on the shared memory, and a nested mount hides the files under it. No
    mount is the working directory or holds it: it would hide the image's code there."""
    profile = ctx.loaded.profile
    theirs = [(f"the preset's {v.name} volume", v.mount_path) for v in ctx.plan.volumes
              if v.name != "checkpoint" and not v.name.startswith("data-")]
    theirs.append(("runai-spec's own mount for the smoke test's preflight.py", SMOKE_MOUNT))
    workdir = profile.working_dir
    if workdir is not None:
        yield from _working_dir_findings(ctx, workdir, theirs)
        if _path_problem(workdir) is not None:
            workdir = None
    mine = [("checkpoint.dir", profile.checkpoint.dir)]
    mine += [(f"data[{i}].path", d.path) for i, d in enumerate(profile.data)]
    seen: list[tuple[str, str]] = []
    for field, path in mine:
        problem = _path_problem(path)
        if problem is not None:
            yield _finding(ctx, "mount-path", field, *problem)
            continue
        clash = next(((who, other) for who, other in theirs if _nested(path, other)), None)
        system = _system_path(path)
        mount = next(((who, other) for who, other in seen if _nested(path, other)), None)
        if clash is not None and path != "/":
            yield _finding(ctx, "mount-path", field,
                           f"{path} {'is' if path == clash[1] else 'overlaps'} {clash[0]} "
                           f"({clash[1]})", "mount it somewhere of its own, e.g. /data/<name>")
        elif system is not None:
            what = ("the root: it hides the whole image" if system == "/" else "a system path"
                    if system == path else f"under the system path {system}"
                    if path.startswith(system) else f"a folder that holds the system path {system}")
            yield _finding(ctx, "mount-path", field, f"{path} is {what}",
                           "mount it somewhere of its own, e.g. /data/<name> or /checkpoints")
        elif mount is not None:
            yield _finding(ctx, "mount-path", field,
                           f"{path} {'is also' if path == mount[1] else 'overlaps'} "
                           f"{mount[0]} ({mount[1]})",
                           "give each volume a folder of its own, neither inside the other")
        elif workdir is not None and _holds(path, workdir):
            yield _finding(ctx, "mount-path", field,
                           f"{path} {'is' if path == workdir else 'holds'} the working directory "
                           f"{workdir}: the volume would hide the image's code there",
                           "mount it somewhere of its own, e.g. /data/<name> or /checkpoints, "
                           "outside working_dir")
        seen.append((field, path))


def _working_dir_findings(ctx: Context, workdir: str, theirs: list[tuple[str, str]]
                          ) -> Iterator[Finding]:
    """working_dir is one clean absolute path, not in the kernel's virtual file systems or
    the mounted credentials (WORKDIR_REFUSED), and no mount of the preset or runai-spec holds
    it. It may lie anywhere else, the image's own folders under /usr included."""
    problem = _path_problem(workdir)
    if problem is not None:
        yield _finding(ctx, "mount-path", "working_dir", *problem)
        return
    system = next((s for s in WORKDIR_REFUSED if _holds(s, workdir)), None)
    clash = next(((who, other) for who, other in theirs if _holds(other, workdir)), None)
    if system is not None:
        what = "a system path" if system == workdir else f"under the system path {system}"
        yield _finding(ctx, "mount-path", "working_dir",
                       f"{workdir} is {what}: the entry point and what the script writes by "
                       "relative path would be there",
                       "use the folder of the image that holds the training code, e.g. /workspace")
    elif clash is not None:
        yield _finding(ctx, "mount-path", "working_dir",
                       f"{workdir} is {'' if workdir == clash[1] else 'under '}{clash[0]} "
                       f"({clash[1]}): that mount would hide the image's code there",
                       "use the folder of the image that holds the training code, e.g. /workspace")


@rule("launcher", "error", "The tool adds the launcher; the command is the entry point only")
def check_launcher(ctx: Context) -> Iterator[Finding]:
    """`python` for one GPU, `torchrun` otherwise, with flags derived from the preset. The
    command starts with the entry point: torchrun takes unique prefixes of its flags and the
    last copy wins, so anything before the script that starts with `-` could reshape the job.
    The entry point's name says how it runs (the file is in the image, not here to inspect):
    a `*.py` script (or `-m module`) with Python; a wrapper script, `*.sh` (executable, with a
    shebang, and named with a `/`, e.g. `./run.sh`) or `[bash, run.sh]`, as an executable:
    torchrun `--no-python`, and on one GPU the script alone, no `python -u`. Any other name
    is refused: it cannot be told which it is. A launcher's own module as the entry point is
    refused too (it would start processes of its own): `-m torch.distributed.run`,
    `torch.distributed.launch`, `accelerate.commands.launch`,
    `accelerate.commands.accelerate_cli`, `deepspeed.launcher.runner` or
    `deepspeed.launcher.launch`, or a script whose path ends in one of them as a file
    (`.../torch/distributed/run.py`)."""
    command = ctx.loaded.profile.command
    first = command[0]
    kind = entry_point_kind(command)
    if first.rsplit("/", 1)[-1] in LAUNCHERS and kind != EXECUTABLE_ENTRY:
        rest = without_launcher(command)
        yield _finding(ctx, "launcher", "command[0]",
                       f"{first!r} is a launcher; runai-spec adds the right one per layout",
                       f"start the command with the script: {rest!r}" if rest
                       else "start the command with the script")
    elif (module := launcher_entry(command)) is not None:
        yield _finding(ctx, "launcher", "command[0]" if first.endswith(".py") else "command[1]",
                       f"{module!r} is a launcher's own module: it would start processes of its "
                       "own beside the ones the preset plans (runai-spec already runs torchrun "
                       "or python per layout)",
                       "start the command with your training script, e.g. [train.py, ...]")
    elif first in ("-m", "--module"):
        if not ctx.site.allow_module_entrypoint:
            yield _finding(ctx, "launcher", "command[0]",
                           "the module form (`-m package`) is not allowed on this site",
                           "start the command with the script's path, e.g. [train.py, ...]")
    elif first.startswith("-"):
        yield _finding(ctx, "launcher", "command[0]",
                       f"{first!r} is a flag before the entry point; torchrun would take it "
                       "as its own (it accepts unique prefixes, and the last copy wins)",
                       "start the command with the script's path; the preset decides the "
                       "launcher's flags")
    elif any(c.isspace() for c in first):
        words = [*first.split(), *command[1:]]
        if words[0].rsplit("/", 1)[-1] in LAUNCHERS:
            words = without_launcher(words)
        yield _finding(ctx, "launcher", "command[0]",
                       f"{first!r} is one string with spaces: it is run as one file name",
                       f"write one list item per argument: {words!r}")
    else:
        yield from _entry_point_findings(ctx, command, kind)
    for index, arg in enumerate(command[1:], start=1):
        if LAUNCHER_FLAGS.match(arg):
            yield _finding(ctx, "launcher", f"command[{index}]",
                           f"{arg!r} is a torchrun flag; the preset decides the topology",
                           "remove it")


def _entry_point_findings(ctx: Context, command: list[str], kind: str | None
                          ) -> Iterator[Finding]:
    """Whether the entry point runs with Python or as an executable, told by its name (the
    file is in the image, not here): `*.py` (or `-m module`) with Python; a wrapper script,
    `*.sh` or `[bash|sh, script.sh]`, as an executable (torchrun `--no-python`, and no
    `python -u` on one GPU); another name is refused. An executable named without a `/` is
    looked up on PATH, not in the working directory, by the container runtime and torchrun."""
    first = command[0]
    if kind is None:
        yield _finding(ctx, "launcher", "command[0]",
                       f"{first!r}: runai-spec cannot tell whether this is a Python script or "
                       "an executable (the file is in the image, so its name decides)",
                       "a Python script ends in .py; a wrapper script ends in .sh (executable, "
                       "with a shebang) or is written with its interpreter, e.g. "
                       "[bash, run.sh]")
    elif kind == EXECUTABLE_ENTRY and first.rsplit("/", 1)[-1] not in SHELLS and "/" not in first:
        yield _finding(ctx, "launcher", "command[0]",
                       f"{first!r} is run as an executable, and without a '/' it is looked up "
                       "on PATH, not in the working directory",
                       f"write {['./' + first, *command[1:]]!r} (relative to working_dir), its "
                       f"absolute path, or {['bash', first, *command[1:]]!r}")


def _launcher_head(command: list[str]) -> tuple[str, ...]:
    """The launcher and its flags before the entry point (torchrun passes everything after
    the script to the script); the whole argv where it starts with no known launcher."""
    try:
        return split_command(command).head
    except InputError:
        return tuple(command)


@rule("nproc-gpus", "error", "Processes per pod equal the GPUs visible in the pod")
def check_nproc(ctx: Context) -> Iterator[Finding]:
    """The guide: the process count must match the GPUs visible inside the pod."""
    for manifest in ctx.manifests:
        if manifest.get("kind") != KIND:
            continue
        nproc = manifest["spec"]["nprocPerNode"]
        for role, spec in manifest["spec"]["pytorchReplicaSpecs"].items():
            container = pytorch_container(spec, role)
            gpus = container["resources"]["limits"][GPU_RESOURCE]
            command = container["command"]
            head = _launcher_head(command)  # after the entry point, the flags are the script's
            flags = nproc_flags(head)
            started = torchrun_procs(manifest, head, ctx.site.operator_version)
            if command[:1] == ["torchrun"] and str(started) != str(gpus):
                yield _finding(ctx, "nproc-gpus", f"spec.pytorchReplicaSpecs.{role}",
                               f"torchrun would start {started} process(es) per pod on {gpus} "
                               "GPUs", "this is a runai-spec or preset bug; tell the AI Engineers")
            elif str(gpus) != str(nproc) or any(flag != str(gpus) for flag in flags):
                yield _finding(ctx, "nproc-gpus", f"spec.pytorchReplicaSpecs.{role}",
                               f"{gpus} GPUs per pod but nprocPerNode {nproc} / flags {flags}",
                               "this is a runai-spec or preset bug; tell the AI Engineers")


# --- preemption, metrics, memory, DeepSpeed, approvals, credentials ------------------

@rule("preemptible-needs-resume", "error",
      "A preemptible preset needs checkpoints on a PVC and a resume setting")
def check_preemptible_resume(ctx: Context) -> Iterator[Finding]:
    """The guide: confirm the framework can restore after a pod restart or preemption. On a
    preemptible preset that is not optional: the job will be stopped and started again, so it
    needs `checkpoint.resume`; that checkpoints live on a PVC is `checkpoint-on-pvc`'s check."""
    if not ctx.approved.preset.preemptible:
        return
    ckpt = ctx.loaded.profile.checkpoint
    if ckpt.resume is None:
        yield _finding(ctx, "preemptible-needs-resume", "checkpoint.resume",
                       f"preset {ctx.approved.name} is preemptible but checkpoint.resume is not set",
                       f"say how the script resumes, e.g. `resume: latest checkpoint in {ckpt.dir}`, "
                       "and test it in the rehearsal")


@rule("sigterm-one-gpu", "warning",
      "One GPU: a script that does not handle SIGTERM holds its GPU for the grace period")
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
    if plan.launcher[:1] == ("torchrun",) or plan.checkpoint_on_sigterm or grace <= 0:
        return
    yield _finding(ctx, "sigterm-one-gpu", "checkpoint.on_sigterm",
                   f"the script is PID 1 of its container, which ignores SIGTERM unless the "
                   f"script handles it: each preemption holds the GPU idle for the preset's "
                   f"{grace} s grace period before SIGKILL",
                   "handle SIGTERM in the script (save, then exit) and declare "
                   "`checkpoint: {on_sigterm: true}`; `rehearse --preempt` checks it",
                   severity="warning")


@rule("shutdown-window", "warning",
      "torch before 2.12 gives torchrun's ranks 30 s to save on SIGTERM, not the grace period")
def check_shutdown_window(ctx: Context) -> Iterator[Finding]:
    """torchrun, PID 1 of a torchrun pod, forwards SIGTERM to its ranks and SIGKILLs them its
    shutdown timeout later (launcher.shutdown_window): the render sets it to the preset's
    grace period (TORCH_ELASTIC_SHUTDOWN_TIMEOUT), which torch reads from 2.12 on; torch 2.11
    and older kill the ranks after 30 s. Where the profile declares such a torch and a save on
    SIGTERM, the save has 30 s, not the grace period."""
    plan = ctx.plan
    grace = plan.termination_grace_period_seconds
    if plan.launcher[:1] != ("torchrun",) or not plan.checkpoint_on_sigterm:
        return
    window = shutdown_window(plan.torch_version, grace)
    if window is None or window >= grace:
        return
    yield _finding(ctx, "shutdown-window", "torch_version",
                   f"torch {plan.torch_version} gives the ranks {window} s from SIGTERM to "
                   f"SIGKILL (torchrun's fixed shutdown timeout), not the preset's {grace} s "
                   "grace period: a checkpoint on SIGTERM that takes longer is cut off",
                   f"use an image with torch 2.12 or later (it reads {SHUTDOWN_TIMEOUT_ENV}, "
                   f"which the render sets to the grace period), or keep the save on SIGTERM "
                   f"under {window} s", severity="warning")


@rule("rank0-metrics", "error", "Only rank 0 writes shared metrics", milder=("warning",))
def check_rank0_metrics(ctx: Context) -> Iterator[Finding]:
    """The guide: ensure only rank 0 writes shared metrics or non-sharded output. A tool cannot
    read the script, so the profile declares it (`metrics: {writer: rank0}`): undeclared on
    more than one process is a warning, `writer: all-ranks` an error."""
    if ctx.plan.world_size <= 1 and ctx.plan.elastic is None:
        return
    metrics = ctx.loaded.profile.metrics
    if metrics is None:
        yield _finding(ctx, "rank0-metrics", "metrics",
                       f"{ctx.plan.world_size} processes and no declaration of who writes metrics",
                       "guard metric writes with `if int(os.environ['RANK']) == 0` and declare "
                       "`metrics: {writer: rank0}`", severity="warning")
    elif metrics.writer == "all-ranks":
        yield _finding(ctx, "rank0-metrics", "metrics.writer",
                       f"every one of {ctx.plan.world_size} ranks writes the same metrics "
                       f"(each value {ctx.plan.world_size} times)",
                       "write from global rank 0 only (torchrun's per-process RANK), or use "
                       "`writer: per-rank` with one file per rank")


BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
HEADROOM = 0.8  # model state above this share of GPU memory leaves too little for activations


@dataclass(frozen=True)
class MemoryEstimate:
    """Model state per GPU (weights, gradients, optimizer), in GB (1e9 bytes)."""

    method: str
    shards: int
    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    capacity_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.grads_gb + self.optimizer_gb

    @property
    def share(self) -> float:
        return self.total_gb / self.capacity_gb

    def describe(self) -> str:
        return (f"{self.total_gb:.1f} GB per GPU (weights {self.weights_gb:.1f} + gradients "
                f"{self.grads_gb:.1f} + optimizer {self.optimizer_gb:.1f}, {self.method}) "
                f"of {self.capacity_gb:g} GB")


def state_bytes(profile: Profile) -> tuple[float, float, float]:
    """Bytes per parameter for weights, gradients and optimizer state (activations excluded).

    Mixed precision keeps an fp32 master copy in the optimizer; Adam adds two fp32 moments,
    SGD one momentum buffer. bf16 + AdamW is the usual 2 + 2 + 12 = 16 bytes per parameter."""
    assert profile.model is not None
    value = BYTES_PER_VALUE[profile.model.precision]
    master = 4 if value < 4 else 0
    moments = 4 if profile.model.optimizer == "sgd" else 8
    return float(value), float(value), float(master + moments)


def memory_estimate(profile: Profile, plan: Plan, capacity_gb: float,
                    strategy: str | None = None, zero_stage: int | None = None
                    ) -> MemoryEstimate | None:
    """Per-GPU model state for a strategy; None when the profile declares no model or the
    strategy's split (tensor, pipeline, hybrid degrees) is not known to the tool."""
    if profile.model is None:
        return None
    strategy = strategy or profile.strategy
    stage = profile.zero_stage if zero_stage is None else zero_stage
    # Elastic jobs may run on the fewest pods: size the shards for that worst case.
    shards = plan.procs_per_pod * (plan.elastic.min_pods if plan.elastic else plan.pods)
    params = profile.model.parameters / 1e9
    w, g, o = (params * b for b in state_bytes(profile))
    if strategy == "ddp" or (strategy == "deepspeed" and not stage):
        return MemoryEstimate("full replica per GPU (DDP)", 1, w, g, o, capacity_gb)
    if strategy == "fsdp" or (strategy == "deepspeed" and stage == 3):
        name = "FSDP full shard" if strategy == "fsdp" else "ZeRO-3"
        return MemoryEstimate(f"{name} over {shards} GPUs", shards, w / shards, g / shards,
                              o / shards, capacity_gb)
    if strategy == "deepspeed" and stage == 1:
        return MemoryEstimate(f"ZeRO-1 over {shards} GPUs", shards, w, g, o / shards, capacity_gb)
    if strategy == "deepspeed" and stage == 2:
        return MemoryEstimate(f"ZeRO-2 over {shards} GPUs", shards, w, g / shards, o / shards,
                              capacity_gb)
    return None


@rule("ddp-replica-fits", "error", "The model state fits the preset's GPU memory",
      milder=("warning", "info"))
def check_replica_fits(ctx: Context) -> Iterator[Finding]:
    """The guide: DDP assumes a complete replica fits on every GPU. Estimates weights,
    gradients and optimizer state (parameters x bytes at the profile's precision); activations
    need the rest, so more than 80% of GPU memory is a warning, more than 100% an error.
    For FSDP and ZeRO the per-GPU estimate is reported."""
    profile = ctx.loaded.profile
    gpu = ctx.approved.preset.gpu
    if profile.model is None:
        if ctx.plan.world_size > 1:
            yield _finding(ctx, "ddp-replica-fits", "model",
                           "model size and precision are not declared; the memory check and the "
                           "review need them",
                           "add `model: {parameters: N, precision: bf16, sequence_length: N}`",
                           severity="warning")
        return
    estimate = memory_estimate(profile, ctx.plan, gpu.memory_gb)
    if estimate is None:
        yield _finding(ctx, "ddp-replica-fits", "strategy",
                       f"no memory estimate for {profile.strategy}: it depends on the parallel "
                       "degrees, which are part of the review", "run `runai-spec plan` and "
                       "agree the topology with your AI Engineer", severity="info")
        return
    sharded = estimate.shards > 1
    where = "strategy" if sharded else "model.parameters"
    if estimate.share > 1 or (estimate.share > HEADROOM and not sharded):
        worst = estimate.share > 1
        message = (f"{'does not fit' if worst else 'leaves under 20% for activations'}: "
                   f"{estimate.describe()} ({gpu.model})")
        options = []
        for strategy, stage in (("fsdp", None), ("deepspeed", 2), ("deepspeed", 3)):
            alt = memory_estimate(profile, ctx.plan, gpu.memory_gb, strategy, stage)
            if alt is not None and alt.shards > 1 and strategy in ctx.approved.preset.strategies:
                options.append(f"{alt.method}: {alt.total_gb:.1f} GB per GPU")
        hint = ("shard the model state: " + "; ".join(options) if options and not sharded
                else "a bigger preset or a model-parallel topology; run `runai-spec plan` "
                     "and ask your AI Engineer")
        yield _finding(ctx, "ddp-replica-fits", where, message, hint,
                       severity=None if worst else "warning")
    elif sharded:
        yield _finding(ctx, "ddp-replica-fits", "strategy",
                       f"model state estimate: {estimate.describe()}",
                       "activations come on top; measure peak memory in the rehearsal",
                       severity="info")


AUTOTUNE = re.compile(r"(?i)autotun")
MODEL_PARALLEL_FLAG = re.compile(
    r"(?i)^--?[\w.-]*?(tensor|pipe|pipeline|model|context|sequence|expert)[-_]?(model[-_]?)?"
    r"parallel(ism)?[-_]?(size|degree|stages?)(=(?P<value>.*))?$"
    r"|^--(tp|pp|cp|ep)([-_](size|degree))?(=(?P<short>.*))?$"
    r"|^--(num[-_]stages|pipeline[-_]stages)(=(?P<stages>.*))?$")
MODEL_PARALLEL_ENV = re.compile(
    r"(?i)^(TP|PP|CP|EP|TENSOR_PARALLEL|PIPELINE_PARALLEL|MODEL_PARALLEL|PIPE_PARALLEL|"
    r"CONTEXT_PARALLEL|EXPERT_PARALLEL)(_(SIZE|DEGREE|DIM))?$")


def _degree(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@rule("deepspeed-autotune", "error",
      "No DeepSpeed autotuning sweep or copied model-parallel configuration")
def check_deepspeed_autotune(ctx: Context) -> Iterator[Finding]:
    """The guide: do not start a DeepSpeed autotuning sweep or copy a model-parallel
    configuration from another cluster; share model size, precision, sequence length,
    checkpoint format and topology with the AI Engineer first."""
    profile = ctx.loaded.profile
    review = ("remove it; `runai-spec plan PROFILE` writes the review request for your SCC AI "
              "Engineer, who approves a bounded test plan")
    command = profile.command
    for index, arg in enumerate(command):
        if AUTOTUNE.search(arg):
            yield _finding(ctx, "deepspeed-autotune", f"command[{index}]",
                           f"{arg!r} requests a DeepSpeed autotuning sweep", review)
            continue
        match = MODEL_PARALLEL_FLAG.match(arg)
        if match:
            value = match.group("value") or match.group("short") or match.group("stages")
            if value is None and index + 1 < len(command):
                value = command[index + 1]
            if _degree(value) == 1:  # a degree of 1 is no model parallelism at all
                continue
            yield _finding(ctx, "deepspeed-autotune", f"command[{index}]",
                           f"{arg!r} sets a model-parallel degree ({value}) the preset was not "
                           "reviewed for", review)
    for name, value in profile.env_strings().items():
        if AUTOTUNE.search(name) or AUTOTUNE.search(value):
            yield _finding(ctx, "deepspeed-autotune", _env_line(name),
                           f"{name} requests DeepSpeed autotuning", review)
        elif MODEL_PARALLEL_ENV.match(name) and _degree(value) != 1:
            yield _finding(ctx, "deepspeed-autotune", _env_line(name),
                           f"{name}={value} sets a model-parallel degree", review)


EXPIRY_WARNING_DAYS = 30


@rule("preset-expired", "warning", "The preset's approval expires soon")
def check_preset_expiry(ctx: Context) -> Iterator[Finding]:
    """An expired approval is refused by the registry; this warns within 30 days of the
    expiry of the preset's or the site file's approval, so the re-review happens in time."""
    if ctx.today is None:
        return
    for what, approval in ((f"preset {ctx.approved.name}", ctx.approved.approval),
                           ("the site file", ctx.site_approval)):
        if approval is None or approval.expires is None:
            continue
        days = (dt.date.fromisoformat(approval.expires) - ctx.today).days
        if 0 <= days <= EXPIRY_WARNING_DAYS:
            yield _finding(ctx, "preset-expired", "preset",
                           f"the approval of {what} expires on {approval.expires} "
                           f"(in {days} day{'s' if days != 1 else ''}); after that it is refused",
                           "ask your SCC AI Engineers to re-review and re-approve it "
                           "(`runai-spec presets approve NAME --key KEY --expires DATE`)")


SECRET_VALUE = re.compile(
    r"(AKIA|ASIA)[0-9A-Z]{16}"                          # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"                         # GitLab
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"                    # Slack
    r"|\bhf_[A-Za-z0-9]{30,}"                            # Hugging Face
    r"|\bsk-[A-Za-z0-9_-]{20,}"                          # OpenAI-style API keys
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")         # URL with user:password
SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*(token|password|passwd|api[-_]?key|secret)[\w-]*(=.+)?$")


def secret_value(value: str) -> bool:
    """True for values shaped like a known token, key or password-bearing URL."""
    return bool(SECRET_VALUE.search(value))


SECRET_HINT = ("put it in a Kubernetes Secret in the project's namespace and reference it: "
               "`secret_env: {NAME: {secret: SECRET-NAME, key: KEY}}` (rendered as "
               "valueFrom.secretKeyRef); rotate it if it was ever committed")


@rule("secret-env", "error", "Credentials come from a Secret (secretKeyRef), never the profile")
def check_secret_env(ctx: Context) -> Iterator[Finding]:
    """Plain values end up in git, in the manifest and in `kubectl get -o yaml`; credentials
    belong in a Secret, referenced with `secret_env` (valueFrom.secretKeyRef)."""
    profile = ctx.loaded.profile
    for name, value in profile.env_strings().items():
        if looks_secret(name):
            yield _finding(ctx, "secret-env", _env_line(name),
                           f"{name} looks like a credential written as a plain value", SECRET_HINT)
        elif secret_value(value):
            yield _finding(ctx, "secret-env", _env_line(name),
                           f"the value of {name} looks like a credential", SECRET_HINT)
    for name in profile.secret_env:
        if name in profile.env:
            yield _finding(ctx, "secret-env", f"secret_env.{name}",
                           f"{name} is set both in env and in secret_env",
                           "keep only the secret_env entry")
    for index, arg in enumerate(profile.command):
        if secret_value(arg) or (SECRET_FLAG.match(arg) and "=" in arg):
            yield _finding(ctx, "secret-env", f"command[{index}]",
                           "a command argument looks like a credential", SECRET_HINT)


# --- site: grants (issue 13) --------------------------------------------------------

GRANT_HINT = ("ask the SCC AI Engineers to grant the preset to your project (the site guide: "
              "multi-GPU and multi-node work needs advance agreement), or use a preset your "
              "project is granted (`runai-spec presets list`)")


@rule("preset-not-granted", "error", "The project is granted the preset (site file `grants`)")
def check_preset_granted(ctx: Context) -> Iterator[Finding]:
    """The site file's `grants` say which projects may use which presets; single-GPU presets
    are usually granted to every project (`*`), multi-GPU and multi-node ones by agreement."""
    project, name = ctx.loaded.profile.project, ctx.approved.name
    if not ctx.site.granted(project, name):
        yield _finding(ctx, "preset-not-granted", "preset",
                       f"project {project} is not granted preset {name}", GRANT_HINT)


# The profile's top-level fields each rule reads (beyond its findings' own fields): when one
# of them did not parse, the rule's findings are left out rather than guessed (issue 16 #4).
# A rule missing here is left out whenever any field did not parse; tests keep this complete.
READS: dict[str, tuple[str, ...]] = {
    "reserved-field": (), "nproc-gpus": (), "preset-expired": (),
    "nccl-transport-env": ("env", "secret_env"), "reserved-env": ("env", "secret_env"),
    "nccl-debug-temporary": ("env", "secret_env", "diagnostics"),
    "image-digest": ("image",), "registry": ("image",), "global-batch": ("batch",),
    "strategy-allowed": ("strategy", "zero_stage"), "name-length": ("name", "project"),
    "checkpoint-on-pvc": ("checkpoint",), "data-source": ("checkpoint", "data"),
    "launcher": ("command",),
    "preemptible-needs-resume": ("checkpoint",), "rank0-metrics": ("metrics",),
    "sigterm-one-gpu": ("checkpoint",), "shutdown-window": ("checkpoint", "torch_version"),
    "ddp-replica-fits": ("model", "strategy", "zero_stage"),
    "deepspeed-autotune": ("command", "env"), "secret-env": ("env", "secret_env", "command"),
    "preset-not-granted": ("project",), "smoke-name": ("name",),
    "mount-path": ("checkpoint", "data", "working_dir"),
}


def check_all(ctx: Context) -> list[Finding]:
    """Every rule's findings, in rule order; never stops at the first."""
    findings: list[Finding] = []
    for entry in RULES.values():
        findings.extend(entry.check(ctx))
    return findings
