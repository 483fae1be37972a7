"""The job's pods planned for this machine: each pod's argv, env, folders and c10d store host."""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import secrets
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import InputError
from ..facts.kubeflow import (
    MASTER_ADDR_ENVS,
    MASTER_PORT_ENVS,
    POD_NAME_ENV,
    RDZV_ENDPOINT_ENV,
    short_pod_name,
)
from ..facts.kubelet import container_env, expand_command
from ..facts.torchrun import (
    ACCELERATE,
    LOG_DIR_FLAG,
    LOG_DIR_FLAGS,
    NCCL_DEBUG_FILE,
    TEE_FLAG,
    Launcher,
    flag_uses,
    python_head,
    set_nproc,
    split_command,
)
from ..pipeline.checklist import preflight_source
from .accelerate_here import accelerate_here, downward_files, rank_log_flags
from .filesystem import AUDIT_ENV, AUDIT_KEY_ENV, POD_ENV, audit_layer_dir, can_mount, pod_filesystem
from .job import container_of, find_job, nproc_of, operator_env, plan_world_size, replicas_of
from .network import NetPlan
from .process_tree import PID_NAMESPACE, can_pid_namespace
from .spec import RehearsalSpec
from .store import StoreHost, accelerate_store_host, c10d_store_host, with_is_host

# NVLink multicast can put a shared host's GPUs out of service (device README): always off,
# also where a container's own env would switch it on.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# Set by the operator or by torchrun: never inherited from the shell that runs the rehearsal.
_OWNED = re.compile(
    r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|"
    r"ROLE_WORLD_SIZE|GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PET_.*|"
    r"TORCHELASTIC_.*|PREFLIGHT_.*|CUDA_VISIBLE_DEVICES)$"
)


@dataclass(frozen=True)
class PodPlan:
    """One pod of the job as the operator would start it, mapped onto this machine."""

    name: str  # short name: master-0, worker-0, ...
    replica_type: str
    index: int
    rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    log_dir: Path
    wrapper: tuple[str, ...] = ()  # started before argv: the pod's file system (--own-script)
    filesystem_note: str | None = None
    added_flags: tuple[str, ...] = ()  # launcher flags the rehearsal adds to the rendered ones
    rank_logs: Path | None = None  # torchrun's --log-dir as a folder of this machine
    store: StoreHost | None = None  # c10d rendezvous: who hosts the store, and how it is said
    nccl_debug_file: Path | None = None  # NCCL_DEBUG_FILE's pattern as a path of this machine
    port: int | None = None  # the one free port here that stands for the cluster's ports
    grace_s: float | None = None  # the pod's terminationGracePeriodSeconds, if it sets one
    pid_namespace: bool = False  # its command runs as PID 1 of a PID namespace of its own


_LOOPBACK = "127.0.0.1"
CHECKPOINTS_HERE = "checkpoints"  # the preflight's checkpoints, in the rehearsal's folder


def _on_loopback(op: Mapping[str, str], port: int) -> dict[str, str]:
    """The operator's variables with the cluster's service names on this machine's loopback
    and its ports on one free port."""
    out = dict(op)
    for key in MASTER_ADDR_ENVS:
        if key in out:
            out[key] = _LOOPBACK
    for key in MASTER_PORT_ENVS:
        if key in out:
            out[key] = str(port)
    if RDZV_ENDPOINT_ENV in out:
        out[RDZV_ENDPOINT_ENV] = f"{_LOOPBACK}:{port}"
    return out


def _grace(value: Any) -> float | None:
    """terminationGracePeriodSeconds as the pod spec gives it (None: Kubernetes' default)."""
    return None if value is None else float(value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_gpus(python: str) -> int:
    """How many CUDA devices torch sees here (0 on a CPU machine), in a subprocess; bad
    input when that Python has no torch, before any pod starts and fails obscurely."""
    try:
        done = subprocess.run(
            [python, "-c", "import torch; print(torch.cuda.device_count())"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot start {python}: {exc}", field="python") from None
    if "No module named 'torch'" in done.stderr:
        raise InputError(
            f"rehearse runs the pods with PyTorch, and {python} has no torch",
            field="torch",
            hint="install it into this environment: "
            "`pip install torch` (a CPU build is enough: the rehearsal uses gloo)",
        )
    try:
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0
    except (ValueError, IndexError):
        return 0


@dataclass(frozen=True)
class _Layout:
    """What every pod of the job shares: the spec, the job scaled to --procs-per-pod, its
    replicas and world, and what this machine gives them (GPUs, port, network, folders)."""

    spec: RehearsalSpec
    root: Path
    name: str  # the job's
    scaled: Mapping[str, Any]  # the job with the processes per pod of this rehearsal
    replicas: list[tuple[str, int, Mapping[str, Any]]]
    containers: dict[str, Mapping[str, Any]]  # each replica type's pytorch container
    nproc: int
    plan_world: int  # processes the job starts in the cluster (job.plan_world_size)
    min_world: int | None
    pods: list[tuple[str, int]]
    gpus: int
    port: int
    network: NetPlan | None
    hold_dir: Path | None
    script: Path  # this rehearsal's copy of preflight.py
    audit_key: str
    pid1: bool

    @property
    def world(self) -> int:
        return len(self.pods) * self.nproc

    def template(self, rtype: str) -> Mapping[str, Any]:
        rspec = next(spec for t, _, spec in self.replicas if t == rtype)
        return rspec.get("template") or {}

    def pod_spec(self, rtype: str) -> Mapping[str, Any]:
        return self.template(rtype).get("spec") or {}

    def overrides(self, short: str) -> dict[str, str]:
        """`env`, then the pod's `pod_env` by its short and its full name: set on purpose."""
        pod_env = self.spec.pod_env
        return {**self.spec.env, **pod_env.get(short, {}), **pod_env.get(f"{self.name}-{short}", {})}


def _scaled(job: Mapping[str, Any], procs_per_pod: int | None) -> dict[str, Any]:
    """The job with --procs-per-pod processes per pod, where given."""
    scaled = copy.deepcopy(dict(job))
    if procs_per_pod is not None:
        scaled["spec"] = {**scaled.get("spec", {}), "nprocPerNode": str(procs_per_pod)}
        if (scaled["spec"].get("elasticPolicy") or {}).get("nProcPerNode") is not None:
            scaled["spec"]["elasticPolicy"] = {
                **scaled["spec"]["elasticPolicy"],
                "nProcPerNode": procs_per_pod,
            }
    return scaled


def _layout(
    job: Mapping[str, Any],
    spec: RehearsalSpec,
    root: Path,
    gpus: int,
    hold_dir: Path | None,
    network: NetPlan | None,
) -> _Layout:
    """The job's shape here; bad input (too few GPUs) before any folder is made."""
    nproc = spec.procs_per_pod or nproc_of(job)
    if spec.procs_per_pod is not None and spec.procs_per_pod < 1:
        raise InputError("--procs-per-pod must be at least 1")
    scaled = _scaled(job, spec.procs_per_pod)
    replicas = replicas_of(job)
    containers = {rtype: container_of(rspec, rtype) for rtype, _, rspec in replicas}
    audit_key = secrets.token_hex(32)  # this rehearsal's: every pod's audit layer signs with it
    # an elastic job's round may form with minReplicas pods while another still restarts
    elastic = (job.get("spec") or {}).get("elasticPolicy") or {}
    min_world = int(elastic["minReplicas"]) * nproc if str(elastic.get("minReplicas", "")).isdigit() else None
    pods = [(rtype, i) for rtype, n, _ in replicas for i in range(n)]
    world = len(pods) * nproc
    if gpus and world > gpus:
        raise InputError(
            f"the rehearsal needs {world} GPUs (one per process), {gpus} visible",
            hint="scale down with --procs-per-pod, or rehearse on CPU",
        )
    port = free_port()
    # On loopback the pods share this machine's hostname, and torchrun's dynamic rendezvous
    # tells agents apart by hostname and PID (dynamic_rendezvous.py _NodeDesc, torch 2.13):
    # as PID 1 of their namespaces every agent would be one node. So several pods get PID
    # namespaces only with hostnames of their own (netns mode); one pod always can.
    pid1 = can_pid_namespace() and (network is not None or len(pods) == 1)
    preflight_dir = root / "preflight"
    preflight_dir.mkdir(parents=True, exist_ok=True)
    # a copy, so that the package's siblings never come first on the script's sys.path
    script = preflight_dir / "preflight.py"
    script.write_text(preflight_source(), encoding="utf-8")
    return _Layout(
        spec,
        root,
        str(job["metadata"]["name"]),
        scaled,
        replicas,
        containers,
        nproc,
        plan_world_size(job),
        min_world,
        pods,
        gpus,
        port,
        network,
        hold_dir,
        script,
        audit_key,
        pid1,
    )


def plan_pods(
    manifests: Sequence[Mapping[str, Any]],
    spec: RehearsalSpec,
    *,
    root: Path,
    gpus: int = 0,
    hold_dir: Path | None = None,
    network: NetPlan | None = None,
) -> tuple[list[PodPlan], int]:
    """Every pod's argv, env and folders, and the world size the plan expects. With `network`
    (network.py) each pod has its own namespace, address and hostname: the operator's
    variables stay as in the cluster and torch decides the c10d store host itself."""
    job = find_job(manifests, spec.plan.workload if spec.plan is not None else None)
    layout = _layout(job, spec, root, gpus, hold_dir, network)
    out = [_plan_pod(layout, pod_index, rtype, i) for pod_index, (rtype, i) in enumerate(layout.pods)]
    if spec.own_script:
        install_audit_layer(root)
    return out, layout.world


def _plan_pod(lay: _Layout, pod_index: int, rtype: str, i: int) -> PodPlan:
    """One pod's plan: its env as the kubelet builds it, its launcher as this machine runs it,
    its entry point (preflight.py, or the profile's own script) and folders."""
    short = short_pod_name(rtype, i)
    container = lay.containers[rtype]
    # the container's env as the kubelet builds it: its own list, then what the operator
    # appends; in the cluster, and here with the service names mapped onto loopback
    own = _own_env(container, f"{lay.name}-{short}")
    op_cluster = operator_env(lay.scaled, rtype, i, lay.spec.operator_version)
    op = _on_loopback(op_cluster, lay.port) if lay.network is None else dict(op_cluster)
    kenv = container_env([*own, *op.items()])
    kenv.update(MULTICAST_OFF)
    kenv.update(lay.overrides(short))
    cluster_env = container_env([*own, *op_cluster.items()])
    raw = list(container.get("command") or []) + list(container.get("args") or [])
    # the kubelet expands $(VAR) in command and args from the container's env
    command = expand_command(raw, kenv)
    launcher = split_command(command)
    mounts = _pvc_mounts(lay.pod_spec(rtype), container)
    mounted = lay.spec.own_script and can_mount()
    files = downward_files(lay.template(rtype), container, lay.root / short)
    head, added, rank_logs = _launcher_here(lay, short, launcher, command, mounts, mounted, files)
    store: StoreHost | None = None
    if launcher.kind == ACCELERATE:
        store = accelerate_store_host(
            split_command(expand_command(raw, cluster_env)).head, f"{lay.name}-{short}"
        )
    elif launcher.kind == "torchrun":
        store = c10d_store_host(
            split_command(expand_command(raw, cluster_env)).head, cluster_env, f"{lay.name}-{short}"
        )
    if store is not None and lay.network is None:
        head = with_is_host(head, kenv, store)
    pod_dir = lay.root / short
    pod_dir.mkdir(parents=True, exist_ok=True)
    fs = None
    if lay.spec.own_script:
        entry = list(launcher.entry) + list(lay.spec.script_args)  # --args: a shorter run
        fs = pod_filesystem(
            lay.pod_spec(rtype), container, lay.root, pod_dir, (lay.spec.workdir or Path.cwd()).resolve()
        )
    else:
        entry = _preflight_entry(lay, pod_dir)
    penv = _process_env(lay, kenv, pod_index, short)
    nccl_file = _nccl_debug_file_here(penv, mounts, lay.root, mounted=mounted)
    rank = int(op.get("RANK", pod_index))
    grace = lay.pod_spec(rtype).get("terminationGracePeriodSeconds")
    return PodPlan(
        short,
        rtype,
        i,
        rank,
        tuple(head + entry),
        penv,
        pod_dir,
        pod_dir,
        wrapper=(lay.network.wrapper(short) if lay.network else ())
        + (fs.wrapper if fs else ())
        + (PID_NAMESPACE if lay.pid1 else ()),
        filesystem_note=fs.note if fs else None,
        added_flags=added,
        rank_logs=rank_logs,
        store=store,
        nccl_debug_file=nccl_file,
        port=lay.port if lay.network is None else None,
        grace_s=_grace(grace),
        pid_namespace=lay.pid1,
    )


def _launcher_here(
    lay: _Layout,
    short: str,
    launcher: Launcher,
    command: Sequence[str],
    mounts: Sequence[tuple[str, str]],
    mounted: bool,
    files: Mapping[str, Path],
) -> tuple[list[str], tuple[str, ...], Path | None]:
    """The pod's launcher as this machine runs it, the flags the rehearsal added to it, and
    where torchrun's per-rank logs land here."""
    head = list(launcher.head)
    if not lay.spec.own_script:  # preflight.py runs with Python, whatever the entry point was
        head = list(python_head(command))
    added: tuple[str, ...] = ()
    rank_logs: Path | None = None
    python = lay.spec.python
    if launcher.kind == "torchrun":
        flags = head[1:] if os.path.basename(head[0]) == "torchrun" else head[3:]
        head = [python, "-m", "torch.distributed.run", *flags]
        if lay.spec.procs_per_pod is not None:
            head = list(set_nproc(head, lay.spec.procs_per_pod))
        head, rank_logs = _rank_logs_here(head, mounts, lay.root, mounted=mounted)
        if rank_logs is None:  # a render without --log-dir: the rehearsal needs the files
            rank_logs = lay.root / short / "ranks"
            added = (LOG_DIR_FLAG, str(rank_logs), "--redirects", "3", TEE_FLAG, "3")
            head += added
    elif launcher.kind == ACCELERATE:
        head = accelerate_here(head, python, lay.nproc, files)
        head, rank_logs = _rank_logs_here(head, mounts, lay.root, mounted=mounted)
        if rank_logs is None:  # a render without --log_dir: the rehearsal needs the files
            rank_logs = lay.root / short / "ranks"
            added = rank_log_flags(rank_logs)
            head += added
    elif head:  # with its own script, a one-GPU wrapper script runs itself, as in the pod
        head = [python, *head[1:]]
        if lay.nproc > 1:
            raise InputError(
                f"{short}: a bare {command[0]!r} starts one process, but the "
                f"job asks for {lay.nproc} per pod",
                field="command",
                hint="more than one process per pod needs torchrun",
            )
    return head, added, rank_logs


def _preflight_entry(lay: _Layout, pod_dir: Path) -> list[str]:
    """preflight.py and its arguments, in place of the profile's entry point."""
    settings = lay.spec.settings
    return [
        str(lay.script),
        *settings.args(
            world_size=lay.world,
            checkpoint_dir=str(lay.root / CHECKPOINTS_HERE)
            if settings.checkpoint_dir is None
            else settings.checkpoint_dir,
            metrics_file=str(pod_dir / "metrics.jsonl"),
            hold_dir=str(lay.hold_dir) if lay.hold_dir else None,
            plan_world_size=lay.plan_world,
            min_world_size=lay.min_world,
        ),
    ]


def _process_env(lay: _Layout, kenv: Mapping[str, str], pod_index: int, short: str) -> dict[str, str]:
    """The pod's process env: this shell's (less what the operator or torchrun own), the
    container's, its GPUs, the audit layer (--own-script), and the overrides on purpose."""
    penv = {k: v for k, v in os.environ.items() if not _OWNED.match(k)}
    penv.update(kenv)  # the operator's variables come after the container's own: they win
    if lay.gpus:
        first = pod_index * lay.nproc
        penv["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(first, first + lay.nproc))
    else:
        penv["CUDA_VISIBLE_DEVICES"] = ""
    if lay.spec.own_script:
        layer = lay.root / "audit-layer"
        penv[AUDIT_ENV] = str(lay.root / "audit")
        penv[AUDIT_KEY_ENV] = lay.audit_key  # only what the audit layer wrote counts
        penv[POD_ENV] = short
        penv["PYTHONPATH"] = os.pathsep.join([str(layer), *filter(None, [penv.get("PYTHONPATH")])])
        # the image's interpreter is the one a bare `python` finds: a wrapper script that ends
        # in `exec python train.py` runs the rehearsal's torch-bearing Python, as in the pod
        here = os.path.dirname(lay.spec.python)
        if here:
            penv["PATH"] = os.pathsep.join([here, *filter(None, [penv.get("PATH")])])
    penv.update(lay.overrides(short))
    return penv


def install_audit_layer(root: Path) -> None:
    """A fresh copy of the audit layer (sitecustomize.py and the modules it loads) and an
    empty audit folder."""
    layer = root / "audit-layer"
    shutil.rmtree(layer, ignore_errors=True)
    layer.mkdir(parents=True)
    for module in sorted(audit_layer_dir().glob("*.py")):
        shutil.copyfile(module, layer / module.name)
    shutil.rmtree(root / "audit", ignore_errors=True)
    (root / "audit").mkdir()


def _own_env(container: Mapping[str, Any], pod: str) -> list[tuple[str, str]]:
    """The container's own env list as the kubelet resolves it: plain values, and the
    downward API's `metadata.name` (the pod's name); Secret references stay out (the
    rehearsal has no Secrets: `rehearse --env` stands for them)."""
    out: list[tuple[str, str]] = []
    for item in container.get("env") or []:
        field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if "value" in item:
            out.append((str(item["name"]), str(item["value"])))
        elif field == POD_NAME_ENV[1]:
            out.append((str(item["name"]), pod))
    return out


def _pvc_mounts(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(mount path, claim) of each PersistentVolumeClaim the container mounts."""
    claims = {
        str(v.get("name")): str(v["persistentVolumeClaim"].get("claimName", v.get("name")))
        for v in pod_spec.get("volumes") or []
        if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)
    }
    return [
        (str(m.get("mountPath")), claims[str(m.get("name"))])
        for m in container.get("volumeMounts") or []
        if str(m.get("name")) in claims
    ]


def _on_volume_here(value: str, mounts: Sequence[tuple[str, str]], root: Path) -> Path | None:
    """The folder of this machine where a container path on a PVC lands: the rehearsal's
    `volumes/<claim>` folder (filesystem.py); None for a path on no volume (its files die
    with the pod)."""
    path = PurePosixPath(posixpath.normpath(value))
    for mount_path, claim in mounts:
        if path.is_relative_to(mount_path):
            return root / "volumes" / claim / path.relative_to(mount_path)
    return None


def _rank_logs_here(
    head: list[str], mounts: Sequence[tuple[str, str]], root: Path, *, mounted: bool
) -> tuple[list[str], Path | None]:
    """The rendered --log-dir, kept as it is, and the folder of this machine it lands in,
    bind-mounted at its path where the pod has a mount namespace; elsewhere the flag's path
    is that folder."""
    uses = flag_uses(head, *LOG_DIR_FLAGS)
    if not uses:
        return head, None
    use = uses[0]
    here = _on_volume_here(use.value, mounts, root)
    if here is not None and not mounted:
        new = list(head)
        new[use.index : use.index + use.width] = [f"{use.name}={here}"]
        return new, here
    return head, here


def _nccl_debug_file_here(
    penv: dict[str, str], mounts: Sequence[tuple[str, str]], root: Path, *, mounted: bool
) -> Path | None:
    """The rendered NCCL_DEBUG_FILE (diagnostics.nccl_debug: one file per rank beside the
    pod's rank logs) as the file pattern of this machine it lands in. Without a mount
    namespace the container path does not exist here: NCCL, unable to open it, would write
    to stdout instead (seen on the H200, NCCL 2.28.9), which the cluster never does. So the
    variable points at the volume's folder, as --log-dir does; NCCL's %h and %p stay."""
    value = penv.get(NCCL_DEBUG_FILE)
    here = _on_volume_here(value, mounts, root) if value else None
    if here is not None and not mounted:
        penv[NCCL_DEBUG_FILE] = str(here)
    return here


def write_plan(root: Path, plans: Sequence[PodPlan], world: int, backend: str) -> None:
    shown = [
        {
            "pod": p.name,
            "rank": p.rank,
            "argv": list(p.argv),
            "cwd": str(p.cwd),
            "env": {
                k: v
                for k, v in sorted(p.env.items())
                if k in _ENV_SHOWN or k.startswith(("PET_", "NCCL_", "PREFLIGHT_"))
            },
        }
        for p in plans
    ]
    (root / "pods.json").write_text(
        json.dumps({"world_size": world, "backend": backend, "pods": shown}, indent=2) + "\n"
    )


_ENV_SHOWN = {
    MASTER_ADDR_ENVS[0],
    MASTER_PORT_ENVS[0],
    "WORLD_SIZE",
    "RANK",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "PYTHONUNBUFFERED",
}
