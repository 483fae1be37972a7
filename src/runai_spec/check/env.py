"""Rules on the variables a profile sets: owned by the preset, the operator, runai-spec; credentials."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from ..facts.kubeflow import (
    CONTAINER,
    INJECTED_ENV,
    MASTER,
    OPERATOR_VERSIONS,
    POD_NAME_ENV,
    RDZV_BACKEND,
    REPLICA_TYPES,
    WORKER,
    operator_env,
)
from ..facts.torchrun import (
    DISABLE_SHARED_STORE,
    NCCL_DIAGNOSTICS,
    TRANSPORT_ENV_NAMES,
    TRANSPORT_ENV_PREFIXES,
)
from ..findings import Finding
from ..load.profile import Profile
from ..plan.plan import Plan
from ..secrets import looks_secret, secret_value
from .rules import Context, finding, rule


# Turned around (red team): every NCCL_* variable is the preset's, because NCCL reads any of
# them (and NCCL >= 2.23 reads all of them from NCCL_CONF_FILE); so are the other transports'
# interface and plugin variables and the linker's, which can swap the transport library itself
# (the list: facts/torchrun.py, which outputs/admission/rules.py reads too). Only the
# diagnostics switch's own variables are left out, for `nccl-debug-temporary`.
def transport_variable(name: str) -> bool:
    """A variable that chooses or configures the network path: the engineers' (the preset's)."""
    return (
        name.startswith(TRANSPORT_ENV_PREFIXES) or name in TRANSPORT_ENV_NAMES
    ) and name not in NCCL_DIAGNOSTICS


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
        TRANSPORT_WHAT[p] for p in sorted(TRANSPORT_ENV_PREFIXES, key=len, reverse=True) if name.startswith(p)
    )


def env_line(name: str) -> str:
    return f"env.{name}"


def env_fields(profile: Profile) -> list[tuple[str, str]]:
    """(name, field) of every variable the profile sets: `env.NAME` or `secret_env.NAME`, so
    that a finding points at the line that sets it."""
    return [(name, env_line(name)) for name in profile.env] + [
        (name, f"secret_env.{name}") for name in profile.secret_env
    ]


# The ids of this module's rules, each spelled once (rules.py's registry: `runai-spec rules`).
NCCL_TRANSPORT_ENV = "nccl-transport-env"
NCCL_DEBUG_TEMPORARY = "nccl-debug-temporary"
RESERVED_ENV = "reserved-env"
SECRET_ENV = "secret-env"


@rule(NCCL_TRANSPORT_ENV, "error", "NCCL interface and transport variables are engineer-owned")
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
    for name, field in env_fields(ctx.loaded.profile):
        if transport_variable(name):
            yield finding(
                ctx,
                NCCL_TRANSPORT_ENV,
                field,
                f"{name} configures {transport_what(name)}, which the preset owns",
                "remove it; the preset supplies the approved network path. "
                "For a hang, keep per-rank logs and ask your AI Engineer",
            )


@rule(
    NCCL_DEBUG_TEMPORARY,
    "error",
    "NCCL_DEBUG only through the temporary diagnostics switch",
    milder=("warning",),
)
def check_nccl_debug(ctx: Context) -> Iterator[Finding]:
    """NCCL_DEBUG=INFO is a temporary diagnostic; it is switched on explicitly and reported."""
    profile = ctx.loaded.profile
    for name, field in sorted(env_fields(profile)):
        if name not in NCCL_DIAGNOSTICS:
            continue
        yield finding(
            ctx,
            NCCL_DEBUG_TEMPORARY,
            field,
            f"{name} set as a variable stays on after diagnosis",
            "use `diagnostics: {nccl_debug: true, reason: ...}` and remove it afterwards",
        )
    if profile.diagnostics.nccl_debug:
        reason = profile.diagnostics.reason or "no reason given"
        yield finding(
            ctx,
            NCCL_DEBUG_TEMPORARY,
            "diagnostics.nccl_debug",
            f"temporary diagnostic NCCL_DEBUG=INFO is on ({reason})",
            "save a log per rank (`runai-spec logs --out DIR`) and switch it off after diagnosis",
            severity="warning",
        )


def _operator_names() -> frozenset[str]:
    """Every variable the modelled training-operator releases may append to the pytorch
    container (kubeflow.operator_env), whatever the job: a Master and Workers, with and
    without an elasticPolicy that sets all it can."""
    replica = {"replicas": 1, "template": {"spec": {"containers": [{"name": CONTAINER}]}}}
    elastic = {
        "maxRestarts": 1,
        "nProcPerNode": 1,
        "rdzvId": "id",
        "standalone": True,
        "rdzvConf": [{"key": "key", "value": "value"}],
    }
    names: set[str] = set()
    for version in OPERATOR_VERSIONS:
        for policy in ({}, {"elasticPolicy": elastic}):
            job = {
                "metadata": {"name": "job"},
                "spec": {
                    "nprocPerNode": "1",
                    "pytorchReplicaSpecs": {MASTER: replica, WORKER: replica},
                    **policy,
                },
            }
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
    owners[DISABLE_SHARED_STORE[0]] = f"runai-spec (for a {RDZV_BACKEND} rendezvous)"
    for index, (name, _) in enumerate(plan.env):
        origin = plan.origins.get(f"env[{index}][1]")
        if origin is None or (origin.kind == "profile" and origin.field == env_line(name)):
            continue
        owners[name] = (
            f"the preset ({origin.file} {origin.field})"
            if origin.kind == "preset"
            else "runai-spec"
            if origin.kind in ("derived", "template")
            else f"the profile's {origin.field}"
        )
    for name, _ in plan.field_env:
        owners[name] = "runai-spec (the pod's own name, for its per-rank log folder)"
    return owners


@rule(RESERVED_ENV, "error", "Variables the operator, torchrun, the preset or runai-spec set")
def check_operator_env(ctx: Context) -> Iterator[Finding]:
    """Rank, world size, master address and device visibility are set per process; the
    operator sets PYTHONUNBUFFERED and its PET_* variables, the preset its network.env, and
    runai-spec its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, the per-rank log line prefix).
    Set in `env`, the profile's value would be dropped or lose to theirs; in `secret_env` the
    container would get two variables of one name (the later wins, and a server-side apply
    refuses the duplicate). The transport variables and the diagnostics switch have rules of
    their own (`nccl-transport-env`, `nccl-debug-temporary`)."""
    owners = env_owners(ctx.plan)
    for name, field in env_fields(ctx.loaded.profile):
        if INJECTED_ENV.match(name):
            yield finding(
                ctx,
                RESERVED_ENV,
                field,
                f"{name} is injected by the PyTorch operator or torchrun"
                + (" (runai-spec sets it for the per-rank log folder)" if name == POD_NAME_ENV[0] else ""),
                "remove it; read RANK, LOCAL_RANK and WORLD_SIZE in the script",
            )
        elif name in owners and not transport_variable(name) and name not in NCCL_DIAGNOSTICS:
            yield finding(
                ctx,
                RESERVED_ENV,
                field,
                f"{name} is set by {owners[name]}: "
                + (
                    "the container would get a second variable of that name, and the later one wins"
                    if field.startswith("secret_env.")
                    else "a value set here never reaches the job"
                ),
                "remove it; ask your AI Engineer if the job needs another value",
            )


SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*(token|password|passwd|api[-_]?key|secret)[\w-]*(=.+)?$")


# Asked of every variable and argument of every profile: pure functions of the text, kept for
# the texts a batch repeats.
_secret_name = lru_cache(maxsize=4096)(looks_secret)
_secret_value = lru_cache(maxsize=4096)(secret_value)


@lru_cache(maxsize=4096)
def _secret_arg(arg: str) -> bool:
    return secret_value(arg) or (SECRET_FLAG.match(arg) is not None and "=" in arg)


SECRET_HINT = (
    "put it in a Kubernetes Secret in the project's namespace and reference it: "
    "`secret_env: {NAME: {secret: SECRET-NAME, key: KEY}}` (rendered as "
    "valueFrom.secretKeyRef); rotate it if it was ever committed"
)


@rule(SECRET_ENV, "error", "Credentials come from a Secret (secretKeyRef), never the profile")
def check_secret_env(ctx: Context) -> Iterator[Finding]:
    """Plain values end up in git, in the manifest and in `kubectl get -o yaml`; credentials
    belong in a Secret, referenced with `secret_env` (valueFrom.secretKeyRef)."""
    profile = ctx.loaded.profile
    for name, value in profile.env_strings().items():
        if _secret_name(name):
            yield finding(
                ctx,
                SECRET_ENV,
                env_line(name),
                f"{name} looks like a credential written as a plain value",
                SECRET_HINT,
            )
        elif _secret_value(value):
            yield finding(
                ctx, SECRET_ENV, env_line(name), f"the value of {name} looks like a credential", SECRET_HINT
            )
    for name in profile.secret_env:
        if name in profile.env:
            yield finding(
                ctx,
                SECRET_ENV,
                f"secret_env.{name}",
                f"{name} is set both in env and in secret_env",
                "keep only the secret_env entry",
            )
    for index, arg in enumerate(profile.command):
        if _secret_arg(arg):
            yield finding(
                ctx,
                SECRET_ENV,
                f"command[{index}]",
                "a command argument looks like a credential",
                SECRET_HINT,
            )
