"""The launcher seam: one class per launcher (python, torchrun, accelerate, mpi) behind one protocol."""

from .accelerate import AccelerateLauncher
from .base import (
    PROFILE_LAUNCHERS,
    PYTORCHJOB,
    Launcher,
    LauncherFile,
    LaunchSetup,
    WorkloadKind,
    choose_launcher,
    launch_setup,
    launcher_for,
    launcher_named,
    launcher_names,
    plan_launcher,
    register_launcher,
    registered_launchers,
)
from .mpi import MPIJOB, MpiLauncher
from .python import PythonLauncher
from .rendezvous import RDZV_ENDPOINT, RendezvousPlan, rendezvous_plan
from .torchrun import TorchrunLauncher, rank_log_dir, rendezvous_flags

__all__ = [
    "PROFILE_LAUNCHERS",
    "PYTORCHJOB",
    "RDZV_ENDPOINT",
    "MPIJOB",
    "AccelerateLauncher",
    "LaunchSetup",
    "Launcher",
    "LauncherFile",
    "MpiLauncher",
    "PythonLauncher",
    "RendezvousPlan",
    "TorchrunLauncher",
    "WorkloadKind",
    "choose_launcher",
    "launch_setup",
    "launcher_for",
    "launcher_named",
    "launcher_names",
    "plan_launcher",
    "rank_log_dir",
    "register_launcher",
    "registered_launchers",
    "rendezvous_flags",
    "rendezvous_plan",
]

# The registry: a new launcher is a module of this package and one line here.
register_launcher("python", PythonLauncher)
register_launcher("torchrun", TorchrunLauncher)
register_launcher("accelerate", AccelerateLauncher)
register_launcher("mpi", MpiLauncher)
