"""Argv rewriting: a container's launcher and its flags, apart from the training entry point."""

import os
import posixpath
import re
from collections.abc import Sequence

from ..errors import InputError
from ..records import Record
from .accelerate import BOOLEAN_FLAGS as ACCELERATE_BOOLEAN
from .accelerate import NO_PYTHON_FLAG as ACCELERATE_NO_PYTHON
from .accelerate import PROGRAM as ACCELERATE_PROGRAM

ACCELERATE = "accelerate"  # split_command's kind of `accelerate launch ...`
ACCELERATE_MODULE = "accelerate.commands.launch"  # what `accelerate launch` runs (its main())

_TORCHRUN_BOOLEAN = {
    "--standalone",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "-m",
    "--module",
}
_PYTHON_WITH_VALUE = {"-X", "-W", "-c"}
# DeepSpeed's own launcher (a command's first word validate refuses, whose flags its hint takes
# off): its flags that take no value (DeepSpeed 0.19.8 deepspeed/launcher/runner.py
# parse_args, the store_true ones); every other flag of it takes one (`--launcher openmpi`).
DEEPSPEED = "deepspeed"
_DEEPSPEED_BOOLEAN = {
    "--module",
    "--no_python",
    "--no_local_rank",
    "--no_ssh",
    "--no_ssh_check",
    "--force_multi",
    "--save_pid",
    "--bind_cores_to_rank",
    "-q",
    "--quiet",
}

# torchrun's flag for an entry point that is an executable, not a Python script
NO_PYTHON = "--no-python"
# The single-GPU layout's launcher. -u: operator 1.7+ already sets PYTHONUNBUFFERED=1 (1.6 set
# "0"); -u keeps stdout unbuffered whatever the operator or the image sets, so a pod killed by
# OOM or preemption keeps its last log lines. torchrun already starts its workers with -u.
SINGLE_GPU_LAUNCHER = ("python", "-u")
SHELLS = frozenset({"bash", "sh"})  # the interpreters a wrapper script may name
SHELL_SUFFIXES = (".sh", ".bash")
PYTHON_ENTRY = "python"

# Per-rank logs (torch 2.13 `torch/distributed/run.py`): --log-dir gets one folder per launch,
# `<log-dir>/<rdzv id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log`; --tee=3 writes
# both streams there AND to the console; TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (run.py, read in
# `local_elastic_agent.py` with string.Template: role_name, rank = global rank, local_rank)
# prefixes each console line, so the pod log carries each rank's lines apart.
LOG_DIR_FLAG = "--log-dir"
TEE_FLAG = "--tee"
RANK_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
RANK_PREFIX = "[rank${rank}]:"
# a pod log line (bytes) of it; a pattern compiled where logs are read, not at every start
RANK_LINE = rb"(?s)^\[rank(\d{1,6})\]:(.*)$"
RANK_LOGS = "logs"  # the folder on the checkpoint volume, one sub-folder per pod
EXECUTABLE_ENTRY = "executable"

# torchrun's rendezvous flags that runai-spec renders and the smoke test rewrites
RDZV_ID_FLAG = "--rdzv-id"
MAX_RESTARTS_FLAG = "--max-restarts"
# torchrun's flags in both spellings its argparse takes (torch/distributed/run.py registers
# `--rdzv-backend` and `--rdzv_backend` for each): the rendered one first
STANDALONE_FLAG = "--standalone"
RDZV_BACKEND_FLAGS = ("--rdzv-backend", "--rdzv_backend")
RDZV_ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")
RDZV_CONF_FLAGS = ("--rdzv-conf", "--rdzv_conf")
LOG_DIR_FLAGS = (LOG_DIR_FLAG, "--log_dir")
# torch 2.6 and later share the rendezvous TCPStore with the trainers by default
# (pytorch/pytorch#128096) and build its bootstrap info only on an agent's first round
# (#135957; dynamic_rendezvous.py, torch 2.13): a pod restarted in place then waits on
# MASTER_ADDR until read_timeout and the job fails (docs/fault-experiments).
DISABLE_SHARED_STORE = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")

# torchrun's shutdown window. On SIGTERM (the kubelet deleting the pod: torchrun is its PID 1)
# the agent's run() catches the SignalException and closes its workers
# (`torch/distributed/elastic/agent/server/api.py` -> `local_elastic_agent.py` _shutdown ->
# `elastic/multiprocessing/api.py` PContext.close(death_sig, timeout)): SIGTERM to every
# worker, SIGKILL to those alive `timeout` seconds later, whatever the pod's grace period.
# Read in the wheels: torch 2.11.0 calls close(timeout=30) with no setting (so do 2.5-2.10);
# torch 2.12.0 and 2.13.0 (pytorch/pytorch#172596) take `--shutdown-timeout`, else
# TORCH_ELASTIC_SHUTDOWN_TIMEOUT (`launcher/api.py` LaunchConfig.__post_init__), else 30.
# The render sets the variable, never the flag: a torchrun older than 2.12 ignores a variable
# it does not read, but refuses a flag it does not know (argparse exits 2).
# The render's timeout is the grace period less SHUTDOWN_MARGIN_S: at the grace period the
# kubelet SIGKILLs PID 1 itself, so a window equal to it races torchrun's own SIGKILL of the
# ranks, and torchrun, killed first, never logs which rank overran. Restarts after a peer's
# failure are another window: the agent's _restart_workers -> _stop_workers closes the old
# workers with close(timeout=30), whatever the setting (`local_elastic_agent.py` _stop_workers ->
# _shutdown's default, read in the 2.13.0 wheel): SHUTDOWN_DEFAULT_S, stated by `plan`.
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
SHUTDOWN_DEFAULT_S = 30
SHUTDOWN_SETTING_SINCE = (2, 12)
SHUTDOWN_MARGIN_S = 10
# torchrun installs its SIGTERM handler only when it first starts workers
# (`elastic/multiprocessing/api.py` PContext.start, after the rendezvous of
# `agent/server/api.py` _initialize_workers; torch 2.13.0): before that, as PID 1 of its pod,
# it ignores SIGTERM (the kernel gives PID 1 no default action). Measured by
# tests/rehearse/test_sigterm_first_rendezvous.py; said by `plan`, the `pid-1` row and
# docs/faults.md.
SIGTERM_BEFORE_RENDEZVOUS = (
    "torchrun installs its SIGTERM handler only when it first starts its ranks: while it waits "
    "in its first rendezvous (its peers not yet scheduled or started) it ignores SIGTERM as "
    "PID 1, so a pod deleted or preempted then holds its GPUs for the whole grace period, "
    "until the kubelet's SIGKILL"
)


def torch_release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a torch version such as `2.13.0+cu130`; None if it is not one."""
    m = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def shutdown_timeout_s(grace_s: int) -> int:
    """The SHUTDOWN_TIMEOUT_ENV the render sets in a pod of grace period GRACE_S: the grace
    period less SHUTDOWN_MARGIN_S (at least 1 s), so torchrun's SIGKILL of its ranks comes
    before the kubelet's of torchrun."""
    return max(1, grace_s - SHUTDOWN_MARGIN_S)


def shutdown_window(torch_version: str | None, grace_s: int) -> int | None:
    """Seconds a torchrun worker has from SIGTERM to SIGKILL in a pod whose grace period is
    GRACE_S and whose env sets SHUTDOWN_TIMEOUT_ENV to shutdown_timeout_s (as the render does):
    that from torch 2.12, min(30, grace) before; None when the version is unknown."""
    release = torch_release(torch_version)
    if release is None:
        return None
    if release >= SHUTDOWN_SETTING_SINCE:
        return shutdown_timeout_s(grace_s)
    return min(SHUTDOWN_DEFAULT_S, grace_s)


# NCCL's diagnostics switch (NCCL `src/misc/debug.cc`): NCCL_DEBUG's level, its subsystems, and
# the file it writes to instead of stdout, `%h` the host name and `%p` the process id (one
# file per rank); a file NCCL cannot open leaves the lines on stdout.
NCCL_DEBUG = "NCCL_DEBUG"
NCCL_DEBUG_FILE = "NCCL_DEBUG_FILE"
NCCL_DIAGNOSTICS = (NCCL_DEBUG, "NCCL_DEBUG_SUBSYS", NCCL_DEBUG_FILE)

# The network path's variables, the preset's (network.env) and never the profile's, except the
# diagnostics switch above: the one list `validate` (policy.py, rule nccl-transport-env) and
# the cluster's admission policy (admission.py, reserved-env) both read. Every NCCL_* (NCCL
# reads any of them, >= 2.23 also from NCCL_CONF_FILE); PyTorch's NCCL process group
# (TORCH_NCCL_*: async error handling, the watchdog and heartbeat timeouts that decide how a
# fault is noticed: the failure semantics); UCX, NVSHMEM, libfabric (FI_*, the EFA/OFI
# transport) and SHARP; the interfaces of Gloo and TensorPipe; the Mellanox devices the
# container sees; and the dynamic linker's LD_PRELOAD and LD_LIBRARY_PATH, either of which can
# swap libnccl or its net plugin for another library.
#
# Issue 23 (third red-team pass) added the transport-adjacent families: UCC and PyTorch's UCC
# process group (UCC_*, TORCH_UCC_*), Gloo's transport (GLOO_DEVICE_TRANSPORT), the verbs
# stack under every RDMA transport (libibverbs IBV_*, RDMAV_*, the mlx5 provider MLX5_*),
# Mellanox HCOLL (HCOLL_*), Open MPI's MCA parameters (OMPI_MCA_*, which pick its BTL/PML
# transports), CUDA MPS (CUDA_MPS_*: the GPU shared with other processes and their limits),
# and what the NVIDIA container toolkit reads when the container is made: the GPUs it sees
# (NVIDIA_VISIBLE_DEVICES; the device plugin sets it), the driver's libraries it gets
# (NVIDIA_DRIVER_CAPABILITIES), MIG devices (NVIDIA_MIG_CONFIG_DEVICES,
# NVIDIA_MIG_MONITOR_DEVICES) and the CUDA/driver version check (NVIDIA_REQUIRE_*,
# NVIDIA_DISABLE_REQUIRE).
#
# A deny-list of families, not an allow-list of what a researcher may set: an allow-list is
# the fail-closed answer, but it would refuse the ordinary application variables every job
# sets (WANDB_PROJECT, HF_HOME, TOKENIZERS_PARALLELISM, OMP_NUM_THREADS, the script's own
# flags) and turn each into a request to the engineers, who cannot know every library's
# variables either. These families are the ones that choose or configure how GPUs and nodes
# talk and which devices and driver a container gets, which the preset's engineers own. Each
# is a plain prefix or an exact name (no patterns), so that admission.py renders the same
# list into CEL's startsWith and ==. NVIDIA_TF32_OVERRIDE and the other NVIDIA_* switches of
# a library's arithmetic stay the researcher's: only the toolkit's names above are listed.
TRANSPORT_ENV_PREFIXES = (
    "NCCL_",
    "TORCH_NCCL_",
    "UCX_",
    "NVSHMEM_",
    "FI_",
    "SHARP_",
    "UCC_",
    "TORCH_UCC_",
    "IBV_",
    "RDMAV_",
    "MLX5_",
    "HCOLL_",
    "OMPI_MCA_",
    "CUDA_MPS_",
    "NVIDIA_REQUIRE_",
)
# The variables that hand a container devices when it is made (the NVIDIA and Mellanox
# container toolkits: `NVIDIA_VISIBLE_DEVICES=all` gives every GPU of the node without any
# resource request): validate refuses them in a profile (below), and the admission policy's
# workload guard counts a container that sets them as one that asks for GPUs (issue 41 item 3).
DEVICE_ENV_NAMES = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "MELLANOX_VISIBLE_DEVICES",
)
TRANSPORT_ENV_NAMES = (
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "GLOO_DEVICE_TRANSPORT",
    *DEVICE_ENV_NAMES,
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_DISABLE_REQUIRE",
)


# A launcher's own module run as the training entry point (issue 23, third red-team pass): the
# preset's torchrun (or python) would run torchrun, accelerate or DeepSpeed again, and that
# one starts as many processes as its own flags say (`[.../torch/distributed/run.py,
# --nproc-per-node=3, train.py]` started 3 ranks where 1 was planned). Refused by name, as
# the file is in the image: the module form (`-m NAME`) and a script whose path ends in one of
# the suffixes (any site-packages folder before it). Plain strings, so that the admission
# policy's generator can render the same list.
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner",
    "deepspeed.launcher.launch",
)
LAUNCHER_SCRIPT_SUFFIXES = tuple(m.replace(".", "/") + ".py" for m in LAUNCHER_MODULES)


def _spelled(suffix: str) -> str:
    """SUFFIX's segments, each pair separated by one or more slashes and any `.` segments."""
    return r"/+(\./+)*".join(re.escape(part) for part in suffix.split("/"))


# A script path that names a launcher's own module, in every spelling (issue 41 item 4): one of
# the suffixes with its segments separated by `//` or `/./`, or any path with a `..` segment
# whose file is one of theirs (`x/../` can make any folder the launcher's: the file is in the
# image, not here to resolve). One pattern, in the syntax Python and RE2 share: validate
# (launcher_entry) and the admission policy (outputs/admission/rules.py) match the same text.
LAUNCHER_SCRIPT = re.compile(
    r"(^|/)(" + "|".join(_spelled(s) for s in LAUNCHER_SCRIPT_SUFFIXES) + r")$"
    r"|(^|/)\.\.(/.*)?/("
    + "|".join(sorted({re.escape(s.rsplit("/", 1)[1]) for s in LAUNCHER_SCRIPT_SUFFIXES}))
    + r")$"
)


def launcher_entry(command: Sequence[str]) -> str | None:
    """The launcher module that COMMAND's entry point is (`-m torch.distributed.run`, or a
    script path ending in `torch/distributed/run.py`), else None."""
    if not command:
        return None
    first = command[0]
    if first in ("-m", "--module"):
        module = command[1].strip() if len(command) > 1 else ""
        return module if module in LAUNCHER_MODULES else None
    if not LAUNCHER_SCRIPT.search(first):
        return None
    path = posixpath.normpath(first)
    named = (s for s in LAUNCHER_SCRIPT_SUFFIXES if path == s or path.endswith("/" + s))
    # the `..` spelling names no folder: the first module whose file it is
    return next(named, next(s for s in LAUNCHER_SCRIPT_SUFFIXES if first.endswith("/" + s.rsplit("/", 1)[1])))


def entry_point_kind(command: Sequence[str]) -> str | None:
    """How the container runs a profile's entry point. The file is in the image, not here to
    inspect, so its name decides:

    - `python`: a `*.py` script or `-m module`: `python -u` (one GPU) or `torchrun` run it with
      Python;
    - `executable`: a wrapper script, `*.sh` / `*.bash` (it needs its executable bit and a
      shebang in the image), or `[bash|sh, script.sh, ...]` (the interpreter named): run as
      an executable, by `torchrun --no-python`, or on its own on one GPU;
    - None: neither can be told (another suffix, or none): the launcher rule refuses it."""
    if not command:
        return None
    first = command[0]
    if first in ("-m", "--module") or first.endswith(".py"):
        return PYTHON_ENTRY
    if first.endswith(SHELL_SUFFIXES):
        return EXECUTABLE_ENTRY
    if os.path.basename(first) in SHELLS and len(command) > 1 and command[1].endswith(SHELL_SUFFIXES):
        return EXECUTABLE_ENTRY
    return None


class Launcher(Record):
    kind: str  # "python", "torchrun", or "executable" (an entry point run with no launcher)
    head: tuple[str, ...]  # launcher and its flags, before the entry point
    entry: tuple[str, ...]  # the script (or -m module) and its arguments


# --- torchrun's flag grammar (argparse): `--name=value` or `--name value`, a boolean alone ---


def flag(name: str, value: object) -> str:
    """The flag as runai-spec renders it: `--name=value`."""
    return f"{name}={value}"


def split_flag(arg: str) -> tuple[str, str | None]:
    """(name, value) of `--name=value`; (arg, None) for an argument without `=`."""
    name, eq, value = arg.partition("=")
    return (name, value) if eq else (arg, None)


def _flag_width(arg: str, kind: str) -> int:
    """How many items of argv flag ARG of launcher KIND takes: torchrun's, accelerate's and
    DeepSpeed's flags take a value unless boolean or written `--x=v`; python's -X, -W and -c
    take one."""
    if kind == "torchrun":
        return 1 if arg in _TORCHRUN_BOOLEAN or "=" in arg else 2
    if kind == "python":
        return 2 if arg in _PYTHON_WITH_VALUE else 1
    if kind == ACCELERATE:
        return 1 if arg in ACCELERATE_BOOLEAN or "=" in arg else 2
    if kind == DEEPSPEED:
        return 1 if arg in _DEEPSPEED_BOOLEAN or "=" in arg else 2
    return 1


def _head_end(argv: Sequence[str], kind: str, start: int) -> int:
    """Where launcher KIND's flags end in ARGV, from START: at the first argument that is no
    flag, or at python's (and accelerate's) `-m` (the module is the entry point)."""
    i = start
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            break
        if arg in ("-m", "--module") and kind in ("python", ACCELERATE):
            break
        i += _flag_width(arg, kind)
    return i


def _python(prog: str) -> bool:
    return re.fullmatch(r"python(3(\.\d+)?)?", prog) is not None


def split_command(argv: Sequence[str]) -> Launcher:
    """Split a container argv into launcher flags and the training entry point."""
    if not argv:
        raise InputError("the pytorch container has no command", field="command")
    if entry_point_kind(argv) == EXECUTABLE_ENTRY:  # one GPU: the wrapper script runs itself
        return Launcher(EXECUTABLE_ENTRY, (), tuple(argv))
    prog = os.path.basename(argv[0])
    if (prog, *argv[1:2]) == ACCELERATE_PROGRAM:
        kind, i = ACCELERATE, 2
    elif prog == "torchrun":
        kind, i = "torchrun", 1
    elif _python(prog):
        if argv[1:3] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            kind, i = "torchrun", 3
        elif argv[1:3] == ["-m", ACCELERATE_MODULE]:  # accelerate launch's own module (rehearsal)
            kind, i = ACCELERATE, 3
        else:
            kind, i = "python", 1
    else:
        raise InputError(
            f"the container command starts with {argv[0]!r}, neither python, torchrun nor accelerate launch",
            field="command",
            hint="rehearse knows the launchers runai-spec renders",
        )
    i = _head_end(argv, kind, i)
    return Launcher(kind, tuple(argv[:i]), tuple(argv[i:]))


def set_nproc(head: Sequence[str], k: int) -> tuple[str, ...]:
    """Rewrite torchrun's --nproc-per-node (any spelling) to k; leave it absent if absent."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(head):
        if skip:
            skip = False
            continue
        name, value = split_flag(arg)
        nproc = re.fullmatch(r"--nproc[-_]per[-_]node", name) is not None
        if nproc and value is not None:
            out.append(flag(name, k))
        elif nproc and i + 1 < len(head):
            out += [arg, str(k)]
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def has_flag(head: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in head for n in names)


class FlagUse:
    """One use of a launcher flag in an argv: `--x=v` (width 1) or `--x v` (width 2). A plain
    record, not a NamedTuple (its `index` would hide tuple.index) nor a frozen dataclass
    (~4 M instructions to define at start-up: benchmarks/README.md, round 5)."""

    __slots__ = ("index", "width", "name", "value")

    def __init__(self, index: int, width: int, name: str, value: str) -> None:
        self.index = index  # where the flag is
        self.width = width
        self.name = name  # the spelling used, e.g. --rdzv_conf
        self.value = value

    def _key(self) -> tuple[int, int, str, str]:
        return (self.index, self.width, self.name, self.value)

    def __eq__(self, other: object) -> bool:
        return other._key() == self._key() if type(other) is FlagUse else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "FlagUse(index={!r}, width={!r}, name={!r}, value={!r})".format(*self._key())


def flag_uses(head: Sequence[str], *names: str) -> list[FlagUse]:
    """Each use of flag NAMES (any of its spellings) in HEAD with its value, left to right; a
    name last with no value after it is no use."""
    out: list[FlagUse] = []
    i = 0
    while i < len(head):
        arg = head[i]
        for name in names:
            if arg == name and i + 1 < len(head):
                out.append(FlagUse(i, 2, name, head[i + 1]))
                i += 1  # past the value
                break
            if arg.startswith(name + "="):
                out.append(FlagUse(i, 1, name, arg.split("=", 1)[1]))
                break
        i += 1
    return out


def flag_value(head: Sequence[str], *names: str) -> str | None:
    """The value of the first use of flag NAMES in HEAD, else None."""
    uses = flag_uses(head, *names)
    return uses[0].value if uses else None


def rdzv_conf_keys(conf: str) -> set[str]:
    """The keys of a `--rdzv-conf` value (`key=value,key=value`; torch's
    `_parse_rendezvous_config`)."""
    return {kv.split("=", 1)[0].strip() for kv in conf.split(",") if kv.strip()}


def without_launcher(command: Sequence[str]) -> list[str]:
    """A researcher's command with a launcher they typed (`torchrun --nnodes=2 ...`, `python -u`,
    `bash`) and that launcher's own flags taken off: what the profile's command should be."""
    prog = os.path.basename(command[0]) if command else ""
    kind = "torchrun" if prog == "torchrun" else "python" if _python(prog) else prog
    return list(command[_head_end(command, kind, 1) :])


def python_head(argv: Sequence[str]) -> tuple[str, ...]:
    """The launcher of a rendered container argv, made to run a Python script in place of its
    entry point (the rehearsal's preflight.py): without torchrun's `--no-python` or `-m`, and
    `python -u` where an executable ran with no launcher."""
    launcher = split_command(argv)
    if launcher.kind == EXECUTABLE_ENTRY:
        return SINGLE_GPU_LAUNCHER
    if launcher.kind == ACCELERATE:  # its -m ends its head, like python's
        return tuple(a for a in launcher.head if a != ACCELERATE_NO_PYTHON)
    if launcher.kind != "torchrun":  # python's -m ends its head: the module is the entry point
        return launcher.head
    # torchrun's own flags after the program (`torchrun` or `python -m torch.distributed.run`):
    # without --no-python, and without -m, which would take preflight.py for a module's name
    start = 1 if os.path.basename(launcher.head[0]) == "torchrun" else 3
    flags = (a for a in launcher.head[start:] if a not in (NO_PYTHON, "--no_python", "-m", "--module"))
    return (*launcher.head[:start], *flags)
