"""The audit layer's step timer: each optimizer step's time, split into data, checkpoint, collectives.

sitecustomize.py loads it (by this name, unique on the ranks' sys.path) and hands it its
`record` function and its table of import-time patches. It keeps sitecustomize's rules: it
changes nothing the script computes (every wrapper calls the original with the same arguments
and returns or raises what it does; the step boundary is a global optimizer post-hook that only
reads a clock), it fails open, and it uses only the stdlib until the script imports torch.

What it times, per rank, on the thread that steps the optimizer (time on other threads, such as
DataLoader workers or an async checkpoint's writer, overlaps the step and is not added):
- a step: from one `optimizer.step()` returning to the next (the first optimizer the script
  steps; torch's global step post-hook, torch/optim/optimizer.py);
- data: inside `_BaseDataLoaderIter.__next__` (torch/utils/data/dataloader.py), the wait for the
  next batch from any `DataLoader`;
- checkpoint: inside `torch.save` to a file, `torch.distributed.checkpoint` save, async_save
  (its blocking part) and save_state_dict, and safetensors' save_file/save_model;
- collectives: inside the `torch.distributed` collective calls (COLLECTIVES) and the Python
  waits on their handles (`Work.wait`). With NCCL these return once the work is queued on the
  GPU, so this is the host's blocking time only; DDP's gradient all-reduce runs inside backward
  in C++ and is not seen here (it counts as compute; the scaling row shows its cost).
The outermost of these on the stack counts once (DCP's own all_gather inside a save is
checkpoint time). On a GPU it also samples the device's utilisation (NVML's utilization.gpu:
the share of time a kernel ran, device-wide) from the fourth step on, and the peak of
`torch.cuda.max_memory_allocated`.

Records: `steps` every FLUSH_STEPS steps or FLUSH_S seconds and at exit, each with the new
steps as `[step_s, data_s, checkpoint_s, collective_s]` and the GPU figures so far."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import io
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "monitored_barrier",
)
CHECKPOINT_SAVES = {
    "torch.distributed.checkpoint": ("save", "async_save", "save_state_dict"),
    "safetensors.torch": ("save_file", "save_model"),
}
GPU_AFTER_STEPS = 3  # the sampler starts after the warm-up steps the bottleneck row skips
SAMPLE_S = 0.1
FLUSH_STEPS = 20
FLUSH_S = 2.0

Record = Callable[..., None]
_tls = threading.local()
_state: dict[str, Any] = {
    "record": None,
    "thread": None,  # the thread that steps the optimizer
    "optimizer": None,  # id() of the first optimizer stepped
    "last": None,  # perf_counter at the last step boundary
    "acc": {"data": 0.0, "checkpoint": 0.0, "collective": 0.0},
    "steps": [],  # not yet recorded
    "count": 0,
    "flushed": 0.0,
    "gpu": None,  # the sampler
    "gpu_at_step": (0.0, 0),  # the sampler's (sum, samples) at the last step boundary
    "peak": None,
}


def _counts_here() -> bool:
    owner = _state["thread"]
    ident = threading.get_ident()
    return ident == owner if owner is not None else ident == threading.main_thread().ident


def _timed(kind: str, original: Callable[..., Any], *, when: Callable[..., bool] | None = None) -> Any:
    """`original`, with the time its outermost call takes on the step's thread added to `kind`."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nested = getattr(_tls, "depth", 0) or not _counts_here()
        if nested or (when is not None and not _safe(when, args, kwargs)):
            return original(*args, **kwargs)
        _tls.depth = 1
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _tls.depth = 0
            _state["acc"][kind] += time.perf_counter() - start

    wrapper.__runai_spec_timed__ = True  # type: ignore[attr-defined]
    return wrapper


def _safe(when: Callable[..., bool], args: Any, kwargs: Any) -> bool:
    try:
        return bool(when(*args, **kwargs))
    except Exception:  # noqa: BLE001 - fail open: then it is not timed
        return False


def _time(owner: Any, attr: str, kind: str, when: Callable[..., bool] | None = None) -> None:
    original = getattr(owner, attr, None)
    if original is None or getattr(original, "__runai_spec_timed__", False):
        return
    with contextlib.suppress(Exception):  # fail open: a class that cannot be patched is not timed
        setattr(owner, attr, _timed(kind, original, when=when))


def _to_file(*args: Any, **kwargs: Any) -> bool:
    """torch.save to a path or a named file: a checkpoint; into a buffer it is not."""
    target = kwargs.get("f", args[1] if len(args) > 1 else None)
    return not isinstance(target, io.IOBase) or isinstance(getattr(target, "name", None), str)


def _on_step(optimizer: Any, *_: Any) -> None:
    """The global optimizer post-hook: close one step. Never raises into optimizer.step."""
    try:
        if _state["thread"] is None:
            _state["thread"] = threading.get_ident()
            _state["optimizer"] = id(optimizer)
        if threading.get_ident() != _state["thread"] or id(optimizer) != _state["optimizer"]:
            return
        now = time.perf_counter()
        acc = _state["acc"]
        if _state["last"] is not None:
            _state["steps"].append(
                [
                    round(now - _state["last"], 6),
                    *(round(acc[k], 6) for k in ("data", "checkpoint", "collective")),
                ]
            )
        _state["acc"] = {"data": 0.0, "checkpoint": 0.0, "collective": 0.0}
        _state["last"] = now
        _state["count"] += 1
        if _state["count"] == GPU_AFTER_STEPS + 1:
            _start_gpu_sampler()
        sampler = _state["gpu"]
        if sampler is not None:
            _state["gpu_at_step"] = (sampler.total, sampler.samples)
        if _state["count"] > GPU_AFTER_STEPS:
            _state["peak"] = _peak_memory()
        if len(_state["steps"]) >= FLUSH_STEPS or time.monotonic() - _state["flushed"] >= FLUSH_S:
            flush()
    except Exception:  # noqa: BLE001 - fail open
        pass


def _at_exit() -> None:
    """The last steps recorded; the sampler stops before the interpreter shuts down."""
    if _state["gpu"] is not None:
        _state["gpu"].stopped = True
    flush()


def flush() -> None:
    """Record the steps closed since the last record, with the GPU figures so far."""
    steps, _state["steps"] = _state["steps"], []
    _state["flushed"] = time.monotonic()
    record = _state["record"]
    if not steps or record is None:
        return
    total, samples = _state["gpu_at_step"]
    record(
        "steps",
        first=_state["count"] - len(steps) - 1,
        times=steps,
        gpu_busy=round(total / samples / 100.0, 4) if samples else None,
        gpu_samples=samples,
        gpu_source=None if _state["gpu"] is None else _state["gpu"].source,
        peak_memory_bytes=_state["peak"],
    )


def _peak_memory() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.max_memory_allocated())
    except Exception:  # noqa: BLE001
        return None
    return None


class _Sampler(threading.Thread):
    """Reads the device's utilisation every SAMPLE_S seconds, in the background."""

    def __init__(self, read: Callable[[], float | None], source: str) -> None:
        super().__init__(name="runai-spec-gpu-sampler", daemon=True)
        self.read, self.source = read, source
        self.total, self.samples = 0.0, 0
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            try:
                value = self.read()
            except Exception:  # noqa: BLE001 - a failing read ends the sampling, not the script
                return
            if value is not None:
                self.total, self.samples = self.total + value, self.samples + 1
            time.sleep(SAMPLE_S)


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]  # nvml.h nvmlUtilization_t


def _nvml_reader(uuid: str) -> Callable[[], float | None] | None:
    """NVML's utilization.gpu of the device with this UUID, read through libnvidia-ml."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    if lib.nvmlInit_v2() != 0:
        return None
    handle = ctypes.c_void_p()
    key = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    if lib.nvmlDeviceGetHandleByUUID(key.encode(), ctypes.byref(handle)) != 0:
        return None

    def read() -> float | None:
        util = _Utilization()
        return float(util.gpu) if lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == 0 else None

    return read


def _start_gpu_sampler() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    index = torch.cuda.current_device()
    read: Callable[[], float | None] | None = None
    source = "NVML utilization.gpu"
    try:
        read = _nvml_reader(str(torch.cuda.get_device_properties(index).uuid))
    except Exception:  # noqa: BLE001 - no libnvidia-ml here: torch's own reading (pynvml)
        read = None
    if read is None:
        try:
            torch.cuda.utilization(index)
            read, source = (lambda: float(torch.cuda.utilization(index))), "torch.cuda.utilization"
        except Exception:  # noqa: BLE001
            return
    _state["gpu"] = _Sampler(read, source)
    _state["gpu"].start()


def _patch_torch(torch: ModuleType) -> None:
    _time(torch, "save", "checkpoint", when=_to_file)
    work = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)
    if work is not None:
        _time(work, "wait", "collective")


def _patch_optimizer(module: ModuleType) -> None:
    module.register_optimizer_step_post_hook(_on_step)


def _patch_dataloader(module: ModuleType) -> None:
    _time(module._BaseDataLoaderIter, "__next__", "data")


def _patch_distributed(dist: ModuleType) -> None:
    for name in COLLECTIVES:
        _time(dist, name, "collective")


def _patch_saves(names: tuple[str, ...]) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        for name in names:
            _time(module, name, "checkpoint")

    return patch


def install(record: Record, add_patch: Callable[[str, Callable[[ModuleType], None]], None]) -> None:
    """Add this module's patches after sitecustomize's own for each module (its `add_patch`:
    one failing does not stop the timing); record through `record`; flush the last steps at exit."""
    _state["record"] = record
    _state["flushed"] = time.monotonic()
    mine: dict[str, Callable[[ModuleType], None]] = {
        "torch": _patch_torch,
        "torch.optim.optimizer": _patch_optimizer,
        "torch.utils.data.dataloader": _patch_dataloader,
        "torch.distributed": _patch_distributed,
        **{name: _patch_saves(attrs) for name, attrs in CHECKPOINT_SAVES.items()},
    }
    for name, patch in mine.items():
        add_patch(name, patch)
    atexit.register(_at_exit)
