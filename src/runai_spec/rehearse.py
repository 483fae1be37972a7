"""Rehearse a rendered PyTorchJob on this machine: one local process per pod, operator env."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .workload import Workload

PREFLIGHT_LINE = "PREFLIGHT {"
# The preflight's checks, in the order a table shows them.
CHECK_ORDER = (
    "ranks", "world-size", "device", "global-batch", "resume", "checkpoint", "metrics",
    "bus-bandwidth", "training", "shutdown",
)
# NVLink multicast can put a shared host's GPUs out of service (device README): always off,
# also where a container's own env would switch it on.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
DEFAULT_PORT = 23456  # kubeflow.org/v1 PytorchJobDefaultPort
PORT_NAME = "pytorchjob-port"
# Set by the operator or by torchrun: never inherited from the shell that runs the rehearsal.
_OWNED = re.compile(r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK|"
                    r"ROLE_WORLD_SIZE|GROUP_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PET_.*|"
                    r"TORCHELASTIC_.*|PREFLIGHT_.*|CUDA_VISIBLE_DEVICES)$")
_TORCHRUN_BOOLEAN = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path",
                     "-m", "--module"}
_PYTHON_WITH_VALUE = {"-X", "-W", "-c"}
SMOKE_MOUNT = "/opt/runai-spec"
DEFAULT_TIMEOUT_S = 300.0
# --own-script: once a pod crashed the verdict is in; its peers get this long to end on their own
OWN_SCRIPT_SETTLE_S = 10.0
SMOKE_VOLUME = "runai-spec-preflight"


@dataclass(frozen=True)
class PreflightSettings:
    """What the profile and preset say the run should look like, for preflight.py's checks."""

    local_batch: int = 2
    grad_accum: int = 1
    global_batch: int | None = None
    checkpoint_format: str = "torch"
    checkpoint_dir: str | None = None
    min_busbw_gbps: float | None = None
    steps: int = 4
    checkpoint_every: int = 2
    join_timeout_s: float = 60.0
    collective_timeout_s: float = 120.0
    fresh_checkpoint: bool = False  # the smoke test: never resume an earlier smoke test

    def args(self, *, world_size: int | None, checkpoint_dir: str | None,
             metrics_file: str | None, hold_dir: str | None = None,
             plan_world_size: int | None = None) -> list[str]:
        """preflight.py's argv (after the script path)."""
        out = ["--local-batch", str(self.local_batch), "--grad-accum", str(self.grad_accum),
               "--checkpoint-format", self.checkpoint_format, "--steps", str(self.steps),
               "--checkpoint-every", str(self.checkpoint_every),
               "--join-timeout", f"{self.join_timeout_s:g}",
               "--timeout", f"{self.collective_timeout_s:g}"]
        if self.global_batch is not None:
            out += ["--global-batch", str(self.global_batch)]
        if world_size is not None:
            out += ["--world-size", str(world_size)]
        if plan_world_size is not None and plan_world_size != world_size:
            out += ["--plan-world-size", str(plan_world_size)]
        if checkpoint_dir:
            out += ["--checkpoint-dir", checkpoint_dir]
        if metrics_file:
            out += ["--metrics-file", metrics_file]
        if self.min_busbw_gbps is not None:
            out += ["--min-busbw", f"{self.min_busbw_gbps:g}"]
        if hold_dir:
            out += ["--hold-after-checkpoint", hold_dir]
        if self.fresh_checkpoint:
            out += ["--fresh-checkpoint"]
        return out


@dataclass(frozen=True)
class CheckResult:
    """One checklist item over all ranks: pass, fail, skip, or not run.

    `attempt` says which run of the job it comes from when the rehearsal restarted it
    (0: the run a pod was killed in, 1: the restarted run; None: the restart itself, or a
    rehearsal without a restart)."""

    check: str
    status: str
    message: str
    ranks: tuple[int, ...] = ()
    failed_ranks: tuple[int, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    attempt: int | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")


@dataclass(frozen=True)
class PodOutcome:
    name: str
    rank: int
    exit_code: int | None
    timed_out: bool
    killed: bool
    log: Path
    attempt: int
    rank_logs: Path | None = None  # torchrun's folder of this launch: <attempt>/<local rank>/
    stopped_after: str | None = None  # stopped because this other pod had crashed, not timed out


@dataclass(frozen=True)
class RehearseResult:
    """What the rehearsal found: per-check results, per-pod outcomes, where the logs are."""

    ok: bool
    checks: tuple[CheckResult, ...]
    pods: tuple[PodOutcome, ...]
    logs_dir: Path
    world_size: int
    backend: str
    own_script: bool

    def check(self, name: str, attempt: int | None = None) -> CheckResult | None:
        """The result of one check: from the given attempt, else from the last one to report
        it (after a restart, the restarted run's)."""
        found = [c for c in self.checks if c.check == name
                 and (attempt is None or c.attempt == attempt)]
        return found[-1] if found else None

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(c.check for c in self.checks if c.status == "fail")


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


# ---------------------------------------------------------------- manifest reading


def find_job(manifests: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    jobs = [m for m in manifests if m.get("kind") == "PyTorchJob"]
    if len(jobs) != 1:
        raise InputError(f"expected one PyTorchJob among the manifests, found {len(jobs)}",
                         hint="rehearse takes the rendered output of one profile")
    job = jobs[0]
    if job.get("apiVersion") != "kubeflow.org/v1":
        raise InputError(f"PyTorchJob apiVersion {job.get('apiVersion')!r} is not "
                         "kubeflow.org/v1")
    return job


def _replicas(job: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(type, replicas, spec) for Master then Worker, as the operator numbers them."""
    specs = job.get("spec", {}).get("pytorchReplicaSpecs") or {}
    out = []
    for rtype in ("Master", "Worker"):
        spec = specs.get(rtype)
        if spec is not None:
            out.append((rtype, int(spec.get("replicas", 1)), spec))
    if not out:
        raise InputError("the PyTorchJob has no Master or Worker replicas",
                         field="spec.pytorchReplicaSpecs")
    return out


def _container(spec: Mapping[str, Any], rtype: str) -> Mapping[str, Any]:
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    for c in containers:
        if c.get("name") == "pytorch":
            return dict(c)
    raise InputError(f"the {rtype} template has no container named 'pytorch'",
                     field=f"spec.pytorchReplicaSpecs.{rtype}.template.spec.containers")


def _port(container: Mapping[str, Any]) -> int:
    for p in container.get("ports") or []:
        if p.get("name") == PORT_NAME:
            return int(p["containerPort"])
    return DEFAULT_PORT


def _nproc_int(job: Mapping[str, Any]) -> int:
    """getNprocPerNodeInt(): 1 unless spec.nprocPerNode is an integer string."""
    value = job.get("spec", {}).get("nprocPerNode")
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def operator_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """The variables training-operator v1.9 appends to the pytorch container (envvar.go,
    master.go, elastic.go), with the cluster's names and ports."""
    name = job["metadata"]["name"]
    spec = job.get("spec", {})
    replicas = _replicas(job)
    by_type = {rtype: (n, s) for rtype, n, s in replicas}
    total = sum(n for _, n, _ in replicas)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "0"}
    if "Master" in by_type:
        port = _port(_container(by_type["Master"][1], "Master"))
        rank = index + 1 if replica_type == "Worker" else index
        env.update({
            "MASTER_PORT": str(port), "MASTER_ADDR": f"{name}-master-0",
            "PET_MASTER_PORT": str(port), "PET_MASTER_ADDR": f"{name}-master-0",
            "WORLD_SIZE": str(total * _nproc_int(job)), "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
        })
        if spec.get("nprocPerNode") is not None:
            env["PET_NPROC_PER_NODE"] = str(spec["nprocPerNode"])
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        worker = by_type.get("Worker")
        lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if lo is None and hi is None:  # the defaulting webhook's setElasticPolicy
            lo = hi = worker[0] if worker else None
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        port = elastic.get("rdzvPort") or (_port(_container(worker[1], "Worker"))
                                           if worker else DEFAULT_PORT)
        env["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
        env["PET_RDZV_BACKEND"] = str(elastic.get("rdzvBackend") or "c10d")
        env["PET_NNODES"] = f"{lo}:{hi}"
        if elastic.get("maxRestarts") is not None:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if elastic.get("nProcPerNode") is not None:
            env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
        if elastic.get("rdzvId") is not None:
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
        if elastic.get("rdzvConf"):
            env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}"
                                            for c in elastic["rdzvConf"])
        if elastic.get("standalone"):
            env["PET_STANDALONE"] = ""
    else:
        env["PET_NNODES"] = str(total)
    return env


# ---------------------------------------------------------------- argv rewriting


@dataclass(frozen=True)
class Launcher:
    kind: str  # "python" or "torchrun"
    head: tuple[str, ...]  # launcher and its flags, before the entry point
    entry: tuple[str, ...]  # the script (or -m module) and its arguments


def split_command(argv: Sequence[str]) -> Launcher:
    """Split a container argv into launcher flags and the training entry point."""
    if not argv:
        raise InputError("the pytorch container has no command", field="command")
    prog = os.path.basename(argv[0])
    if prog == "torchrun":
        kind, i = "torchrun", 1
    elif re.fullmatch(r"python(3(\.\d+)?)?", prog):
        if argv[1:3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            kind, i = "torchrun", 3
        else:
            kind, i = "python", 1
    else:
        raise InputError(f"the container command starts with {argv[0]!r}, neither python nor "
                         "torchrun", field="command",
                         hint="rehearse knows the launchers runai-spec renders")
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            break
        if arg in ("-m", "--module") and kind == "python":
            break  # `python -m pkg`: the module is the entry point
        if kind == "torchrun":
            if arg in _TORCHRUN_BOOLEAN or "=" in arg:
                i += 1
                continue
            i += 2
        else:
            i += 2 if arg in _PYTHON_WITH_VALUE else 1
    return Launcher(kind, tuple(argv[:i]), tuple(argv[i:]))


def set_nproc(head: Sequence[str], k: int) -> tuple[str, ...]:
    """Rewrite torchrun's --nproc-per-node (any spelling) to k; leave it absent if absent."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(head):
        if skip:
            skip = False
            continue
        m = re.fullmatch(r"(--nproc[-_]per[-_]node)(=.*)?", arg)
        if m and m.group(2):
            out.append(f"{m.group(1)}={k}")
        elif m and i + 1 < len(head):
            out += [arg, str(k)]
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def _has_flag(head: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in head for n in names)


# ---------------------------------------------------------------- the rehearsal


def preflight_source() -> str:
    """The text of preflight.py as shipped in the package (also the ConfigMap's data)."""
    return resources.files("runai_spec").joinpath("preflight.py").read_text(encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe_gpus(python: str) -> int:
    """How many CUDA devices torch sees here (0 on a CPU machine), in a subprocess; bad
    input when that Python has no torch, before any pod starts and fails obscurely."""
    try:
        done = subprocess.run(
            [python, "-c", "import torch; print(torch.cuda.device_count())"],
            capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"cannot start {python}: {exc}", field="python") from None
    if "No module named 'torch'" in done.stderr:
        raise InputError(f"rehearse runs the pods with PyTorch, and {python} has no torch",
                         field="torch", hint="install it into this environment: "
                         "`pip install torch` (a CPU build is enough: the rehearsal uses gloo)")
    try:
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0
    except (ValueError, IndexError):
        return 0


def plan_pods(
    manifests: Sequence[Mapping[str, Any]],
    *,
    settings: PreflightSettings,
    root: Path,
    procs_per_pod: int | None = None,
    own_script: bool = False,
    gpus: int = 0,
    python: str = sys.executable,
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
    pod_env: Mapping[str, Mapping[str, str]] | None = None,
    hold_dir: Path | None = None,
) -> tuple[list[PodPlan], int]:
    """Every pod's argv, env and folders, and the world size the plan expects."""
    job = find_job(manifests)
    declared = _nproc_int(job)
    nproc = procs_per_pod or declared
    if procs_per_pod is not None and procs_per_pod < 1:
        raise InputError("--procs-per-pod must be at least 1")
    scaled = copy.deepcopy(dict(job))
    if procs_per_pod is not None:
        scaled["spec"] = {**scaled.get("spec", {}), "nprocPerNode": str(procs_per_pod)}
        if (scaled["spec"].get("elasticPolicy") or {}).get("nProcPerNode") is not None:
            scaled["spec"]["elasticPolicy"] = {**scaled["spec"]["elasticPolicy"],
                                               "nProcPerNode": procs_per_pod}
    replicas = _replicas(job)
    containers = {rtype: _container(rspec, rtype) for rtype, _, rspec in replicas}
    pods = [(rtype, i) for rtype, n, _ in replicas for i in range(n)]
    world = len(pods) * nproc
    if gpus and world > gpus:
        raise InputError(f"the rehearsal needs {world} GPUs (one per process), {gpus} visible",
                         hint="scale down with --procs-per-pod, or rehearse on CPU")
    port = _free_port()
    shared_ckpt = root / "checkpoints"
    preflight_dir = root / "preflight"
    preflight_dir.mkdir(parents=True, exist_ok=True)
    # a copy, so that the package's siblings never come first on the script's sys.path
    script = preflight_dir / "preflight.py"
    script.write_text(preflight_source(), encoding="utf-8")
    out: list[PodPlan] = []
    for pod_index, (rtype, i) in enumerate(pods):
        short = f"{rtype.lower()}-{i}"
        container = containers[rtype]
        command = list(container.get("command") or []) + list(container.get("args") or [])
        launcher = split_command(command)
        head = list(launcher.head)
        if launcher.kind == "torchrun":
            flags = head[1:] if os.path.basename(head[0]) == "torchrun" else head[3:]
            head = [python, "-m", "torch.distributed.run", *flags]
            if procs_per_pod is not None:
                head = list(set_nproc(head, procs_per_pod))
            if not _has_flag(head, "--log-dir", "--log_dir"):
                head += ["--log-dir", str(root / short / "ranks"), "--redirects", "3",
                         "--tee", "3"]
        else:
            head = [python, *head[1:]]
            if nproc > 1:
                raise InputError(f"{short}: a bare {command[0]!r} starts one process, but the "
                                 f"job asks for {nproc} per pod", field="command",
                                 hint="more than one process per pod needs torchrun")
        pod_dir = root / short
        pod_dir.mkdir(parents=True, exist_ok=True)
        if own_script:
            entry = list(launcher.entry)
            cwd = workdir or Path.cwd()
        else:
            entry = [str(script), *settings.args(
                world_size=world,
                checkpoint_dir=str(shared_ckpt) if settings.checkpoint_dir is None
                else settings.checkpoint_dir,
                metrics_file=str(pod_dir / "metrics.jsonl"),
                hold_dir=str(hold_dir) if hold_dir else None,
                plan_world_size=len(pods) * declared)]
            cwd = pod_dir
        penv = {k: v for k, v in os.environ.items() if not _OWNED.match(k)}
        for item in container.get("env") or []:
            if "value" in item:
                penv[str(item["name"])] = str(item["value"])
        op = operator_env(scaled, rtype, i)
        # the cluster's names become this machine's loopback and one free port
        for key in ("MASTER_ADDR", "PET_MASTER_ADDR"):
            if key in op:
                op[key] = "127.0.0.1"
        for key in ("MASTER_PORT", "PET_MASTER_PORT"):
            if key in op:
                op[key] = str(port)
        if "PET_RDZV_ENDPOINT" in op:
            op["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port}"
        penv.update(op)  # appended after the container's own env: the operator's wins
        penv.update(MULTICAST_OFF)
        if gpus:
            first = pod_index * nproc
            penv["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in range(first, first + nproc))
        else:
            penv["CUDA_VISIBLE_DEVICES"] = ""
        penv.update(env or {})
        penv.update((pod_env or {}).get(short, {}))
        penv.update((pod_env or {}).get(f"{job['metadata']['name']}-{short}", {}))
        rank = int(op.get("RANK", pod_index))
        out.append(PodPlan(short, rtype, i, rank, tuple(head + entry), penv, cwd, pod_dir))
    return out, world


def _descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc (Linux); empty where /proc is absent."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
            ppid = int(text.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rank_log_root(plan: PodPlan) -> Path | None:
    """torchrun's --log-dir in the pod's launcher flags: each rank's own stdout lands there."""
    try:
        head = split_command(list(plan.argv)).head
    except InputError:
        return None
    for i, arg in enumerate(head):
        for name in ("--log-dir", "--log_dir"):
            if arg == name and i + 1 < len(head):
                return plan.cwd / head[i + 1]
            if arg.startswith(name + "="):
                return plan.cwd / arg.split("=", 1)[1]
    return None


def _gone(pids: Sequence[int]) -> bool:
    """True when none of these processes is alive any more (a zombie counts as gone)."""
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            return False
    return True


def _wait_gone(pids: Sequence[int], grace: float) -> None:
    """Wait (at most grace seconds) until none of these processes is alive."""
    deadline = time.monotonic() + grace
    while not _gone(pids) and time.monotonic() < deadline:
        time.sleep(0.02)


class _Pod:
    """A running pod: its process group, a log file, and the PREFLIGHT lines seen so far."""

    def __init__(self, plan: PodPlan, attempt: int) -> None:
        self.plan = plan
        self.attempt = attempt
        self.log = plan.log_dir / ("pod.log" if attempt == 0 else f"pod.attempt{attempt}.log")
        self.killed = False
        self.timed_out = False
        self.stopped_after: str | None = None
        self.records: list[dict[str, Any]] = []
        self._rank_root = _rank_log_root(plan)
        # torchrun names each launch's folder at random: the ones already there are older runs
        self._earlier = (set(self._rank_root.iterdir())
                         if self._rank_root is not None and self._rank_root.is_dir() else set())
        self._fh = self.log.open("w", encoding="utf-8")
        self._fh.write(f"# argv: {json.dumps(list(plan.argv))}\n# cwd: {plan.cwd}\n")
        self._fh.flush()
        self.proc = subprocess.Popen(
            list(plan.argv), env=dict(plan.env), cwd=plan.cwd, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
            start_new_session=True)  # its own process group, so that kill reaches torchrun's
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._fh.write(line)
            self._fh.flush()
            if PREFLIGHT_LINE in line:
                self.records.extend(parse_lines(line))

    def signal(self, sig: int) -> None:
        # torchrun starts each worker in a session of its own: the process group of the pod's
        # launcher does not reach them, so walk the tree of the processes this pod started
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self, grace: float = 10.0) -> None:
        """A node lost: SIGKILL to the launcher and every rank, no goodbye; returns once all of
        them are gone, so that the survivors' next collective meets closed connections."""
        tree = [self.proc.pid, *_descendants(self.proc.pid)]
        self.killed = True
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        _wait_gone(tree, grace)

    def stop(self, grace: float = 5.0) -> None:
        orphans = _descendants(self.proc.pid)
        tree = [self.proc.pid, *orphans]
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(grace)
        # torchrun's workers may outlive their agent: the whole tree goes
        self.signal(signal.SIGKILL)
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # "stopped" must mean gone: a rank that outlives the rehearsal keeps its port and GPU
        _wait_gone(tree, grace)

    def _runs(self) -> list[Path]:
        """torchrun's folders of this launch under its --log-dir (older launches left out)."""
        if self._rank_root is None or not self._rank_root.is_dir():
            return []
        return sorted(d for d in self._rank_root.iterdir() if d not in self._earlier)

    def finish(self) -> PodOutcome:
        self._reader.join(10)
        if self.timed_out:
            # the launcher's SignalException traceback just above reads like a crash
            why = (f"{OWN_SCRIPT_SETTLE_S:g} s after {self.stopped_after} crashed"
                   if self.stopped_after else "at the deadline (--timeout)")
            self._fh.write(f"# runai-spec: still running {why}: stopped (SIGTERM, then "
                           "SIGKILL); a SignalException above comes from that stop\n")
        self._fh.close()
        runs = self._runs()
        return PodOutcome(self.plan.name, self.plan.rank, self.proc.returncode, self.timed_out,
                          self.killed, self.log, self.attempt, runs[-1] if runs else None,
                          self.stopped_after)

    def lines(self) -> list[dict[str, Any]]:
        """This attempt's PREFLIGHT records, in each rank's order. Taken from the ranks' own
        log files where torchrun wrote them: the launcher's copy on stdout is buffered
        (PYTHONUNBUFFERED=0) and lost when the launcher is killed."""
        files = sorted(f for d in self._runs() for f in d.glob("attempt_*/*/stdout.log"))
        records = ([r for f in files for r in parse_lines(f.read_text(errors="replace"))]
                   if files else self.records)
        return [{**r, "_pod": self.plan.name} for r in records]


@dataclass(frozen=True)
class _Attempt:
    """One run of the whole job: how each pod ended, the ranks' records, and the kill."""

    outcomes: list[PodOutcome]
    lines: list[dict[str, Any]]
    held: dict[int, int]  # rank -> step of the first checkpoint it held at
    killed: str | None  # the pod killed there, if it was


def _held(hold_dir: Path | None) -> dict[int, int]:
    out: dict[int, int] = {}
    if hold_dir is None or not hold_dir.is_dir():
        return out
    for marker in hold_dir.glob("holding.*"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(marker.read_text())
            out[int(record["rank"])] = int(record["step"])
    return out


def _run_attempt(plans: Sequence[PodPlan], attempt: int, timeout_s: float, *,
                 skip: Sequence[str] = (), victim: str | None = None,
                 hold_dir: Path | None = None, world: int = 0,
                 settle_s: float = 60.0, after_crash_s: float | None = None) -> _Attempt:
    """Start every pod, wait for all of them (bounded), return outcomes and PREFLIGHT lines.

    With `victim`, the ranks hold after their first checkpoint (preflight.py's
    --hold-after-checkpoint DIR); once all `world` of them hold, the victim pod is killed and
    the others are released: they must then find out on their own, within `settle_s`.
    With `after_crash_s`, once one pod exits non-zero the others get that long to end too."""
    pods = [_Pod(p, attempt) for p in plans if p.name not in skip]
    deadline = time.monotonic() + timeout_s
    target = next((p for p in pods if p.plan.name == victim), None)
    first_crash: str | None = None
    try:
        while time.monotonic() < deadline and any(p.proc.poll() is None for p in pods):
            if (target is not None and not target.killed and hold_dir is not None
                    and target.proc.poll() is None and len(_held(hold_dir)) >= world):
                target.kill()
                (hold_dir / "release").touch()
                deadline = min(deadline, time.monotonic() + settle_s)
            if after_crash_s is not None and first_crash is None:
                first_crash = next((p.plan.name for p in pods
                                    if p.proc.poll() not in (None, 0)), None)
                if first_crash is not None:
                    deadline = min(deadline, time.monotonic() + after_crash_s)
            time.sleep(0.05)
    finally:
        if hold_dir is not None and hold_dir.is_dir():
            (hold_dir / "release").touch()  # nobody waits for a kill that will not come
        for p in pods:
            if p.proc.poll() is None:
                p.timed_out = True
                p.stopped_after = first_crash
            p.stop()
    outcomes = [p.finish() for p in pods]
    for name in skip:
        plan = next(pl for pl in plans if pl.name == name)
        outcomes.append(PodOutcome(name, plan.rank, None, False, False, plan.log_dir / "pod.log",
                                   attempt))
    lines = [r for p in pods for r in p.lines()]
    killed = target.plan.name if target is not None and target.killed else None
    return _Attempt(outcomes, lines, _held(hold_dir), killed)


def parse_lines(text: str) -> list[dict[str, Any]]:
    """Every `PREFLIGHT {...}` record in some output, wherever a prefix left it on the line."""
    out = []
    decoder = json.JSONDecoder()
    start = text.find(PREFLIGHT_LINE)
    while start != -1:
        brace = start + len(PREFLIGHT_LINE) - 1
        try:
            record, end = decoder.raw_decode(text, brace)
        except json.JSONDecodeError:
            end = brace + 1
        else:
            if isinstance(record, dict):
                out.append(record)
        start = text.find(PREFLIGHT_LINE, end)
    return out


def aggregate(lines: Sequence[Mapping[str, Any]], world: int,
              outcomes: Sequence[PodOutcome], timeout_s: float,
              own_script: bool, attempt: int | None = None) -> list[CheckResult]:
    """One result per check over all ranks, plus the rehearsal's own `pods` check, each
    marked with `attempt`."""
    results: list[CheckResult] = []
    if not own_script:
        by_check: dict[str, list[Mapping[str, Any]]] = {}
        for rec in lines:
            if "check" in rec:
                by_check.setdefault(str(rec["check"]), []).append(rec)
        reported = sorted({int(r["rank"]) for r in lines if "rank" in r})
        silent = [r for r in range(world) if r not in reported]
        for name in list(CHECK_ORDER) + sorted(set(by_check) - set(CHECK_ORDER)):
            recs = by_check.get(name, [])
            if not recs:
                if name == "ranks":
                    results.append(CheckResult("ranks", "fail", _silent_message(
                        silent, world, outcomes, timeout_s), failed_ranks=tuple(silent)))
                elif name not in ("training",):
                    results.append(CheckResult(name, "not run", "no rank reached this check"))
                continue
            ranks = tuple(sorted({int(r["rank"]) for r in recs}))
            failed = tuple(sorted({int(r["rank"]) for r in recs if r.get("status") == "fail"}))
            statuses = {r.get("status") for r in recs}
            status = "fail" if failed else "skip" if statuses == {"skip"} else "pass"
            lead = next((r for r in recs if r.get("status") == "fail"), None) or next(
                (r for r in recs if r.get("rank") == 0), recs[0])
            message = str(lead.get("message", ""))
            details = {k: v for k, v in lead.items()
                       if k not in ("check", "status", "ok", "rank", "message", "_pod")}
            if name == "ranks" and status == "pass" and silent:
                status, message = "fail", _silent_message(silent, world, outcomes, timeout_s)
                failed = tuple(silent)
            elif status != "fail" and len(ranks) < world and name != "ranks":
                missing = [r for r in range(world) if r not in ranks]
                message += f" (no report from rank(s) {', '.join(map(str, missing))})"
            results.append(CheckResult(name, status, message, ranks, failed, details))
    # the profile's own script may train for hours: still running at the deadline is healthy
    bad = [o for o in outcomes if o.exit_code != 0 and not o.killed
           and not (own_script and o.timed_out)]
    details = {"logs": {o.name: str(o.log) for o in outcomes},
               "rank_logs": {o.name: str(o.rank_logs) for o in outcomes if o.rank_logs}}
    if bad:
        # with the profile's own script this row is the whole story: the other pods too
        shown = bad + [o for o in outcomes if o not in bad and own_script]
        results.append(CheckResult("pods", "fail", "; ".join(
            f"{o.name}: {_pod_story(o, timeout_s, own_script)}" for o in shown),
            details=details))
    elif own_script:
        by_story: dict[str, list[str]] = {}
        for o in outcomes:
            by_story.setdefault(_pod_story(o, timeout_s, own_script), []).append(o.name)
        results.append(CheckResult("pods", "pass", "; ".join(
            f"{', '.join(names)}: {story}" for story, names in by_story.items()),
            details=details))
    else:
        results.append(CheckResult("pods", "pass", f"{len(outcomes)} pod(s) exited 0",
                                   details=details))
    return [replace(c, attempt=attempt) for c in results]


def _pod_story(o: PodOutcome, timeout_s: float, own_script: bool) -> str:
    """How one pod ended, in plain words, with where to read why when it failed."""
    if o.exit_code is None and not o.timed_out:
        return "not started"
    if o.timed_out and o.stopped_after:
        return (f"still running {OWN_SCRIPT_SETTLE_S:g} s after {o.stopped_after} crashed "
                "(waiting for it?), stopped there")
    if o.timed_out and own_script:
        return (f"ran {timeout_s:g} s without failing: still running at the deadline "
                "(--timeout), stopped there")
    if o.timed_out:
        return f"timed out after {timeout_s:g} s"
    if o.exit_code == 0:
        return "started, ran and exited 0" if own_script else "exited 0"
    code = _exit_status(o.exit_code)
    signal_note = f" (signal {-(o.exit_code or 0)})" if (o.exit_code or 0) < 0 else ""
    where = f"see {o.log}"
    if o.rank_logs is not None:
        where += f" and {o.rank_logs}/attempt_0/<local rank>/stderr.log"
    # preflight.py exits 1 on a failed check: only a script of one's own "crashes"
    return f"{'crashed with exit' if own_script else 'exit'} {code}{signal_note}: {where}"


def own_script_note(plans: Sequence[PodPlan]) -> CheckResult:
    """The row that says what --own-script did not do: the guide's checklist."""
    entry = " ".join(split_command(list(plans[0].argv)).entry) if plans else "?"
    return CheckResult(
        "checklist", "not run",
        f"--own-script ran your command ({entry}, in {plans[0].cwd if plans else '?'}) in place "
        "of preflight.py: none of the guide's checks (ranks, world size, one device per rank, "
        "global batch, checkpoint and resume, metrics from rank 0, bus bandwidth, clean "
        "shutdown) was run, only whether the pods start, run and exit; rehearse without "
        "--own-script for the checklist")


def check_timeout(timeout_s: float) -> None:
    """How long the pods may run: a positive, finite number of seconds."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"{timeout_s:g} is not a positive number of seconds", field="--timeout",
                         hint=f"how long the pods may run, e.g. --timeout 60 (default "
                              f"{DEFAULT_TIMEOUT_S:g})")


def _silent_message(silent: Sequence[int], world: int, outcomes: Sequence[PodOutcome],
                    timeout_s: float) -> str:
    not_started = [o.name for o in outcomes if o.exit_code is None and not o.timed_out]
    waited = [o.name for o in outcomes if o.timed_out]
    msg = (f"no report from rank(s) {', '.join(map(str, silent))} of {world}"
           if len(silent) < world else f"none of the {world} ranks reported")
    if not_started:
        msg += f"; pod(s) {', '.join(not_started)} never started"
    if waited:
        msg += f"; pod(s) {', '.join(waited)} still waiting after {timeout_s:g} s"
    return msg


def rehearse_manifests(
    manifests: Sequence[Mapping[str, Any]],
    *,
    settings: PreflightSettings | None = None,
    procs_per_pod: int | None = None,
    own_script: bool = False,
    restart_after_checkpoint: bool = False,
    logs_dir: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str = "auto",
    python: str = sys.executable,
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
    pod_env: Mapping[str, Mapping[str, str]] | None = None,
    skip_pods: Sequence[str] = (),
) -> RehearseResult:
    """Run the job's topology here and collect the preflight's checks.

    The pods run until they exit or `timeout_s` passes; then they are stopped. The preflight
    still running then has failed; the profile's own script (`own_script`) is healthy.
    `env`, `pod_env` (by short pod name, e.g. `worker-0`) and `skip_pods` exist to break the
    setup on purpose: CI uses them to prove each check fails when it should.
    """
    settings = settings or PreflightSettings()
    check_timeout(timeout_s)
    if restart_after_checkpoint and own_script:
        raise InputError(RESTART_OWN_SCRIPT)
    job = find_job(manifests)
    if restart_after_checkpoint and (job.get("spec") or {}).get("elasticPolicy") is not None:
        raise InputError("--restart-after-checkpoint rehearses a job of fixed size; this one is "
                         "elastic, and there torchrun restarts its own workers after a peer is "
                         "lost, which the rehearsal does not model",
                         field="spec.elasticPolicy",
                         hint="rehearse it without --restart-after-checkpoint")
    gpus = probe_gpus(python)  # first: no torch is bad input, and nothing is written
    if device == "cpu":
        gpus = 0
    # absolute: the pods run in other folders, and the logs' paths are printed for the user
    root = (Path(logs_dir) if logs_dir
            else Path(tempfile.mkdtemp(prefix="runai-spec-rehearse-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if device == "cuda" and not gpus:
        raise InputError("--device cuda: torch sees no GPU here")
    backend = "nccl" if gpus else "gloo"
    if not gpus and settings.min_busbw_gbps is not None:
        # gloo over loopback says nothing about the cluster's fabric: measure, do not judge
        settings = PreflightSettings(**{**settings.__dict__, "min_busbw_gbps": None})
    hold_dir = root / "restart" if restart_after_checkpoint else None
    if restart_after_checkpoint:
        settings = _restart_settings(settings)
    plans, world = plan_pods(
        manifests, settings=settings, root=root, procs_per_pod=procs_per_pod,
        own_script=own_script, gpus=gpus, python=python, workdir=workdir, env=env,
        pod_env=pod_env, hold_dir=hold_dir)
    _write_plan(root, plans, world, backend)
    shutil.rmtree(root / "checkpoints", ignore_errors=True)

    if hold_dir is None:
        run = _run_attempt(plans, 0, timeout_s, skip=skip_pods,
                           after_crash_s=OWN_SCRIPT_SETTLE_S if own_script else None)
        checks = aggregate(run.lines, world, run.outcomes, timeout_s, own_script)
        if own_script:
            checks.insert(0, own_script_note(plans))
        outcomes = run.outcomes
    else:
        shutil.rmtree(hold_dir, ignore_errors=True)
        checks, outcomes = _rehearse_restart(job, plans, world, settings, timeout_s, skip_pods,
                                             hold_dir)
    ok = all(c.ok for c in checks if c.status != "not run")
    result = RehearseResult(ok, tuple(checks), tuple(outcomes), root, world, backend, own_script)
    (root / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result


RESTART_OWN_SCRIPT = ("--restart-after-checkpoint needs the preflight's checkpoint; it does "
                      "not combine with --own-script")


def _rehearse_restart(job: Mapping[str, Any], plans: Sequence[PodPlan], world: int,
                      settings: PreflightSettings, timeout_s: float, skip: Sequence[str],
                      hold_dir: Path) -> tuple[list[CheckResult], list[PodOutcome]]:
    """Kill the last pod right after the first checkpoint, let the others fail as they would,
    restart every pod as the operator would, and check the resume.

    In the cluster the killed pod's peers find out at their next collective and their
    torchrun exits non-zero (a fixed-size job has no torchrun restarts); under `OnFailure`
    each failed pod's container is restarted with the same command and environment. The
    pods come back at different moments there; here they all start again once every pod of
    the first run has ended, which is where the cluster settles."""
    live = [p for p in plans if p.name not in skip]
    victim = live[-1].name if live else None
    # NCCL may only notice a dead peer at its collective timeout: give the survivors that long
    settle_s = settings.collective_timeout_s + 30.0
    first = _run_attempt(plans, 0, timeout_s, skip=skip, victim=victim, hold_dir=hold_dir,
                         world=world, settle_s=settle_s)
    if first.killed is None:
        checks = aggregate(first.lines, world, first.outcomes, timeout_s, False, attempt=0)
        return checks + [_no_kill(first, world, victim)], list(first.outcomes)
    before, after = _split_at_hold(first.lines)
    # the first run's checks up to the kill; what the kill cut short is the restart's story
    shown = [c for c in aggregate(before, world, first.outcomes, timeout_s, False, attempt=0)
             if c.check != "pods" and c.status != "not run"]
    # a fresh port: the first run's store port may still be in TIME_WAIT here
    second = _run_attempt(_with_port(plans, _free_port()), 1, timeout_s, skip=skip)
    checks = shown + aggregate(second.lines, world, second.outcomes, timeout_s, False,
                               attempt=1)
    replica_types = {p.name: p.replica_type for p in plans}
    checks.append(_restart_check(job, replica_types, first, before, after, second, world,
                                 settle_s))
    return checks, [*first.outcomes, *second.outcomes]


def _split_at_hold(lines: Sequence[Mapping[str, Any]]
                   ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Each rank's records before it held at the first checkpoint, and those after."""
    before: list[Mapping[str, Any]] = []
    after: list[Mapping[str, Any]] = []
    held: set[Any] = set()
    for rec in lines:
        if rec.get("event") == "holding":
            held.add(rec.get("rank"))
        elif rec.get("rank") in held:
            after.append(rec)
        else:
            before.append(rec)
    return before, after


def _with_port(plans: Sequence[PodPlan], port: int) -> list[PodPlan]:
    """The same pods on a fresh port."""
    out = []
    for p in plans:
        env = dict(p.env)
        for key in ("MASTER_PORT", "PET_MASTER_PORT"):
            if key in env:
                env[key] = str(port)
        if "PET_RDZV_ENDPOINT" in env:
            env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port}"
        out.append(PodPlan(p.name, p.replica_type, p.index, p.rank, p.argv, env, p.cwd,
                           p.log_dir))
    return out


def _restart_settings(settings: PreflightSettings) -> PreflightSettings:
    """A first checkpoint early, and steps enough after it for a second one: the restarted
    run then trains, writes, reloads and reports metrics like the first."""
    every = min(settings.checkpoint_every, 2)
    steps = max(settings.steps, 2 * every)
    return PreflightSettings(**{**settings.__dict__, "steps": steps, "checkpoint_every": every})


def _ranks(items: Iterable[int]) -> str:
    words = [str(i) for i in sorted(items)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _no_kill(first: _Attempt, world: int, victim: str | None) -> CheckResult:
    held = sorted(first.held)
    if victim is None:
        why = "no pod was started"
    elif not held:
        why = f"no rank reached its first checkpoint, so {victim} was not killed"
    elif len(held) < world:
        missing = [r for r in range(world) if r not in first.held]
        why = (f"rank(s) {_ranks(missing)} never reached the first checkpoint (rank(s) "
               f"{_ranks(held)} did), so {victim} was not killed")
    else:
        why = f"{victim} ended before it could be killed"
    return CheckResult("restart", "fail", f"{why}: the restart was not exercised",
                       details={"held": {str(r): s for r, s in first.held.items()}})


def _exit_status(code: int | None) -> int | None:
    """The container's exit code as Kubernetes reports it (128 + signal when killed)."""
    return None if code is None else 128 - code if code < 0 else code


def _operator_verdict(job: Mapping[str, Any], replica_types: Mapping[str, str],
                      failed: Sequence[PodOutcome]) -> tuple[str | None, str]:
    """(why the operator would not restart these failed pods, or None; what it would do)."""
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    # the operator's defaulting webhook sets OnFailure where the manifest says nothing
    policy = {o.name: str((replicas.get(replica_types.get(o.name, "")) or {}).get(
        "restartPolicy") or "OnFailure") for o in failed}
    never = [o.name for o in failed if policy[o.name] == "Never"]
    if never:
        return (f"restartPolicy Never on {', '.join(never)}: the operator marks the job Failed "
                "instead of restarting it"), "no restart"
    # ExitCode: exit codes up to 127 are permanent, from 128 (signals) retryable
    permanent = [f"{o.name} (exit {_exit_status(o.exit_code)})" for o in failed
                 if policy[o.name] == "ExitCode" and (_exit_status(o.exit_code) or 0) < 128]
    if permanent:
        return (f"restartPolicy ExitCode treats {', '.join(permanent)} as a permanent error: "
                "the operator marks the job Failed instead of restarting it"), "no restart"
    counted = [o for o in failed if policy[o.name] in ("OnFailure", "Always")]
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    used = len(counted)
    what = ", ".join(sorted({policy[o.name] for o in failed}))
    note = f"{what} restarts {'the pod' if len(failed) == 1 else f'all {len(failed)} pods'}"
    if limit is None:
        return None, note
    note += f" ({used} restart(s), backoffLimit {limit})"
    if (limit == 0 and used > 0) or (limit > 0 and used >= limit):
        return (f"{used} container restart(s) reach the backoffLimit of {limit}: the operator "
                "marks the job Failed after losing one pod"), note
    return None, note


def _restart_check(job: Mapping[str, Any], replica_types: Mapping[str, str], first: _Attempt,
                   before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
                   second: _Attempt, world: int, settle_s: float) -> CheckResult:
    victim = first.killed or ""
    step = min(first.held.values())
    victim_ranks = sorted({int(r["rank"]) for r in before
                           if r.get("_pod") == victim and "rank" in r})
    problems: list[str] = []

    # the survivors: their torchrun must give up on its own once a peer is gone
    survivors = [o for o in first.outcomes if o.name != victim
                 and not (o.exit_code is None and not o.timed_out)]
    reasons = {o.name: next((f"rank {r['rank']}: {r['check']}: {r.get('message', '')}"
                             for r in after if r.get("_pod") == o.name
                             and r.get("status") == "fail"), None) for o in survivors}
    hung = [o.name for o in survivors if o.timed_out]
    clean = [o.name for o in survivors if not o.timed_out and o.exit_code == 0]
    if hung:
        problems.append(f"{', '.join(hung)} still ran {settle_s:g} s after {victim} died (a "
                        "hang: in the cluster it holds its GPUs until a timeout fires)")
    if clean:
        problems.append(f"{', '.join(clean)} exited 0 although {victim} was gone")
    gave_up = [o for o in survivors if not o.timed_out and o.exit_code != 0]
    codes = sorted({str(_exit_status(o.exit_code)) for o in gave_up})
    peers = (f"{', '.join(o.name for o in gave_up)} then exited {'/'.join(codes)} on "
             f"{'its' if len(gave_up) == 1 else 'their'} own" if gave_up
             else "no other pod was running")

    failed = [o for o in first.outcomes if o.exit_code not in (0, None) or o.killed]
    refusal, operator = _operator_verdict(job, replica_types, failed)
    if refusal:
        problems.append(refusal)

    # the resume: every rank, from the checkpoint written before the kill, with its weights
    saved = next((r for r in before if r.get("check") == "checkpoint"
                  and r.get("status") == "pass" and r.get("rank") == 0), None)
    digest = saved.get("digest") if saved else None
    resumes = {int(r["rank"]): r for r in second.lines if r.get("check") == "resume"}
    resumed = {r: rec for r, rec in resumes.items() if rec.get("status") == "pass"}
    fresh = sorted(r for r, rec in resumes.items() if rec.get("status") == "skip")
    broken = sorted(r for r, rec in resumes.items() if rec.get("status") == "fail")
    silent = [r for r in range(world) if r not in resumes]
    wrong_step = sorted(r for r, rec in resumed.items()
                        if int(rec.get("resumed_from", -1)) != step)
    wrong_weights = sorted(r for r, rec in resumed.items()
                           if r not in wrong_step and digest and rec.get("digest") != digest)
    lead = f"the restarted job did not resume from the checkpoint of step {step}"
    if fresh:
        problems.append(f"{lead}: rank(s) {_ranks(fresh)} started over at step 1 "
                        f"({resumes[fresh[0]].get('message', '')})")
    if broken:
        problems.append(f"{lead}: rank(s) {_ranks(broken)} could not load it "
                        f"({resumes[broken[0]].get('message', '')})")
    if wrong_step:
        found = sorted({int(resumed[r].get("resumed_from", -1)) for r in wrong_step})
        problems.append(f"{lead}: rank(s) {_ranks(wrong_step)} resumed from step(s) "
                        f"{_ranks(found)}")
    if wrong_weights:
        problems.append(f"rank(s) {_ranks(wrong_weights)} resumed other weights than those "
                        f"saved at step {step}")
    if silent:
        problems.append(f"rank(s) {_ranks(silent)} of the restarted job never reported a "
                        "resume")

    details = {
        "killed": victim, "killed_ranks": victim_ranks, "first_checkpoint_step": step,
        "survivors": {o.name: {"exit_code": _exit_status(o.exit_code),
                               "timed_out": o.timed_out, "first_failure": reasons[o.name]}
                      for o in survivors},
        "operator": operator,
        "resumed_from": {str(r): rec.get("resumed_from") for r, rec in sorted(resumes.items())},
        "saved_digest": digest,
        "resumed_digests": sorted({str(rec.get("digest")) for rec in resumed.values()}),
    }
    head = (f"killed {victim} (rank(s) {_ranks(victim_ranks) if victim_ranks else '?'}) right "
            f"after the checkpoint of step {step}")
    if problems:
        return CheckResult("restart", "fail", f"{head}; " + "; ".join(problems),
                           tuple(sorted(resumes)), tuple(sorted(set(fresh + broken + silent
                                                                    + wrong_step
                                                                    + wrong_weights))),
                           details)
    return CheckResult("restart", "pass", f"{head}; {peers}; {operator}; all {world} ranks "
                       f"resumed the step-{step} weights and went on at step {step + 1}",
                       tuple(sorted(resumed)), (), details)


def _write_plan(root: Path, plans: Sequence[PodPlan], world: int, backend: str) -> None:
    shown = [{"pod": p.name, "rank": p.rank, "argv": list(p.argv), "cwd": str(p.cwd),
              "env": {k: v for k, v in sorted(p.env.items())
                      if k in _ENV_SHOWN or k.startswith(("PET_", "NCCL_", "PREFLIGHT_"))}}
             for p in plans]
    (root / "pods.json").write_text(json.dumps({"world_size": world, "backend": backend,
                                                "pods": shown}, indent=2) + "\n")


_ENV_SHOWN = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES",
              "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "PYTHONUNBUFFERED"}


def result_dict(result: RehearseResult) -> dict[str, Any]:
    return {
        "ok": result.ok, "world_size": result.world_size, "backend": result.backend,
        "own_script": result.own_script, "logs_dir": str(result.logs_dir),
        "checks": [{"check": c.check, "status": c.status, "message": c.message,
                    "ranks": list(c.ranks), "failed_ranks": list(c.failed_ranks),
                    "details": dict(c.details), "attempt": c.attempt}
                   for c in result.checks],
        "pods": [{"pod": o.name, "rank": o.rank, "exit_code": o.exit_code,
                  "timed_out": o.timed_out, "killed": o.killed, "log": str(o.log),
                  "rank_logs": str(o.rank_logs) if o.rank_logs else None,
                  "stopped_after": o.stopped_after,
                  "attempt": o.attempt} for o in result.pods],
    }


# ---------------------------------------------------------------- in-cluster smoke test

SMOKE_SUFFIX = "-smoke"
SMOKE_LABEL = "runai-spec/smoke"
PREFLIGHT_SHA_ANNOTATION = "runai-spec/preflight-sha256"


def preflight_settings(workload: Workload, *, in_cluster: bool = False) -> PreflightSettings:
    """What the real job should look like to preflight.py: the profile's batch arithmetic and
    checkpoint format, the preset's bandwidth minimum. In the cluster the checkpoint goes to
    the profile's checkpoint volume; a local rehearsal keeps it in its own folder."""
    p = workload.loaded.profile
    return PreflightSettings(
        local_batch=p.batch.local, grad_accum=p.batch.grad_accum, global_batch=p.batch.global_,
        checkpoint_format=str(p.checkpoint.format),
        checkpoint_dir=p.checkpoint.dir if in_cluster else None,
        min_busbw_gbps=workload.approved.preset.min_busbw_gbps, fresh_checkpoint=in_cluster)


def smoke_names(name: str) -> tuple[str, str]:
    """(PyTorchJob, ConfigMap) names of a workload's smoke test: beside the real job, so a
    smoke test can run (and be deleted) while the real job exists."""
    job = f"{name}{SMOKE_SUFFIX}"
    return job, f"{job}-preflight"


def _longest_pod_name(job: Mapping[str, Any]) -> str:
    """`<job>-<replica type>-<N>` of the last pod, an elastic job at its maximum size."""
    name = job["metadata"]["name"]
    max_workers = (job.get("spec", {}).get("elasticPolicy") or {}).get("maxReplicas")
    names = []
    for rtype, n, _ in _replicas(job):
        if rtype == "Worker" and max_workers:
            n = max(n, int(max_workers))
        names.append(f"{name}-{rtype.lower()}-{max(n, 1) - 1}")
    return max(names, key=len)


def smoke_manifests(manifests: Sequence[Mapping[str, Any]],
                    settings: PreflightSettings | None = None,
                    *, deadline_s: int = 1800) -> list[dict[str, Any]]:
    """The same workload, short: every pod runs preflight.py from a mounted ConfigMap.

    The job is renamed `<name>-smoke` (its pod names must stay DNS labels); the world size,
    batch arithmetic and bandwidth minimum the preflight checks are the real job's."""
    settings = settings or PreflightSettings()
    out: list[dict[str, Any]] = []
    job = copy.deepcopy(dict(find_job(manifests)))
    meta = job["metadata"]
    real = meta["name"]
    name, cm_name = smoke_names(real)
    meta["name"] = name
    longest = _longest_pod_name(job)
    if len(longest) > 63:
        room = 63 - (len(longest) - len(real))
        raise InputError(f"the smoke test's pod name {longest!r} has {len(longest)} characters "
                         "(limit 63)", field="name",
                         hint=f"shorten name to at most {room} characters to run the smoke test")
    source = preflight_source()
    notes = {k: v for k, v in (meta.get("annotations") or {}).items()
             if k.startswith("runai-spec/")}
    notes[SMOKE_LABEL] = "preflight.py checklist in place of the training command"
    # a changed preflight.py is a different render of both objects: resubmit says so
    notes[PREFLIGHT_SHA_ANNOTATION] = hashlib.sha256(source.encode("utf-8")).hexdigest()
    meta.setdefault("labels", {})[SMOKE_LABEL] = "true"
    meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
    # the job's labels carry runai-spec's managed-by label: submit and delete treat the
    # ConfigMap as runai-spec's own, like the job
    configmap: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": meta.get("namespace"),
                     "labels": dict(meta["labels"]), "annotations": dict(notes)},
        "data": {"preflight.py": source},
    }
    if configmap["metadata"]["namespace"] is None:
        del configmap["metadata"]["namespace"]
    spec = job["spec"]
    run_policy = spec.setdefault("runPolicy", {})
    run_policy["backoffLimit"] = 0
    run_policy["activeDeadlineSeconds"] = deadline_s
    world = sum(n for _, n, _ in _replicas(job)) * _nproc_int(job)
    ckpt = settings.checkpoint_dir
    # pods of one job may start minutes apart in a cluster (image pulls): wait for them longer
    settings = PreflightSettings(**{**settings.__dict__,
                                    "join_timeout_s": max(settings.join_timeout_s, 600.0)})
    for rspec in spec["pytorchReplicaSpecs"].values():
        pod_spec = rspec["template"]["spec"]
        container = next(c for c in pod_spec["containers"] if c.get("name") == "pytorch")
        launcher = split_command(list(container.get("command") or [])
                                 + list(container.get("args") or []))
        pf_args = settings.args(
            world_size=world,
            checkpoint_dir=f"{ckpt.rstrip('/')}/.runai-spec-preflight" if ckpt else None,
            metrics_file="/tmp/runai-spec-preflight/metrics.jsonl")
        container["command"] = [*launcher.head, f"{SMOKE_MOUNT}/preflight.py", *pf_args]
        container.pop("args", None)
        container.setdefault("volumeMounts", []).append(
            {"name": SMOKE_VOLUME, "mountPath": SMOKE_MOUNT, "readOnly": True})
        pod_spec.setdefault("volumes", []).append(
            {"name": SMOKE_VOLUME, "configMap": {"name": cm_name}})
        rspec["restartPolicy"] = "Never"
    out.append(configmap)
    out.append(job)
    out.extend(copy.deepcopy(dict(m)) for m in manifests if m.get("kind") != "PyTorchJob")
    return out


def smoke_workload(workload: Workload, *, deadline_s: int = 1800) -> list[dict[str, Any]]:
    """`render --smoke`: the workload's smoke test, expecting what the real job declares."""
    try:
        return smoke_manifests(workload.manifests, preflight_settings(workload, in_cluster=True),
                               deadline_s=deadline_s)
    except InputError as exc:
        exc.file = exc.file or workload.path
        raise
