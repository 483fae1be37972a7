"""accelerate launch as this machine runs it: its module under this Python, the pod's files, its processes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..facts.accelerate import (
    LOG_DIR_FLAG,
    MULTI_GPU_FLAG,
    NUM_MACHINES_FLAG,
    NUM_PROCESSES_FLAG,
    PROGRAM,
    TEE_FLAG,
)
from ..facts.torchrun import ACCELERATE_MODULE, flag, flag_value, split_flag

# `accelerate launch` is accelerate's console script for this module's main() (accelerate
# 1.16.0 setup.py entry points; commands/launch.py runs main() as __main__ too)
MODULE = ACCELERATE_MODULE
# a downward-API item's reference to a pod annotation, as the render writes it
_ANNOTATION = re.compile(r"metadata\.annotations\['(.+)'\]")


def downward_files(
    template: Mapping[str, Any], container: Mapping[str, Any], folder: Path
) -> dict[str, Path]:
    """The pod's downward-API volumes of annotations (the accelerate config), written under
    FOLDER as the kubelet writes them in the pod: mount path -> its folder here."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    volumes = {v["name"]: v for v in (template.get("spec") or {}).get("volumes") or [] if "downwardAPI" in v}
    out: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            continue
        here = folder / "downward" / mount["name"]
        here.mkdir(parents=True, exist_ok=True)
        for item in volume["downwardAPI"].get("items") or []:
            match = _ANNOTATION.fullmatch((item.get("fieldRef") or {}).get("fieldPath", ""))
            if match is not None and match.group(1) in annotations:
                (here / item["path"]).write_text(annotations[match.group(1)], encoding="utf-8")
        out[mount["mountPath"]] = here
    return out


def accelerate_here(head: Sequence[str], python: str, nproc: int, files: Mapping[str, Path]) -> list[str]:
    """HEAD (`accelerate launch ...`) run by PYTHON as a module: NPROC processes per machine
    (--num_processes is the total: machines x NPROC), and a flag naming a file of the pod's
    downward-API volumes pointed at that file here."""
    machines = int(flag_value(head, NUM_MACHINES_FLAG) or 1)
    out = [python, "-m", MODULE]
    for arg in head[len(PROGRAM) :]:
        name, value = split_flag(arg)
        if arg == MULTI_GPU_FLAG and machines * nproc < 2:
            # --procs-per-pod 1 on one pod: accelerate refuses --multi_gpu below 2 processes
            # (_validate_launch_command); without it `accelerate launch --num_processes=1` runs
            # the script itself, as it would on a one-GPU workstation
            continue
        if name == NUM_PROCESSES_FLAG:
            arg = flag(name, machines * nproc)
        elif value is not None:
            for mount, here in files.items():
                if value.startswith(mount.rstrip("/") + "/"):
                    arg = flag(name, here / value[len(mount.rstrip("/")) + 1 :])
        out.append(arg)
    return out


def rank_log_flags(folder: Path) -> tuple[str, ...]:
    """The flags that give a render without --log_dir its per-rank logs here."""
    return (flag(LOG_DIR_FLAG, folder), flag(TEE_FLAG, 3))
