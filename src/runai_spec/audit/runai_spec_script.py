"""The audit layer's records beyond saves and loads: renames, transport variables, samples per step.

sitecustomize.py loads it (by this name, unique on the ranks' sys.path) and hands it itself, whose
`record`, `_wrap`, `PATCHES` and the set of checkpoints saved so far it uses. It keeps
sitecustomize's rules: it changes nothing the script computes (every wrapper calls the original
with the same arguments and returns or raises what it does; the hooks only read shapes), it
fails open, and it uses only the stdlib until the script imports torch.

Records:
- `rename`: a checkpoint this process saved (or a folder holding one) renamed or moved into
  place (`os.rename`, `os.replace`, and so `shutil.move`);
- `env-set`: a transport variable (TRANSPORT_PREFIXES) set by the rank itself at run time
  (`os.environ[...] =`, `setdefault`, `update`, `os.putenv`), with the line that set it;
- `batch`: for each of the first MEASURE_STEPS optimizer steps, the samples that entered the
  model since the step before: the batch dimension of every batch a `DataLoader` handed out
  (`_BaseDataLoaderIter.__next__`, torch/utils/data/dataloader.py) and of the first tensor of
  each outermost module call (torch's global module forward hooks, removed after those steps);
- `moved-on`: the first optimizer step after a checkpoint completed (so the script is past
  its renames): the moment a fault "after the first checkpoint" lands;
- `end`: the script's main code is done, before teardown (threading's exit callbacks run
  before atexit handlers and finalisation), so that a crash in teardown is told apart;
- `stuck`: the process still alive STUCK_S seconds after its own `destroy_process_group`
  returned, with where its main thread waits and the non-daemon threads it would join (in
  the cluster such a pod never completes and holds its GPUs);
- DeepSpeed's engine `save_checkpoint`/`load_checkpoint` as `save`/`load` records;
- `master-address`: MASTER_ADDR chosen from `hostname -I` (DeepSpeed's `mpi_discovery`, or a
  `hostname -I` the rank ran); `transport-flags`: a command started with DeepSpeed's OpenMPI
  runner's transport flags; `deepspeed-env`: a `.deepspeed_env` opened."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# variables the transports read once at start-up: the job's env (profile, preset) is their place
TRANSPORT_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "UCX_",
    "FI_",
    "GLOO_",
    "TP_SOCKET_IFNAME",
    "NVSHMEM_",
    "OMPI_MCA_",
)
# DeepSpeed 0.19.8's OpenMPI runner (deepspeed/launcher/multinode_runner.py OpenMPIRunner): the
# transport its mpirun line forces, and the file whose lines its runner exports to every rank
# (deepspeed/launcher/runner.py DEEPSPEED_ENVIRONMENT_NAME, read in ~ and .)
RUNNER_TRANSPORT = ("UCX_TLS=tcp", "^openib", "btl_tcp_if_include")
DEEPSPEED_ENV_FILE = ".deepspeed_env"
MEASURE_STEPS = 4
# seconds a rank may live on after its own destroy_process_group: a flush, a last log line
STUCK_S = 10.0
_site: Any = None  # sitecustomize, the module that loaded this one
# the env the rank started with: a write that puts a variable back to it changes nothing the
# transport read (accelerate 1.16's clear_environment() clears os.environ and restores it)
_START_ENV = dict(os.environ)
_batch: dict[str, Any] = {"loader": 0, "forward": 0, "depth": 0, "steps": 0, "hooks": [], "saves": 0}


def install(site: ModuleType) -> None:
    """Patch os now, the rest when the script imports torch or DeepSpeed."""
    global _site
    _site = site
    _patch_os()
    _register_end()
    _die_with_agent()
    site._state["on_destroy"] = _watch_shutdown
    _watch_peers()
    for name, patch in (
        ("torch.optim.optimizer", _patch_optimizer),
        ("torch.utils.data.dataloader", _patch_dataloader),
        ("torch.nn.modules.module", _patch_modules),
        ("deepspeed.runtime.engine", _patch_deepspeed),
        ("deepspeed.comm.comm", _patch_mpi_discovery),
    ):
        site.add_patch(name, patch)
    sys.addaudithook(_transport_hook)


def _outside_libraries() -> str | None:
    """file:line of the innermost caller outside site-packages (the script's own line)."""
    frame: Any = sys._getframe(2)
    stdlib = os.path.dirname(os.__file__)
    while frame is not None and (
        "-packages" in frame.f_code.co_filename or frame.f_code.co_filename.startswith(stdlib)
    ):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None


def _patch_mpi_discovery(comm: ModuleType) -> None:
    """DeepSpeed 0.19.8 deepspeed/comm/comm.py: init_distributed runs mpi_discovery where any of
    RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK is unset; it sets MASTER_ADDR to
    rank 0's first `hostname -I` address."""
    original = getattr(comm, "mpi_discovery", None)
    if original is None or getattr(original, "__runai_spec_audit__", False):
        return

    def mpi_discovery(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _site.record(
            "master-address",
            how="mpi_discovery",
            addr=os.environ.get("MASTER_ADDR"),
            where=_outside_libraries(),
        )
        return result

    mpi_discovery.__runai_spec_audit__ = True  # type: ignore[attr-defined]
    setattr(comm, "mpi_discovery", mpi_discovery)  # noqa: B010 - a module of DeepSpeed


def _transport_hook(event: str, args: tuple[Any, ...]) -> None:
    """PEP 578 audit events: `hostname -I` started, DeepSpeed's OpenMPI runner's transport
    flags on a command line, a `.deepspeed_env` opened. Fails open."""
    try:
        if event == "open" and os.path.basename(os.fsdecode(args[0])) == DEEPSPEED_ENV_FILE:
            _site.record("deepspeed-env", path=os.fsdecode(args[0]), where=_outside_libraries())
        elif event == "subprocess.Popen":
            argv = [os.fsdecode(a) for a in (args[1] if isinstance(args[1], (list, tuple)) else [args[1]])]
            if argv and os.path.basename(argv[0]) == "hostname" and "-I" in argv:
                _site.record("master-address", how="hostname -I", where=_outside_libraries())
            elif any(a in RUNNER_TRANSPORT for a in argv):
                _site.record("transport-flags", argv=argv[:16], where=_outside_libraries())
    except Exception:  # noqa: BLE001 - never in the script's way
        pass


def _samples(obj: Any, depth: int = 0) -> int:
    """The batch dimension of the first tensor in a batch (a tensor, or a tuple, list or dict
    of them), 0 where there is none."""
    shape = getattr(obj, "shape", None)
    if shape is not None and hasattr(obj, "dim"):
        return int(shape[0]) if len(shape) else 0
    if depth > 3:
        return 0
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for item in items:
        found = _samples(item, depth + 1)
        if found:
            return found
    return 0


def _measuring() -> bool:
    return int(_batch["steps"]) < MEASURE_STEPS


def _patch_dataloader(module: ModuleType) -> None:
    cls = getattr(module, "_BaseDataLoaderIter", None)
    original = getattr(cls, "__next__", None)
    if original is None or getattr(original, "__runai_spec_batch__", False):
        return

    def counted(self: Any) -> Any:
        result = original(self)
        if _measuring():
            with contextlib.suppress(Exception):  # fail open
                _batch["loader"] += _samples(result)
        return result

    counted.__runai_spec_batch__ = True  # type: ignore[attr-defined]
    counted.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__next__ = counted  # type: ignore[union-attr]


def _patch_modules(module: ModuleType) -> None:
    def pre(mod: Any, args: Any) -> None:
        _batch["depth"] += 1

    def post(mod: Any, args: Any, kwargs: Any, output: Any) -> None:
        _batch["depth"] = max(0, int(_batch["depth"]) - 1)
        if _batch["depth"] == 0:
            with contextlib.suppress(Exception):  # fail open
                _batch["forward"] += _samples(args) or _samples(kwargs)

    _batch["hooks"] = [
        module.register_module_forward_pre_hook(pre),
        module.register_module_forward_hook(post, with_kwargs=True, always_call=True),
    ]


def _patch_optimizer(module: ModuleType) -> None:
    def stepped(optimizer: Any, *_: Any) -> None:
        try:
            _batch["steps"] += 1
            if int(_batch["steps"]) <= MEASURE_STEPS:
                _site.record("batch", n=_batch["steps"], loader=_batch["loader"], forward=_batch["forward"])
                _batch["loader"] = _batch["forward"] = _batch["depth"] = 0
            if int(_batch["steps"]) == MEASURE_STEPS:
                for hook in _batch["hooks"]:  # the model runs at full speed from here on
                    hook.remove()
            saves = int(_site._state.get("saves", 0))
            if saves > int(_batch["saves"]):
                _batch["saves"] = saves
                _site.record("moved-on", n=_batch["steps"])
        except Exception:  # noqa: BLE001 - never into optimizer.step
            _site._audit_error("optimizer step")

    module.register_optimizer_step_post_hook(stepped)


def _die_with_agent() -> None:
    """A worker of torchrun's agent ends when the agent does, as in its container (the
    agent is its first process; the container's end takes every process with it): the
    kernel's parent-death signal (PR_SET_PDEATHSIG, linux/prctl.h: 1), so that a rehearsal
    stopped by SIGKILL leaves no rank running where the pod has no PID namespace."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except Exception:  # noqa: BLE001 - fail open
        _site._audit_error("parent-death signal")


def _record_stuck(after: str) -> None:
    """The `stuck` record: where the main thread waits, the non-daemon threads still running."""
    try:
        main = sys._current_frames().get(threading.main_thread().ident or 0)
        frames = traceback.extract_stack(main)[-4:] if main is not None else []
        _site.record(
            "stuck",
            after=after,
            seconds=STUCK_S,
            waits_in=[f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in frames],
            threads=[
                t.name
                for t in threading.enumerate()
                if not t.daemon and t is not threading.main_thread() and t.is_alive()
            ],
        )
    except Exception:  # noqa: BLE001 - fail open
        _site._audit_error("shutdown watch")


def _watch_shutdown() -> None:
    """After destroy_process_group: a daemon thread (it never holds the process) that records
    `stuck` if the process still lives STUCK_S seconds later."""

    def watch() -> None:
        threading.Event().wait(STUCK_S)
        if not _batch.get("stuck"):
            _batch["stuck"] = True
            _record_stuck("destroy_process_group")

    if not _batch.get("watching"):
        _batch["watching"] = True
        threading.Thread(target=watch, name="runai-spec-shutdown-watch", daemon=True).start()


def _peers_exited(folder: str, rank: int, world: int, since: float) -> bool:
    """Every other rank's newest audit file ends with its `exit` (after SINCE): read from the
    files' last lines only, to start the watch (the record it leads to is signed)."""
    newest: dict[int, tuple[float, str]] = {}
    for name in os.listdir(folder):
        parts = name.split(".")
        if not (name.startswith("rank-") and name.endswith(".jsonl") and parts[0][5:].isdigit()):
            continue
        path = os.path.join(folder, name)
        when = os.path.getmtime(path)
        if when > newest.get(int(parts[0][5:]), (0.0, ""))[0]:
            newest[int(parts[0][5:])] = (when, path)
    for peer in range(world):
        if peer == rank:
            continue
        if peer not in newest:
            return False
        with open(newest[peer][1], "rb") as fh:
            fh.seek(max(0, os.path.getsize(newest[peer][1]) - 4096))
            last = fh.read().decode(errors="replace").rstrip("\n").rsplit("\n", 1)[-1]
        body = json.loads(last.partition(" ")[2] or "{}")
        if body.get("event") != "exit" or float(body.get("t") or 0) < since:
            return False
    return True


def _watch_peers() -> None:
    """A daemon thread that records `stuck` once this rank has lived STUCK_S seconds after
    every other rank of its job exited (a rank waiting on peers that are gone)."""
    folder, rank, world = os.environ.get(_site.ENV_DIR), _site._int_env("RANK"), _site._int_env("WORLD_SIZE")
    if not folder or rank is None or not world or world < 2:
        return
    since = time.time()

    def watch() -> None:
        quiet_since: float | None = None
        while not _batch.get("stuck"):
            threading.Event().wait(1.0)
            try:
                gone = _peers_exited(folder, rank, world, since)
            except (OSError, ValueError):
                gone = False
            quiet_since = (quiet_since or time.monotonic()) if gone else None
            if quiet_since is not None and time.monotonic() - quiet_since >= STUCK_S:
                _batch["stuck"] = True
                _record_stuck("every other rank exited")

    threading.Thread(target=watch, name="runai-spec-peer-watch", daemon=True).start()


def _register_end() -> None:
    """An `end` record once the script's main code is done, before teardown: Python calls
    threading's exit callbacks (threading._register_atexit, CPython 3.9+) before the atexit
    handlers and the interpreter's finalisation, where a crash in teardown would strike."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return

    def end() -> None:
        state = _site._state
        code = state["exit_code"]
        _site.record(
            "end",
            exit_code=code if code is not None else 1 if state["exception"] else 0,
            exception=state["exception"],
        )

    register(end)


def _deepspeed_dir(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The folder DeepSpeed's engine writes one checkpoint into: <save_dir>/<tag>, the tag
    `global_step<N>` by default (deepspeed/runtime/engine.py, save_checkpoint)."""
    save_dir = _site._path_of(_site._arg(args, kwargs, 1, "save_dir"))
    tag = _site._arg(args, kwargs, 2, "tag")
    if tag is None:
        tag = f"global_step{getattr(args[0], 'global_steps', '')}" if args else None
    return os.path.join(save_dir, str(tag)) if save_dir and tag is not None else save_dir


def _engine_steps(args: Sequence[Any]) -> Any:
    return getattr(args[0], "global_steps", None) if args else None


def _patch_deepspeed(engine: ModuleType) -> None:
    cls = getattr(engine, "DeepSpeedEngine", None)
    if cls is None:
        return
    _site._wrap(
        cls,
        "save_checkpoint",
        event="save",
        before=lambda *a, **k: {
            "api": "deepspeed.save_checkpoint",
            "path": _deepspeed_dir(a, k),
            "sharded": True,
            "step": _engine_steps(a),
        },
        # it returns True once every rank's files and rank 0's `latest` are written
        after=lambda result, *a, **k: _site._remember(_deepspeed_dir(a, k), result is not False),
    )
    _site._wrap(
        cls,
        "load_checkpoint",
        event="load",
        before=lambda *a, **k: {
            "api": "deepspeed.load_checkpoint",
            "path": _site._path_of(_site._arg(a, k, 1, "load_dir")),
        },
        after=lambda result, *a, **k: {"step": _engine_steps(a)},
    )


def _renamed(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
    if getattr(_site._tls, "inside", False):
        return None  # DCP's own .metadata.tmp -> .metadata, inside its save
    src = _site._path_of(_site._arg(args, kwargs, 0, "src"))
    dst = _site._path_of(_site._arg(args, kwargs, 1, "dst"))
    saved = _site._saved
    if src is None or not any(p == src or p.startswith(src.rstrip("/") + "/") for p in saved):
        return None
    return {"src": src, "dst": dst}


# os.environ's own code: os.py, or its frozen copy in Python 3.11+ ("<frozen os>"), and the
# MutableMapping methods (setdefault, update) it inherits
_STDLIB_ENV = ("os.py", "_collections_abc.py", "<frozen os>", "<frozen _collections_abc>")


def _env_write(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
    name = args[1] if len(args) > 2 else args[0] if args else None  # __setitem__(self, k, v)
    name = os.fsdecode(name) if isinstance(name, (str, bytes)) else None
    if name is None or not name.startswith(TRANSPORT_PREFIXES):
        return None
    caller: Any = sys._getframe(2)  # past the wrapper: who set it
    if len(args) == 2 and caller is not None and caller.f_code.co_filename.endswith(_STDLIB_ENV):
        return None  # os.environ's own putenv, inside the __setitem__ recorded already
    while caller is not None and caller.f_code.co_filename.endswith(_STDLIB_ENV):
        caller = caller.f_back
    value = os.fsdecode(args[-1]) if isinstance(args[-1], (str, bytes)) else str(args[-1])
    if _START_ENV.get(name) == value:
        return None
    where = f"{caller.f_code.co_filename}:{caller.f_lineno}" if caller is not None else None
    return {"name": name, "value": value[:200], "where": where}


def _patch_os() -> None:
    for name in ("rename", "replace"):
        _wrap_if(os, name, "rename", _renamed)
    _wrap_if(type(os.environ), "__setitem__", "env-set", _env_write)
    _wrap_if(os, "putenv", "env-set", _env_write)


def _wrap_if(owner: Any, attr: str, event: str, fields: Callable[..., dict[str, Any] | None]) -> None:
    """owner.attr recording `event` after the call, only where `fields` returns something."""
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "__runai_spec_audit__", False):
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            found = fields(*args, **kwargs)
        except Exception:  # noqa: BLE001
            found = None
            _site._audit_error(f"{attr} (fields)")
        result = original(*args, **kwargs)
        if found:
            _site.record(event, **found)
        return result

    wrapper.__runai_spec_audit__ = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", attr)
    setattr(owner, attr, wrapper)


def wandb_dir(result: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The folder wandb keeps its run in: the run's files folder, else `dir=`, $WANDB_DIR or
    ./wandb (wandb/sdk/wandb_settings.py), online or offline."""
    folder = getattr(result, "dir", None) or kwargs.get("dir") or os.environ.get("WANDB_DIR") or "wandb"
    mode = str(kwargs.get("mode") or os.environ.get("WANDB_MODE") or "")
    return {"path": _site._path_of(folder), "mode": mode}


def mlflow_store(mlflow: ModuleType) -> dict[str, Any]:
    """mlflow's tracking store: a local folder (./mlruns by default, or a file: URI) or a server."""
    uri = str(mlflow.get_tracking_uri() or "mlruns")
    if "://" in uri and not uri.startswith("file:"):
        return {"tracking": uri}
    return {"tracking": uri, "path": _site._path_of(uri.removeprefix("file://").removeprefix("file:"))}
