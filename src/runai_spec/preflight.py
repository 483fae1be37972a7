"""The site guide's "validate before the real run" checklist, run by every rank under torchrun.

Self-contained on purpose (standard library and torch only, nothing else from runai-spec):
`render --smoke` ships this file into the pods in a ConfigMap, and `rehearse` runs it locally
in place of the training entry point. Each check prints one machine-readable line

    PREFLIGHT {"check": "<id>", "status": "pass"|"fail"|"skip", "ok": bool, "rank": R, ...}

followed by one summary line per rank; the exit status is non-zero when any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

# Run from inside the installed package, this file's folder would come first on sys.path and
# its siblings (profile.py, ...) would shadow standard modules that torch imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE and os.path.exists(
        os.path.join(_HERE, "__init__.py")):
    del sys.path[0]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed import (  # type: ignore[attr-defined]  # noqa: E402
    PrefixStore,
    Store,
    TCPStore,
)

PREFIX = "PREFLIGHT"
BREAKS = ("checkpoint", "shared-device", "metrics", "missing-rank", "resume")
FORMATS = ("dcp", "torch", "safetensors", "deepspeed")
GPU_BUSBW_BYTES = 256 * 1024 * 1024
CPU_BUSBW_BYTES = 16 * 1024 * 1024  # gloo on CPU: 256 MiB would take most of a CI minute
CKPT_NAME = "preflight-ckpt"
# what OpenMPI's mpirun sets in each rank's env (OpenMPI 4.1 mpirun(1), "ENVIRONMENT")
MPI_RANK, MPI_SIZE = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
MPI_LOCAL_RANK, MPI_LOCAL_SIZE = "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _env_int(name: str, default: int | None) -> int | None:
    value = _env(name)
    return int(value) if value is not None else default


def _env_float(name: str, default: float | None) -> float | None:
    value = _env(name)
    return float(value) if value is not None else default


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Every option also reads PREFLIGHT_<NAME> so a pod can set it without touching argv."""
    p = argparse.ArgumentParser(prog="preflight.py", description=__doc__.splitlines()[0])
    p.add_argument("--local-batch", type=int, default=_env_int("PREFLIGHT_LOCAL_BATCH", 2),
                   help="samples per process per micro-step")
    p.add_argument("--grad-accum", type=int, default=_env_int("PREFLIGHT_GRAD_ACCUM", 1),
                   help="micro-steps per optimizer step")
    p.add_argument("--global-batch", type=int, default=_env_int("PREFLIGHT_GLOBAL_BATCH", None),
                   help="the global batch the profile declares")
    p.add_argument("--world-size", type=int, default=_env_int("PREFLIGHT_WORLD_SIZE", None),
                   help="the number of processes the plan expects")
    p.add_argument("--min-world-size", type=int, default=None,
                   help="an elastic job: the fewest processes a round may form with "
                        "(minReplicas x processes per pod); --world-size is then the most")
    p.add_argument("--plan-world-size", type=int,
                   default=_env_int("PREFLIGHT_PLAN_WORLD_SIZE", None),
                   help="the real job's process count, when a rehearsal runs fewer per pod "
                        "(the global batch arithmetic uses it)")
    p.add_argument("--checkpoint-dir", default=_env("PREFLIGHT_CHECKPOINT_DIR", None),
                   help="shared checkpoint directory (default: a folder under /tmp)")
    p.add_argument("--checkpoint-format", choices=FORMATS,
                   default=_env("PREFLIGHT_CHECKPOINT_FORMAT", "torch"))
    p.add_argument("--metrics-file", default=_env("PREFLIGHT_METRICS_FILE", None),
                   help="JSON-lines metrics file written by rank 0 only")
    p.add_argument("--min-busbw", type=float, default=_env_float("PREFLIGHT_MIN_BUSBW", None),
                   help="minimum all-reduce bus bandwidth in GB/s (nccl-tests' busbw)")
    p.add_argument("--busbw-mib", type=int, default=_env_int("PREFLIGHT_BUSBW_MIB", None),
                   help="all-reduce size in MiB (default 256 on GPU, 16 on CPU)")
    p.add_argument("--steps", type=int, default=_env_int("PREFLIGHT_STEPS", 4))
    p.add_argument("--checkpoint-every", type=int,
                   default=_env_int("PREFLIGHT_CHECKPOINT_EVERY", 2))
    p.add_argument("--hold-after-checkpoint", metavar="DIR",
                   default=_env("PREFLIGHT_HOLD_AFTER_CHECKPOINT", None),
                   help="after the first checkpoint, leave DIR/holding.<rank> and wait (at "
                        "most --timeout) for DIR/release: lets a rehearsal kill a pod at "
                        "exactly that point; no wait once DIR/release exists")
    p.add_argument("--busy-rank0", type=float, metavar="SECONDS",
                   default=_env_float("PREFLIGHT_BUSY_RANK0", 0.0),
                   help="rank 0 stays busy this long right after the first checkpoint (a long "
                        "save or an evaluation): its peers meet a rank 0 that has not noticed a "
                        "lost pod")
    p.add_argument("--checkpoint-on-sigterm", action="store_true",
                   default=_env("PREFLIGHT_CHECKPOINT_ON_SIGTERM", "") == "1",
                   help="on SIGTERM, save the last completed step's weights and exit 143, as a "
                        "script with checkpoint.on_sigterm does within the grace period")
    p.add_argument("--fresh-checkpoint", action="store_true",
                   default=_env("PREFLIGHT_FRESH_CHECKPOINT", "") == "1",
                   help="start from step 1: rank 0 removes an earlier preflight checkpoint "
                        "first (a smoke test on a volume that kept the last one's)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"),
                   default=_env("PREFLIGHT_BACKEND", "auto"))
    p.add_argument("--join-timeout", type=float,
                   default=_env_float("PREFLIGHT_JOIN_TIMEOUT", 60.0),
                   help="seconds to wait for every rank to join")
    p.add_argument("--timeout", type=float, default=_env_float("PREFLIGHT_TIMEOUT", 120.0),
                   help="collective timeout in seconds")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   default=_env_float("PREFLIGHT_DEADLINE", None),
                   help="fail and exit this long after this process started, wherever it hangs "
                        "(the smoke test's own bound: it counts from the pods' start, never "
                        "from the queue)")
    p.add_argument("--break", dest="faults", action="append", choices=BREAKS,
                   default=[f for f in (_env("PREFLIGHT_BREAK", "") or "").split(",") if f],
                   help="fault injection for tests and CI breakage runs")
    opts = p.parse_args(argv)
    for fault in opts.faults:
        if fault not in BREAKS:
            p.error(f"PREFLIGHT_BREAK: unknown fault {fault!r} (choose from {', '.join(BREAKS)})")
    for name in ("local_batch", "grad_accum", "steps", "checkpoint_every"):
        if getattr(opts, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return opts


@dataclass(frozen=True)
class Launch:
    """What this process learns from torchrun (or, for a bare `python`, from the operator)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    restart_count: int
    agent_store: bool
    launcher: str

    @classmethod
    def from_env(cls) -> Launch:
        if _env("RANK") is None and _env(MPI_RANK) is not None:
            return cls.from_mpi_env()
        torchrun = _env("TORCHELASTIC_RUN_ID") is not None
        world = int(_env("WORLD_SIZE", "1") or 1)
        rank = int(_env("RANK", "0") or 0)
        port = _env("MASTER_PORT")
        if port is None:
            if world > 1:
                raise SystemExit("preflight: MASTER_PORT is not set but WORLD_SIZE > 1")
            port = str(_free_port())
        return cls(
            rank=rank,
            world_size=world,
            local_rank=int(_env("LOCAL_RANK", "0") or 0),
            local_world_size=int(_env("LOCAL_WORLD_SIZE", "1") or 1),
            node_rank=int(_env("GROUP_RANK", _env("PET_NODE_RANK", "0")) or 0),
            master_addr=_env("MASTER_ADDR", "127.0.0.1") or "127.0.0.1",
            master_port=int(port),
            restart_count=int(_env("TORCHELASTIC_RESTART_COUNT", "0") or 0),
            agent_store=_env("TORCHELASTIC_USE_AGENT_STORE") == "True",
            launcher="torchrun" if torchrun else "python",
        )

    @classmethod
    def from_mpi_env(cls) -> Launch:
        """A rank that OpenMPI's mpirun started (an MPIJob's launcher): rank, world and local
        rank from OMPI_COMM_WORLD_* (OpenMPI 4.1's mpirun(1) ENVIRONMENT), the store at the
        MASTER_ADDR and MASTER_PORT the render forwards with -x. The pod's index is the rank
        over the ranks per pod: mpirun fills each host's slots in the hostfile's order
        (OMPI_COMM_WORLD_NODE_RANK is not it: it counts across the jobs on a host). An MPI job
        restarts only whole, as a new mpirun: no restart count reaches the ranks."""
        local_world = int(_env(MPI_LOCAL_SIZE, "1") or 1)
        rank = int(_env(MPI_RANK, "0") or 0)
        port = _env("MASTER_PORT")
        if port is None:
            raise SystemExit("preflight: MASTER_PORT is not set (mpirun forwards it with -x)")
        return cls(
            rank=rank,
            world_size=int(_env(MPI_SIZE, "1") or 1),
            local_rank=int(_env(MPI_LOCAL_RANK, "0") or 0),
            local_world_size=local_world,
            node_rank=rank // local_world,
            master_addr=_env("MASTER_ADDR", "127.0.0.1") or "127.0.0.1",
            master_port=int(port),
            restart_count=0,
            agent_store=False,
            launcher="mpirun",
        )


def _pid_namespace() -> str:
    """This process's PID namespace (`pid:[inode]`): two pods of a rehearsal on one host may
    each have a rank of the same PID, as pods of a cluster do."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(line: dict[str, Any]) -> None:
    # one write per line, so that the ranks sharing a pod's stdout never interleave mid-line
    sys.stdout.write(f"{PREFIX} {json.dumps(line, default=str)}\n")
    sys.stdout.flush()


@dataclass
class Reporter:
    """Prints one PREFLIGHT line per check and remembers the outcome for the summary."""

    rank: int
    results: dict[str, str] = field(default_factory=dict)

    def emit(self, check: str, status: str, message: str, **details: Any) -> bool:
        self.results[check] = status
        line = {"check": check, "status": status, "ok": status != "fail", "rank": self.rank,
                "message": message, **details}
        _say(line)
        return status != "fail"

    def passed(self, check: str, message: str, **details: Any) -> bool:
        return self.emit(check, "pass", message, **details)

    def failed(self, check: str, message: str, **details: Any) -> bool:
        return self.emit(check, "fail", message, **details)

    def skipped(self, check: str, message: str, **details: Any) -> bool:
        return self.emit(check, "skip", message, **details)

    def event(self, name: str, **details: Any) -> None:
        _say({"event": name, "rank": self.rank, **details})

    def summary(self) -> int:
        failed = [c for c, s in self.results.items() if s == "fail"]
        skipped = [c for c, s in self.results.items() if s == "skip"]
        passed = [c for c, s in self.results.items() if s == "pass"]
        line = {"summary": True, "ok": not failed, "rank": self.rank, "passed": passed,
                "failed": failed, "skipped": skipped}
        _say(line)
        verdict = "FAILED: " + ", ".join(failed) if failed else "all checks passed"
        sys.stderr.write(f"preflight: rank {self.rank}: {len(passed)} passed, {len(failed)} "
                         f"failed, {len(skipped)} skipped: {verdict}\n")
        sys.stderr.flush()
        return 1 if failed else 0


@dataclass(frozen=True)
class Device:
    kind: str  # "cuda" or "cpu"
    index: int | None
    identity: str
    name: str
    visible: int
    problem: str | None

    @property
    def torch_device(self) -> torch.device:
        if self.kind == "cuda" and self.index is not None:
            return torch.device("cuda", self.index)
        return torch.device("cpu")


def pick_device(launch: Launch, use_cuda: bool, faults: Sequence[str]) -> Device:
    """The device this rank would train on, and an identity that is equal iff two ranks share it."""
    if use_cuda:
        visible = torch.cuda.device_count()
        index = 0 if "shared-device" in faults else launch.local_rank
        problem = None
        if index >= visible:
            problem = (f"LOCAL_RANK {launch.local_rank} but only {visible} GPU(s) visible "
                       f"(CUDA_VISIBLE_DEVICES={_env('CUDA_VISIBLE_DEVICES', '<unset>')})")
            index %= visible
        torch.cuda.set_device(index)
        props = torch.cuda.get_device_properties(index)
        return Device("cuda", index, f"GPU-{props.uuid}", props.name, visible, problem)
    identity = _env("PREFLIGHT_DEVICE_ID") or f"cpu:{socket.gethostname()}:{_pid_namespace()}:" \
        f"{os.getpid()}"
    if "shared-device" in faults:
        identity = f"cpu:{socket.gethostname()}:shared"
    return Device("cpu", None, identity, "cpu", 0, None)


def connect_store(launch: Launch, timeout: float) -> Store:
    """The same TCPStore that `env://` would make (torchrun's agent store, else rank 0 hosts)."""
    delta = timedelta(seconds=timeout)
    if launch.agent_store:
        base: Store = TCPStore(launch.master_addr, launch.master_port,
                                         launch.world_size, False, delta)
    else:
        base = TCPStore(launch.master_addr, launch.master_port, launch.world_size,
                             launch.rank == 0, delta, wait_for_workers=False)
    # one prefix for every round, as torch's env:// store (rendezvous.py _create_c10d_store, 2.13):
    # each round of a c10d rendezvous brings a new store, and the agents' restart counts differ
    # (a survivor's agent restarted its workers, a recreated pod's agent did not)
    return PrefixStore("preflight", base)


def exchange(store: Store, rank: int, world: int, info: dict[str, Any],
             timeout: float) -> tuple[dict[int, dict[str, Any]], list[int], list[int]]:
    """All-gather through the store, before any NCCL call: (infos, missing ranks, duplicates)."""
    store.add(f"claim/{rank}", 1)
    store.set(f"info/{rank}", json.dumps(info))
    keys = [f"info/{r}" for r in range(world)]
    # DistStoreError on timeout: which ranks are absent is what matters, found just below
    with contextlib.suppress(Exception):
        store.wait(keys, timedelta(seconds=timeout))
    missing = [r for r in range(world) if not store.check([f"info/{r}"])]
    infos = {r: json.loads(store.get(f"info/{r}")) for r in range(world) if r not in missing}
    duplicates = [r for r in range(world) if r not in missing and store.add(f"claim/{r}", 0) > 1]
    return infos, missing, duplicates


def check_ranks(rep: Reporter, launch: Launch, infos: dict[int, dict[str, Any]],
                missing: list[int], duplicates: list[int], timeout: float) -> bool:
    hosts = sorted({i["host"] for i in infos.values()})
    table = [{"rank": r, "host": i["host"], "local_rank": i["local_rank"],
              "node_rank": i["node_rank"], "device": i["device"]} for r, i in sorted(infos.items())]
    if missing:
        return rep.failed("ranks", f"rank(s) {_join(missing)} of {launch.world_size} did not join "
                          f"within {timeout:g} s", missing=missing, joined=sorted(infos),
                          ranks=table)
    if duplicates:
        return rep.failed("ranks", f"rank(s) {_join(duplicates)} started more than once",
                          duplicates=duplicates, ranks=table)
    return rep.passed("ranks", f"all {launch.world_size} ranks started once on "
                      f"{len(hosts)} host(s)", hosts=hosts, ranks=table)


def check_world_size(rep: Reporter, launch: Launch, infos: dict[int, dict[str, Any]],
                     expected: int | None, minimum: int | None = None) -> bool:
    reported = sorted({i["world_size"] for i in infos.values()})
    details: dict[str, Any] = {"expected": expected, "reported": reported,
                               "local_world_sizes": sorted({i["local_world_size"]
                                                            for i in infos.values()})}
    if len(reported) != 1:
        return rep.failed("world-size", f"ranks disagree on the world size: {reported}", **details)
    if expected is not None and minimum is not None:
        # elastic: a round may form with fewer nodes (a pod still restarting) and grow later
        if not minimum <= reported[0] <= expected:
            return rep.failed("world-size", f"the plan allows {minimum} to {expected} processes "
                              f"(elastic), the ranks report a world of {reported[0]}", **details)
        return rep.passed("world-size", f"every rank reports a world of {reported[0]}, within "
                          f"the elastic range {minimum} to {expected}", **details)
    if expected is not None and reported[0] != expected:
        return rep.failed("world-size", f"the plan expects {expected} processes, the ranks "
                          f"report a world of {reported[0]}", **details)
    return rep.passed("world-size", f"every rank reports a world of {reported[0]}", **details)


def check_device(rep: Reporter, infos: dict[int, dict[str, Any]]) -> bool:
    by_device: dict[str, list[int]] = {}
    for r, i in sorted(infos.items()):
        by_device.setdefault(i["device"], []).append(r)
    shared = {dev: ranks for dev, ranks in by_device.items() if len(ranks) > 1}
    problems = [f"rank {r}: {i['device_problem']}" for r, i in sorted(infos.items())
                if i.get("device_problem")]
    kind = "GPU" if any(i["device_kind"] == "cuda" for i in infos.values()) else "device"
    messages = [f"ranks {_join(ranks)} share {kind} {dev}" for dev, ranks in shared.items()]
    details = {"devices": {str(r): i["device"] for r, i in sorted(infos.items())},
               "shared": shared, "problems": problems}
    if messages or problems:
        return rep.failed("device", "; ".join(messages + problems), **details)
    return rep.passed("device", f"{len(infos)} rank(s) on {len(by_device)} distinct "
                      f"{kind}(s)", **details)


def _join(items: Sequence[int]) -> str:
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


class TinyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def _batch(rank: int, step: int, micro: int, size: int,
           device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1_000_003 * step + 7_919 * rank + micro)
    x = torch.randn(size, 16, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    return x.to(device), y.to(device)


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(repr([float(v).hex() for v in tensor.detach().cpu().flatten().tolist()]).encode())
    return h.hexdigest()[:16]


class Checkpointer:
    """Writes and reads the model and step in the profile's format, atomically by rename."""

    def __init__(self, root: Path, fmt: str, rank: int, group: Any) -> None:
        self.root = root
        self.requested = fmt
        self.rank = rank
        self.group = group
        self.format = fmt
        self.note: str | None = None
        if fmt == "safetensors":
            if importlib.util.find_spec("safetensors") is None:
                self.format = "torch"
                self.note = "safetensors is not installed here: wrote torch.save instead"
        elif fmt == "dcp" and importlib.util.find_spec("numpy") is None:
            # its collectives pickle through numpy; torch does not require numpy
            self.format = "torch"
            self.note = ("torch.distributed.checkpoint needs numpy, which is not installed "
                         "here: wrote torch.save instead")
        elif fmt == "deepspeed":
            self.format = "torch"
            self.note = ("a DeepSpeed engine checkpoint needs DeepSpeed and its config: "
                         "wrote torch.save of the same state instead")

    @property
    def path(self) -> Path:
        return self.root / CKPT_NAME

    def exists(self) -> bool:
        return (self.path / "step.json").is_file()

    def save(self, model: nn.Module, step: int) -> None:
        tmp = self.root / f"{CKPT_NAME}.tmp"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier(group=self.group)
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        if self.format == "dcp":
            from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

            dcp_save({"model": state}, checkpoint_id=str(tmp), process_group=self.group)
        elif self.rank == 0:
            if self.format == "safetensors":
                st = importlib.import_module("safetensors.torch")
                st.save_file(state, str(tmp / "model.safetensors"))
            else:
                torch.save({"model": state, "step": step}, tmp / "model.pt")
        dist.barrier(group=self.group)
        if self.rank == 0:
            (tmp / "step.json").write_text(json.dumps({"step": step}))
            shutil.rmtree(self.path, ignore_errors=True)
            tmp.rename(self.path)
        dist.barrier(group=self.group)

    def save_alone(self, state: dict[str, torch.Tensor], step: int) -> bool:
        """Save without any collective (a signal handler cannot wait for its peers): rank 0
        writes, atomically by rename. False where the format needs every rank (dcp)."""
        if self.format == "dcp":
            return False
        if self.rank != 0:
            return True
        tmp = self.root / f"{CKPT_NAME}.sigterm.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.format == "safetensors":
            st = importlib.import_module("safetensors.torch")
            st.save_file(state, str(tmp / "model.safetensors"))
        else:
            torch.save({"model": state, "step": step}, tmp / "model.pt")
        (tmp / "step.json").write_text(json.dumps({"step": step}))
        shutil.rmtree(self.path, ignore_errors=True)
        tmp.rename(self.path)
        return True

    def corrupt(self) -> None:
        """Fault injection: leave a checkpoint that looks complete but cannot be read."""
        if self.rank == 0:
            for f in sorted(self.path.iterdir()):
                if f.name != "step.json" and f.is_file():
                    f.write_bytes(f.read_bytes()[: max(1, f.stat().st_size // 3)])
        dist.barrier(group=self.group)

    def load(self, model: nn.Module) -> int:
        step = int(json.loads((self.path / "step.json").read_text())["step"])
        if self.format == "dcp":
            from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

            state = {k: torch.empty_like(v).cpu() for k, v in model.state_dict().items()}
            wrapped: dict[str, Any] = {"model": state}
            dcp_load(wrapped, checkpoint_id=str(self.path), process_group=self.group)
            model.load_state_dict(wrapped["model"])
        elif self.format == "safetensors":
            st = importlib.import_module("safetensors.torch")
            model.load_state_dict(st.load_file(str(self.path / "model.safetensors")))
        else:
            blob = torch.load(self.path / "model.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(blob["model"])
            if int(blob["step"]) != step:
                raise ValueError(f"model.pt holds step {blob['step']}, step.json says {step}")
        return step


def train_and_check(rep: Reporter, opts: argparse.Namespace, launch: Launch, device: Device,
                    cpu_group: Any, xchg: Exchange, ckpt_root: Path) -> None:
    """The synthetic loop: global batch, checkpoint round trip, resume, metrics from rank 0."""
    dev = device.torch_device
    torch.manual_seed(1234)
    model = TinyModel().to(dev)
    ckpt = Checkpointer(ckpt_root, opts.checkpoint_format, launch.rank, cpu_group)
    fmt_note = {"format": opts.checkpoint_format, "written_as": ckpt.format, "note": ckpt.note}

    start = 1
    if opts.fresh_checkpoint:
        # Without this a second smoke test resumes the first one's last step, trains nothing
        # and checks nothing. Everyone waits until rank 0 has removed it.
        if launch.rank == 0 and ckpt.path.exists():
            shutil.rmtree(ckpt.path)
            rep.event("checkpoint-removed", path=str(ckpt.path))
        xchg.gather("fresh")
    if ckpt.exists() and "resume" in opts.faults:
        # a script that never looks for its checkpoint: only a restart rehearsal notices
        rep.skipped("resume", f"fault injection: ignored the checkpoint at {ckpt.path}; "
                    "fresh start at step 1", path=str(ckpt.path), ignored=True)
    elif ckpt.exists():
        try:
            saved = ckpt.load(model)
            digest = _digest(model)
            digests = xchg.gather(digest)
            if len(set(digests)) != 1:
                rep.failed("resume", "ranks resumed different weights", digests=digests)
            else:
                start = saved + 1
                rep.passed("resume", f"resumed from the checkpoint of step {saved}; "
                           f"training continues at step {start}", resumed_from=saved,
                           next_step=start, digest=digest, path=str(ckpt.path), **fmt_note)
        except Exception as exc:  # a checkpoint that cannot be read is the finding
            rep.failed("resume", f"found a checkpoint at {ckpt.path} but could not load it: "
                       f"{type(exc).__name__}: {exc}", path=str(ckpt.path), **fmt_note)
    else:
        rep.skipped("resume", f"no checkpoint at {ckpt.path}: fresh start", path=str(ckpt.path))

    ddp: nn.Module = model
    if launch.world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.kind == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)
    optim = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    metrics_path = Path(opts.metrics_file) if opts.metrics_file else None
    # a restarted pod appends to the same file: count this run's lines only
    lines_before = _count_lines(metrics_path) if launch.rank == 0 else 0
    emits_metrics = launch.rank == 0 or "metrics" in opts.faults
    metric_lines = 0
    samples_per_step: list[int] = []
    ckpt_done = False
    steps = range(start, opts.steps + 1)
    # the weights of the last completed step: what a SIGTERM handler may save consistently
    snapshot: dict[str, Any] = {"step": start - 1,
                            "state": {k: v.detach().cpu().clone()
                                      for k, v in model.state_dict().items()}}
    if opts.checkpoint_on_sigterm:
        _on_sigterm_save(rep, ckpt, snapshot)
    for step in steps:
        seen = torch.zeros(1, dtype=torch.float64, device=dev)
        loss_sum = 0.0
        for micro in range(opts.grad_accum):
            x, y = _batch(launch.rank, step, micro, opts.local_batch, dev)
            last = micro == opts.grad_accum - 1
            no_sync = getattr(ddp, "no_sync", None)
            ctx = no_sync() if (not last and no_sync is not None) else nullcontext()
            with ctx:
                loss = loss_fn(ddp(x), y) / opts.grad_accum
                loss.backward()
            seen += x.shape[0]
            loss_sum += float(loss.detach())
        optim.step()
        optim.zero_grad(set_to_none=True)
        if opts.checkpoint_on_sigterm:
            snapshot["state"] = {k: v.detach().cpu().clone()
                                 for k, v in model.state_dict().items()}
            snapshot["step"] = step
        if launch.world_size > 1:
            dist.all_reduce(seen)
        samples_per_step.append(int(seen.item()))
        if emits_metrics and metrics_path is not None:
            metrics_path.parent.mkdir(parents=True, exist_ok=True)
            with metrics_path.open("a") as fh:
                fh.write(json.dumps({"step": step, "loss": loss_sum, "rank": launch.rank}) + "\n")
            metric_lines += 1
        elif emits_metrics:
            print(f"metrics: step {step} loss {loss_sum:.5f}", flush=True)
            metric_lines += 1
        if step % opts.checkpoint_every == 0 or step == opts.steps:
            before = _digest(model)
            ckpt.save(model, step)
            rep.event("checkpoint-saved", step=step, path=str(ckpt.path))
            if not ckpt_done:
                ckpt_done = True
                check_checkpoint(rep, ckpt, model, step, before, opts, fmt_note, xchg)
                if opts.hold_after_checkpoint:
                    hold(rep, Path(opts.hold_after_checkpoint), step, opts.timeout)
                if opts.busy_rank0 > 0 and launch.rank == 0:
                    rep.event("busy", step=step, seconds=opts.busy_rank0)
                    time.sleep(opts.busy_rank0)

    if not ckpt_done:
        rep.skipped("checkpoint", f"no step left to train after resuming at step {start}")
    check_global_batch(rep, opts, launch, samples_per_step)
    check_metrics(rep, opts, launch, xchg, metric_lines, len(steps), metrics_path, lines_before)


def _on_sigterm_save(rep: Reporter, ckpt: Checkpointer, snapshot: dict[str, Any]) -> None:
    """SIGTERM (the kubelet deleting the pod; torchrun forwards it to its workers): save the
    last completed step, say so with how long it took, and exit 143 at once."""

    def handler(signum: int, frame: Any) -> None:
        t0 = time.monotonic()
        step, state = int(snapshot["step"]), snapshot["state"]
        try:
            saved = step >= 1 and ckpt.save_alone(state, step)
            error = None if saved or step < 1 else f"{ckpt.format} needs every rank to save"
        except Exception as exc:  # the finding: the save on SIGTERM failed
            saved, error = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        digest = None
        if saved:
            probe = TinyModel()
            probe.load_state_dict(state)
            digest = _digest(probe)
        rep.event("sigterm-checkpoint", step=step, saved=saved, error=error, digest=digest,
                  seconds=round(time.monotonic() - t0, 3), t=time.time())
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def hold(rep: Reporter, folder: Path, step: int, timeout: float) -> None:
    """Wait where a rehearsal wants to kill a pod: right after the first checkpoint.

    The marker is a file, not a line on stdout: torchrun's --tee copies a rank's output to the
    pod's log only when its tail of the rank's file next looks, a while later."""
    release = folder / "release"
    if release.exists():  # the restarted run: nothing to wait for
        return
    folder.mkdir(parents=True, exist_ok=True)
    rep.event("holding", step=step)
    tmp = folder / f".holding.{rep.rank}.{os.getpid()}"
    tmp.write_text(json.dumps({"rank": rep.rank, "step": step, "pid": os.getpid()}))
    tmp.replace(folder / f"holding.{rep.rank}")
    deadline = time.monotonic() + timeout
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rep.event("released", step=step, released=release.exists())


def _count_lines(path: Path | None) -> int:
    if path is None or not path.exists():
        return 0
    with path.open() as fh:
        return sum(1 for _ in fh)


class Exchange:
    """All-gather of small JSON values through the c10d store: no NCCL, no pickling, no numpy."""

    def __init__(self, store: Store, rank: int, world: int, timeout: float) -> None:
        self.store = store
        self.rank = rank
        self.world = world
        self.timeout = timedelta(seconds=timeout)
        self.round = 0

    def gather(self, value: Any) -> list[Any]:
        self.round += 1
        self.store.set(f"gather/{self.round}/{self.rank}", json.dumps(value))
        keys = [f"gather/{self.round}/{r}" for r in range(self.world)]
        self.store.wait(keys, self.timeout)
        return [json.loads(self.store.get(k)) for k in keys]


def check_checkpoint(rep: Reporter, ckpt: Checkpointer, model: nn.Module, step: int,
                     before: str, opts: argparse.Namespace, fmt_note: dict[str, Any],
                     xchg: Exchange) -> None:
    if "checkpoint" in opts.faults:
        ckpt.corrupt()
    fresh = TinyModel()
    try:
        loaded = ckpt.load(fresh)
        after = _digest(fresh)
        error = None
    except Exception as exc:  # the finding, reported with the exception's own words
        loaded, after, error = -1, "", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    results = xchg.gather([loaded, after, error])
    errors = sorted({e for _, _, e in results if e})
    bad = [r for r, (s, d, e) in enumerate(results) if e or s != step or d != before]
    details = {"saved_step": step, "expected_next_step": step + 1, "digest": before,
               "path": str(ckpt.path), **fmt_note}
    if errors:
        rep.failed("checkpoint", f"the checkpoint of step {step} does not reload on rank(s) "
                   f"{_join(bad)}: {errors[0]}", failed_ranks=bad, **details)
    elif bad:
        rep.failed("checkpoint", f"rank(s) {_join(bad)} reloaded a different step or different "
                   "weights", failed_ranks=bad, **details)
    elif ckpt.note:
        # the round trip worked, but not in the profile's format: that format is untested
        rep.skipped("checkpoint", f"{ckpt.requested} not tested: {ckpt.note}; that copy of step "
                    f"{step} reloaded with identical weights on every rank", untested=True,
                    **details)
    else:
        rep.passed("checkpoint", f"step {step} written, reloaded with identical weights on every "
                   f"rank; next step {step + 1}", **details)


def check_global_batch(rep: Reporter, opts: argparse.Namespace, launch: Launch,
                       samples: list[int]) -> None:
    here = opts.local_batch * launch.world_size * opts.grad_accum
    # the profile declares its global batch at the plan's world: the most processes of an
    # elastic job (validate's rule); a round formed with fewer is judged for the world it got
    elastic = opts.min_world_size is not None and opts.world_size is not None
    plan_world = opts.plan_world_size or (opts.world_size if elastic else None) or launch.world_size
    planned = opts.local_batch * plan_world * opts.grad_accum
    measured = sorted(set(samples))
    details = {"local": opts.local_batch, "processes": launch.world_size,
               "planned_processes": plan_world, "grad_accum": opts.grad_accum,
               "computed": planned, "declared": opts.global_batch,
               "measured_per_step": measured, "expected_here": here}
    formula = (f"{opts.local_batch} local x {plan_world} processes x "
               f"{opts.grad_accum} accumulation = {planned}")
    if plan_world != launch.world_size:
        formula += f" (this run: {launch.world_size} processes, {here} per step)"
        if elastic:
            formula += "; an elastic round's batch scales with its world"
    if measured and measured != [here]:
        rep.failed("global-batch", f"the loop saw {measured} samples per step, not {here}; "
                   f"{formula}", **details)
    elif opts.global_batch is not None and opts.global_batch != planned:
        rep.failed("global-batch", f"the profile declares a global batch of {opts.global_batch}"
                   f" but {formula}", **details)
    elif opts.global_batch is None:
        rep.passed("global-batch", f"{formula} (no declared global batch to compare)", **details)
    else:
        rep.passed("global-batch", f"{formula}, as declared", **details)


def check_metrics(rep: Reporter, opts: argparse.Namespace, launch: Launch, xchg: Exchange,
                  lines: int, steps: int, path: Path | None, lines_before: int) -> None:
    counts = xchg.gather(lines)
    emitters = [r for r, c in enumerate(counts) if c]
    in_file = None
    if path is not None and launch.rank == 0 and path.exists():
        in_file = _count_lines(path) - lines_before
    details = {"per_rank": counts, "steps": steps, "emitters": emitters,
               "file": str(path) if path else None, "lines_in_file": in_file}
    if emitters not in ([0], []) or sum(counts) != steps:
        rep.failed("metrics", f"{sum(counts)} metric lines for {steps} steps, emitted by "
                   f"rank(s) {_join(emitters) if emitters else 'none'}: expected rank 0 only",
                   **details)
    elif in_file is not None and in_file != steps:
        rep.failed("metrics", f"{path} holds {in_file} lines for {steps} steps", **details)
    else:
        rep.passed("metrics", f"{steps} metric lines, from rank 0 only", **details)


def check_bandwidth(rep: Reporter, opts: argparse.Namespace, launch: Launch,
                    device: Device, backend: str) -> None:
    """nccl-tests' all-reduce bus bandwidth: busbw = algbw * 2(n-1)/n, algbw = bytes / time."""
    n = launch.world_size
    size = (opts.busbw_mib * 1024 * 1024 if opts.busbw_mib
            else GPU_BUSBW_BYTES if device.kind == "cuda" else CPU_BUSBW_BYTES)
    dev = device.torch_device
    tensor = torch.ones(size // 4, dtype=torch.float32, device=dev)
    warmup, iters = (5, 20) if device.kind == "cuda" else (1, 3)

    def sync() -> None:
        if device.kind == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        dist.all_reduce(tensor)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    sync()
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=dev)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    seconds = float(elapsed.item())
    algbw = size / seconds / 1e9
    busbw = algbw * 2 * (n - 1) / n
    details = {"backend": backend, "bytes": size, "iterations": iters, "time_s": seconds,
               "algbw_GBps": round(algbw, 3), "busbw_GBps": round(busbw, 3),
               "min_GBps": opts.min_busbw, "ranks": n}
    what = (f"all-reduce of {size // (1024 * 1024)} MiB over {n} rank(s) ({backend}): "
            f"busbw {busbw:.2f} GB/s, algbw {algbw:.2f} GB/s")
    if n == 1:
        rep.skipped("bus-bandwidth", f"{what}; one rank moves no data over any link, so the "
                    "minimum is not applied", **details)
    elif opts.min_busbw is not None and busbw < opts.min_busbw:
        rep.failed("bus-bandwidth", f"{what} is below the preset's minimum of "
                   f"{opts.min_busbw:g} GB/s (a transport fallback?)", **details)
    else:
        rep.passed("bus-bandwidth", what, **details)


def run(opts: argparse.Namespace) -> int:
    launch = Launch.from_env()
    rep = Reporter(launch.rank)
    if "missing-rank" in opts.faults and launch.rank == launch.world_size - 1 > 0:
        print(f"preflight: rank {launch.rank}: fault injection: exiting without joining",
              file=sys.stderr, flush=True)
        return 0
    if opts.backend == "nccl" and not torch.cuda.is_available():
        rep.failed("device", "backend nccl was asked for but CUDA is not available")
        return rep.summary()
    backend = "nccl" if opts.backend == "nccl" or (
        opts.backend == "auto" and torch.cuda.is_available()) else "gloo"
    device = pick_device(launch, backend == "nccl", opts.faults)

    try:
        store = connect_store(launch, opts.join_timeout)
    except Exception as exc:
        rep.failed("ranks", f"rank {launch.rank} could not reach the rendezvous at "
                   f"{launch.master_addr}:{launch.master_port} within {opts.join_timeout:g} s: "
                   f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return rep.summary()
    info = {"rank": launch.rank, "world_size": launch.world_size, "host": socket.gethostname(),
            "pid": os.getpid(), "local_rank": launch.local_rank,
            "local_world_size": launch.local_world_size, "node_rank": launch.node_rank,
            "device": device.identity, "device_kind": device.kind, "device_name": device.name,
            "device_problem": device.problem, "launcher": launch.launcher}
    infos, missing, dups = exchange(store, launch.rank, launch.world_size, info,
                                    opts.join_timeout)
    if not check_ranks(rep, launch, infos, missing, dups, opts.join_timeout):
        return rep.summary()
    check_world_size(rep, launch, infos, opts.world_size, opts.min_world_size)
    device_ok = check_device(rep, infos)

    # Two NCCL ranks on one GPU crash at the first collective: after a failed device check
    # the rest of the list still runs, over gloo on the CPU, and the bandwidth is not measured.
    pg_backend = backend if device_ok else "gloo"
    if not device_ok and device.kind == "cuda":
        device = Device("cpu", None, device.identity, "cpu", device.visible, device.problem)
    dist.init_process_group(pg_backend, store=PrefixStore("pg", store), rank=launch.rank,
                            world_size=launch.world_size, timeout=timedelta(seconds=opts.timeout))
    cpu_group = dist.new_group(backend="gloo") if pg_backend != "gloo" else dist.group.WORLD

    ckpt_root = Path(opts.checkpoint_dir or f"/tmp/preflight-{os.environ.get('USER', 'run')}")
    try:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        train_and_check(rep, opts, launch, device, cpu_group,
                        Exchange(store, launch.rank, launch.world_size, opts.timeout), ckpt_root)
        if device_ok:
            check_bandwidth(rep, opts, launch, device, pg_backend)
        else:
            rep.skipped("bus-bandwidth", "not measured: ranks share a device, and NCCL would "
                        "crash at the first collective")
    except Exception as exc:  # report what broke, then still try to shut down cleanly
        if _env("PREFLIGHT_TRACEBACK"):
            import traceback

            traceback.print_exc()
        rep.failed("training", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")

    try:
        dist.barrier(group=cpu_group)
        dist.destroy_process_group()
        rep.passed("shutdown", "barrier reached and process group destroyed")
    except Exception as exc:
        rep.failed("shutdown", f"{type(exc).__name__}: {exc}")
    return rep.summary()


def watch_deadline(seconds: float | None, started: float) -> None:
    """The preflight's own deadline: a daemon thread that reports and exits wherever the main
    thread hangs (a collective or a store wait in C++ never returns to a signal handler)."""
    if seconds is None or seconds <= 0:
        return

    def expire() -> None:
        rank = int(_env("RANK", _env(MPI_RANK, "0")) or 0)
        rep = Reporter(rank)
        rep.failed("training", f"the preflight's own deadline of {seconds:g} s passed before it "
                   "finished (counted from its start in the pod, queue time aside)",
                   deadline_s=seconds, elapsed_s=round(time.monotonic() - started, 3))
        rep.summary()
        os._exit(1)

    timer = threading.Timer(max(0.0, seconds - (time.monotonic() - started)), expire)
    timer.daemon = True
    timer.start()


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    opts = parse_args(argv)
    watch_deadline(opts.deadline, started)
    return run(opts)


if __name__ == "__main__":
    # The verdict is printed and every file closed: end here, before the interpreter's teardown,
    # where torch's c10d store thread may abort the process ("terminate called without an active
    # exception", exit -6, seen once in CI's smoke test after every check passed), which would
    # fail a healthy smoke job. A script's own teardown crash is the own-script rehearsal's
    # finding (rehearse/teardown.py); the preflight's is torch's, not the job's.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
