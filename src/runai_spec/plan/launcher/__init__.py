"""The launcher seam: one class per launcher (python, torchrun) behind one protocol, chosen by name."""

from .base import (
    PYTORCHJOB,
    Launcher,
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
from .python import PythonLauncher
from .rendezvous import RDZV_ENDPOINT, RendezvousPlan, rendezvous_plan
from .torchrun import TorchrunLauncher, rank_log_dir, rendezvous_flags

__all__ = [
    "PYTORCHJOB",
    "RDZV_ENDPOINT",
    "LaunchSetup",
    "Launcher",
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
