"""The rehearsal's audit layer, loaded at start-up in every rank of `rehearse --own-script`.

Python loads it because this folder is first on the ranks' PYTHONPATH; runai-spec never imports it.

It records, one JSON object per line in `$RUNAI_SPEC_AUDIT_DIR/rank-<RANK>.<pid>.jsonl` (each
line `<HMAC-SHA256 of the JSON under the rehearsal's key> <JSON>`), what
the site guide asks of a training script: the process group (backend, rank, local rank, world
size), the device each rank uses, checkpoint saves and loads (`torch.save`/`torch.load`,
`torch.distributed.checkpoint`, `safetensors`), metric writers (TensorBoard, wandb, mlflow),
`destroy_process_group` and how the process ended.

Rules it keeps:
- It changes nothing the script computes, prints or returns: every wrapper calls the original
  with the same arguments and returns its result or raises its exception unchanged, and the
  audit writes only to its own files.
- It fails open: an error of the audit itself becomes an `audit-error` record, never an
  exception in the script.
- Only stdlib at start-up; torch and the others are patched when the script imports them
  (an import hook), so a script that never imports them pays nothing.
- Only rank processes record (LOCAL_RANK set), not torchrun's agent.
- Only its own records count (issue 23): the rehearsal gives it a key for this run
  ($RUNAI_SPEC_AUDIT_KEY), taken out of a rank's environment before the script runs, and the
  rehearsal drops (and fails on) every line whose HMAC does not verify, such as one a script
  wrote into the audit folder itself. Code in the same process that digs the key out of this
  module or of /proc can still forge: the rehearsal is the researcher's own check.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import hmac
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

ENV_DIR = "RUNAI_SPEC_AUDIT_DIR"
ENV_KEY = "RUNAI_SPEC_AUDIT_KEY"
# A rank takes the key out of its environment (the script's os.environ and the processes it
# starts never see it); torchrun's agent keeps it for the ranks it starts and restarts.
_W = "OMPI_COMM_WORLD_"  # a rank of OpenMPI's mpirun (4.1 mpirun(1)): its names where torchrun's are unset
MPI_NAMES = {"RANK": f"{_W}RANK", "LOCAL_RANK": f"{_W}LOCAL_RANK", "WORLD_SIZE": f"{_W}SIZE"}
_IS_RANK = "LOCAL_RANK" in os.environ or MPI_NAMES["LOCAL_RANK"] in os.environ
_KEY = (os.environ.pop(ENV_KEY, "") if _IS_RANK else os.environ.get(ENV_KEY, "")).encode()
# the step a checkpoint holds, by the keys scripts use (lower-cased): Lightning's `global_step`,
# pytorch/examples' `EPOCHS_RUN` (ddp-tutorial-series), fairseq's `num_updates`
STEP_KEYS = ("step", "global_step", "iteration", "iter", "epoch", "epochs_run", "num_updates")
STEP_WORDS = frozenset({"step", "steps", "epoch", "epochs", "iter", "iters", "iteration", "iterations"})
NOT_STEP_WORDS = frozenset(
    {"max", "total", "warmup", "every", "interval", "freq", "per", "eval", "save", "log"}
)
_lock = threading.Lock()
_tls = threading.local()
NESTED_EVENTS = ("save", "load")
_saved: set[str] = set()  # the checkpoints this process wrote, for their renames
_state: dict[str, Any] = {"exit_code": None, "exception": None, "saves": 0}


def _path_of(target: Any) -> str | None:
    """The absolute path a save/load names, None for an in-memory buffer."""
    try:
        if isinstance(target, (str, bytes, os.PathLike)):
            return os.path.abspath(os.fsdecode(target))
        name = getattr(target, "name", None)
        if isinstance(name, str):
            return os.path.abspath(name)
        path = getattr(target, "path", None)  # DCP's FileSystemWriter/Reader
        if isinstance(path, (str, os.PathLike)):
            return os.path.abspath(os.fspath(path))
    except Exception:  # noqa: BLE001 - fail open
        return None
    return None


def _step_of(obj: Any) -> int | None:
    """The training step a checkpoint carries, where it says so with a plain int under a key
    of any case: first a known name (`step`, `global_step`, ..., `EPOCHS_RUN`, `Epoch`), then
    any key with a word of STEP_WORDS and none of NOT_STEP_WORDS (`completed_steps`, not
    `max_steps`)."""
    if not isinstance(obj, dict):
        return None
    ints = {
        str(k).lower(): v
        for k, v in obj.items()
        if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
    }
    for key in STEP_KEYS:
        if key in ints:
            return ints[key]
    for key, value in ints.items():
        words = set(key.replace("-", "_").split("_"))
        if words & STEP_WORDS and not words & NOT_STEP_WORDS:
            return value
    return None


def _completed(target: Any, *, folder: bool = False) -> dict[str, Any]:
    """Whether a save that returned left a whole checkpoint: a file written and closed
    (torch.save and safetensors to a path; into the script's own open file it is whole once
    the script closes it), or DCP's folder with the `.metadata` its coordinator renames into
    place last (`__<rank>.metadata` without coordination; torch 2.13
    torch/distributed/checkpoint/filesystem.py, `finish`)."""
    path = _path_of(target)
    if path is None:
        return {"complete": False}
    if folder:
        names = os.listdir(path) if os.path.isdir(path) else []
        done = any(n == ".metadata" or (n.startswith("__") and n.endswith(".metadata")) for n in names)
    elif isinstance(target, (str, bytes, os.PathLike)):
        done = os.path.isfile(path)
    else:
        done = True
    return _remember(path, done)


def _remember(path: str | None, done: bool) -> dict[str, Any]:
    """A whole checkpoint at PATH: counted (runai_spec_script.py's `moved-on`), and its renames followed."""
    if done and path:
        _saved.add(path)
        _state["saves"] += 1
    return {"complete": done}


def _when_done(result: Any, target: Any, api: str) -> dict[str, Any]:
    """DCP's async_save returns before the checkpoint is whole: a record when its upload ends."""
    future = getattr(result, "upload_completion", result)

    def done(_: Any) -> None:
        record("save-complete", api=api, path=_path_of(target), **_completed(target, folder=True))

    try:
        future.add_done_callback(done)
    except Exception:  # noqa: BLE001 - no future: nothing to wait for
        return {"complete": False, "async": True}
    return {"complete": False, "async": True}


def record(event: str, **fields: Any) -> None:
    """Append one record; never raises."""
    folder = os.environ.get(ENV_DIR)
    # a process the rank started afresh (a spawned worker, an exec) has no key: what it would
    # write could not count, and unsigned lines would read as written by someone else
    if not folder or not _KEY:
        return
    try:
        data = {
            "event": event,
            "t": time.time(),
            "pid": os.getpid(),
            "rank": _int_env("RANK"),
            "local_rank": _int_env("LOCAL_RANK"),
            "world_size": _int_env("WORLD_SIZE"),
            "attempt": _int_env("RUNAI_SPEC_ATTEMPT") or 0,
            "restart": _int_env("TORCHELASTIC_RESTART_COUNT") or 0,
            "pod": os.environ.get("RUNAI_SPEC_POD"),
            **fields,
        }
        body = json.dumps(data, default=str)
        line = f"{hmac.new(_KEY, body.encode(), hashlib.sha256).hexdigest()} {body}\n"
        name = os.path.join(folder, f"rank-{data['rank']}.{os.getpid()}.jsonl")
        with _lock, open(name, "a", encoding="utf-8") as fh:
            fh.write(line)
    except Exception:  # noqa: BLE001 - fail open, and an audit that cannot write stays silent
        pass


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ.get(name) or os.environ[MPI_NAMES.get(name, name)])
    except (KeyError, ValueError):
        return None


def _audit_error(where: str) -> None:
    record("audit-error", where=where, error=traceback.format_exc(limit=3)[-500:])


def _wrap(
    owner: Any,
    attr: str,
    before: Callable[..., dict[str, Any] | None] | None = None,
    after: Callable[..., dict[str, Any] | None] | None = None,
    event: str = "",
) -> None:
    """Replace owner.attr by a wrapper that records `event` with the fields `before(*args)`
    and `after(result, *args)` return; the call itself is the original's, unchanged."""
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "__runai_spec_audit__", False):
        return

    nests = event in NESTED_EVENTS

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if nests and getattr(_tls, "inside", False):
            # a save or load inside another (DCP's own torch.save into buffers, DeepSpeed's
            # torch.save of each shard) is part of it, not a checkpoint of the script's own
            return original(*args, **kwargs)
        fields: dict[str, Any] = {}
        if before is not None:
            try:
                fields.update(before(*args, **kwargs) or {})
            except Exception:  # noqa: BLE001
                _audit_error(f"{attr} (before)")
        if event == "save":
            record("save-start", **fields)  # a fault between this and the save is mid-save
        if nests:
            _tls.inside = True
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            record(event, failed=f"{type(exc).__name__}: {exc}"[:300], **fields)
            raise
        finally:
            if nests:
                _tls.inside = False
        if after is not None:
            try:
                fields.update(after(result, *args, **kwargs) or {})
            except Exception:  # noqa: BLE001
                _audit_error(f"{attr} (after)")
        record(event, **fields)
        return result

    wrapper.__runai_spec_audit__ = True  # type: ignore[attr-defined]
    try:
        setattr(owner, attr, wrapper)
    except Exception:  # noqa: BLE001
        _audit_error(f"patch {attr}")


def _arg(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else args[index] if len(args) > index else None


def _device() -> dict[str, Any]:
    """The CUDA device this process uses (its UUID), or the CPU."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            index = torch.cuda.current_device()
            uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", index))
            return {"device": "cuda", "device_index": index, "device_uuid": uuid}
    except Exception:  # noqa: BLE001
        _audit_error("device")
    return {"device": "cpu"}


def _patch_torch(torch: ModuleType) -> None:
    _wrap(
        torch,
        "save",
        event="save",
        before=lambda *a, **k: {
            "api": "torch.save",
            "path": _path_of(_arg(a, k, 1, "f")),
            "step": _step_of(_arg(a, k, 0, "obj")),
        },
        after=lambda result, *a, **k: _completed(_arg(a, k, 1, "f")),
    )
    _wrap(
        torch,
        "load",
        event="load",
        before=lambda *a, **k: {"api": "torch.load", "path": _path_of(_arg(a, k, 0, "f"))},
        after=lambda result, *a, **k: {"step": _step_of(result)},
    )
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        _wrap(
            cuda,
            "set_device",
            event="set-device",
            before=lambda *a, **k: {"requested": str(_arg(a, k, 0, "device"))},
            after=lambda result, *a, **k: _device(),
        )


def _patch_distributed(dist: ModuleType) -> None:
    def init_before(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"requested_backend": str(_arg(args, kwargs, 0, "backend"))}

    def init_after(result: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {
            "backend": str(dist.get_backend()),
            "group_rank": dist.get_rank(),
            "group_world_size": dist.get_world_size(),
            **_device(),
        }

    for owner in (dist, getattr(dist, "distributed_c10d", None)):
        if owner is not None:
            _wrap(
                owner, "init_process_group", event="init-process-group", before=init_before, after=init_after
            )
            _wrap(owner, "destroy_process_group", event="destroy-process-group", after=_destroyed)


def _destroyed(result: Any, *args: Any, **kwargs: Any) -> None:
    """The process group is gone: the shutdown watch (runai_spec_script.py) starts counting."""
    hook = _state.get("on_destroy")
    if callable(hook):
        hook()


def _dcp_target(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    return (
        kwargs.get("checkpoint_id")
        or kwargs.get("storage_writer")
        or kwargs.get("storage_reader")
        or (args[1] if len(args) > 1 else None)
    )


def _dcp_before(api: str) -> Callable[..., dict[str, Any]]:
    def before(*args: Any, **kwargs: Any) -> dict[str, Any]:
        target = _dcp_target(args, kwargs)
        return {
            "api": api,
            "path": _path_of(target),
            "sharded": True,
            "step": _step_of(_arg(args, kwargs, 0, "state_dict")),
        }

    return before


def _patch_dcp(dcp: ModuleType) -> None:
    for name in ("save", "save_state_dict"):
        _wrap(
            dcp,
            name,
            event="save",
            before=_dcp_before(f"torch.distributed.checkpoint.{name}"),
            after=lambda result, *a, **k: _completed(_dcp_target(a, k), folder=True),
        )
    _wrap(
        dcp,
        "async_save",
        event="save",
        before=_dcp_before("torch.distributed.checkpoint.async_save"),
        after=lambda result, *a, **k: _when_done(
            result, _dcp_target(a, k), "torch.distributed.checkpoint.async_save"
        ),
    )
    for name in ("load", "load_state_dict"):
        _wrap(
            dcp,
            name,
            event="load",
            before=_dcp_before(f"torch.distributed.checkpoint.{name}"),
            after=lambda result, *a, **k: {"step": _step_of(_arg(a, k, 0, "state_dict"))},
        )


def _patch_safetensors(st: ModuleType) -> None:
    _wrap(
        st,
        "save_file",
        event="save",
        before=lambda *a, **k: {"api": "safetensors.save_file", "path": _path_of(_arg(a, k, 1, "filename"))},
        after=lambda result, *a, **k: _completed(_arg(a, k, 1, "filename")),
    )
    _wrap(
        st,
        "save_model",
        event="save",
        before=lambda *a, **k: {"api": "safetensors.save_model", "path": _path_of(_arg(a, k, 1, "filename"))},
        after=lambda result, *a, **k: _completed(_arg(a, k, 1, "filename")),
    )
    _wrap(
        st,
        "load_file",
        event="load",
        before=lambda *a, **k: {"api": "safetensors.load_file", "path": _path_of(_arg(a, k, 0, "filename"))},
    )
    _wrap(
        st,
        "load_model",
        event="load",
        before=lambda *a, **k: {"api": "safetensors.load_model", "path": _path_of(_arg(a, k, 1, "filename"))},
    )


def _more(name: str, *args: Any) -> dict[str, Any]:
    """A helper of runai_spec_script.py (beside this file), once it is loaded."""
    module = sys.modules.get("runai_spec_script")
    return dict(getattr(module, name)(*args)) if module is not None else {}


def _metrics(api: str, path_arg: tuple[int, str] | None = None) -> Callable[..., dict[str, Any]]:
    def before(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"api": api}
        if path_arg is not None:
            value = _arg(args, kwargs, *path_arg)
            out["path"] = _path_of(value) if value is not None else None
        return out

    return before


def _patch_tensorboard(tb: ModuleType) -> None:
    writer = getattr(tb, "SummaryWriter", None)
    if writer is not None:
        # args[0] is the writer itself: the log dir is the second positional argument
        # where it writes: the folder it chose (./runs/<date>_<host> by default)
        _wrap(
            writer,
            "__init__",
            event="metrics",
            before=_metrics(f"{tb.__name__}.SummaryWriter", (1, "log_dir")),
            after=lambda result, *a, **k: {
                "path": _path_of(getattr(a[0], "log_dir", None) or getattr(a[0], "logdir", None))
            },
        )


def _patch_wandb(wandb: ModuleType) -> None:
    _wrap(
        wandb,
        "init",
        event="metrics",
        before=_metrics("wandb.init"),
        after=lambda result, *a, **k: _more("wandb_dir", result, k),
    )


def _patch_mlflow(mlflow: ModuleType) -> None:
    _wrap(
        mlflow,
        "start_run",
        event="metrics",
        before=_metrics("mlflow.start_run"),
        after=lambda result, *a, **k: _more("mlflow_store", mlflow),
    )
    for name in ("log_metric", "log_metrics"):
        _wrap(mlflow, name, event="metrics", before=_metrics(f"mlflow.{name}"))


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "torch": _patch_torch,
    "torch.distributed": _patch_distributed,
    "torch.distributed.checkpoint": _patch_dcp,
    # where dcp.save/load are defined: patched before the package re-exports them, so that
    # `from torch.distributed.checkpoint.state_dict_saver import save` is seen too
    "torch.distributed.checkpoint.state_dict_saver": _patch_dcp,
    "torch.distributed.checkpoint.state_dict_loader": _patch_dcp,
    "safetensors.torch": _patch_safetensors,
    "torch.utils.tensorboard": _patch_tensorboard,
    "tensorboardX": _patch_tensorboard,
    "wandb": _patch_wandb,
    "mlflow": _patch_mlflow,
}


def add_patch(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Patch module NAME with PATCH too, after the patches already listed for it (the layer's
    other modules add theirs here); one failing patch does not stop the next."""
    first = PATCHES.get(name)

    def both(module: ModuleType) -> None:
        try:
            if first is not None:
                first(module)
        finally:
            patch(module)

    PATCHES[name] = both


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the patch; everything else is the original's."""

    def __init__(self, inner: Any, patch: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._patch = patch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        try:
            self._patch(module)
        except Exception:  # noqa: BLE001
            _audit_error(f"patch {module.__name__}")


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the patched modules with the other finders and wraps their loader."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader, patch)
                    return spec
        except Exception:  # noqa: BLE001
            _audit_error(f"find {name}")
        return None


def _on_exit() -> None:
    code = _state["exit_code"]
    if code is None:
        code = 1 if _state["exception"] else 0
    record("exit", exit_code=code, exception=_state["exception"], **_device())


def _patch_exit() -> None:
    original_exit = sys.exit

    def audited_exit(status: Any = None) -> Any:
        _state["exit_code"] = 0 if status is None else status if isinstance(status, int) else 1
        return original_exit(status)

    sys.exit = audited_exit
    original_hook = sys.excepthook

    def audited_hook(kind: Any, value: Any, tb: Any) -> None:
        try:
            if not issubclass(kind, SystemExit):
                _state["exception"] = f"{kind.__name__}: {value}"[:500]
        except Exception:  # noqa: BLE001
            pass
        original_hook(kind, value, tb)

    sys.excepthook = audited_hook


def _missing_entry(argv: Sequence[str]) -> None:
    """A script file that does not exist (`command: [trian.py]`): Python prints "can't open
    file" and exits 2 after this layer ran, and no code of the script runs; without this, its
    records would say it exited 0 (issue 42 item 3)."""
    entry = argv[0] if argv else ""
    if entry and not entry.startswith("-") and not os.path.exists(entry):
        _state["exit_code"] = 2
        _state["exception"] = f"can't open file {os.path.abspath(entry)!r}: No such file or directory"


def _chain_next_sitecustomize() -> None:
    """A sitecustomize of the image's own, later on sys.path, still runs (this one shadows it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _install() -> None:
    if os.environ.get(ENV_DIR) and _IS_RANK:
        try:
            os.makedirs(os.environ[ENV_DIR], exist_ok=True)
            sys.meta_path.insert(0, _Finder())
            _patch_exit()
            _missing_entry(list(getattr(sys, "argv", []) or []))
            atexit.register(_on_exit)
            record("start", cwd=os.getcwd(), argv=list(getattr(sys, "argv", []) or []))
        except Exception:  # noqa: BLE001
            _audit_error("install")
        try:  # renames, transport variables, DeepSpeed, samples per step (beside this file)
            importlib.import_module("runai_spec_script").install(sys.modules[__name__])
        except Exception:  # noqa: BLE001
            _audit_error("install script records")
        try:  # the step timer of the bottleneck row (runai_spec_steps.py, beside this file)
            importlib.import_module("runai_spec_steps").install(record, add_patch)
        except Exception:  # noqa: BLE001
            _audit_error("install step timer")
    try:
        _chain_next_sitecustomize()
    except Exception:  # noqa: BLE001
        _audit_error("chain sitecustomize")


_install()
