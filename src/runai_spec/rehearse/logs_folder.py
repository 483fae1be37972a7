"""The rehearsal's own folder (`--logs DIR`): a folder, and nothing in it leads elsewhere."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import InputError
from .filesystem import IMAGE_DIR

_HINT = "remove it, or give --logs a new folder (it is made if missing)"


def check_logs_dir(logs_dir: Path | None) -> None:
    """Bad input before anything runs or is written (issue 23): `--logs` naming something
    that is not a folder, or a folder holding a link that leads out of it, a hard-linked file
    or a FIFO, socket or device. The rehearsal (and the torchrun it starts) writes files at
    names it chooses in that folder: through such an entry it would write outside the folder,
    change a file's other name, or block. A link that stays inside the folder (a script's
    `latest -> step-100` in a checkpoint volume) is fine. The pods' copies of the working
    tree (`<pod>/image`) are skipped: each is removed, never written through, before a start."""
    if logs_dir is None:
        return
    path = Path(logs_dir)
    if not path.exists():
        if path.is_symlink():
            raise InputError("is a link to nothing", file=str(path), field="--logs", hint=_HINT)
        return
    if not path.is_dir():
        raise InputError(
            "is not a folder",
            file=str(path),
            field="--logs",
            hint="give --logs a folder (it is made if missing)",
        )
    root = path.resolve()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        if here.parent == root:
            dirs[:] = [d for d in dirs if d != IMAGE_DIR]
        for name in [*dirs, *files]:
            _check_entry(root, here / name)


def _check_entry(root: Path, entry: Path) -> None:
    try:
        info = entry.lstat()
    except FileNotFoundError:  # gone meanwhile
        return
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.path.realpath(entry))
        if target != root and root not in target.parents:
            raise InputError(
                "is a link that leads out of the folder; the rehearsal never writes through it",
                file=str(entry),
                field="--logs",
                hint=_HINT,
            )
    elif stat.S_ISREG(info.st_mode):
        if info.st_nlink > 1:
            raise InputError(
                "is a hard link (the file has another name); the rehearsal never writes through it",
                file=str(entry),
                field="--logs",
                hint=_HINT,
            )
    elif not stat.S_ISDIR(info.st_mode):
        raise InputError(
            "is not a file or a folder (a FIFO, socket or device)",
            file=str(entry),
            field="--logs",
            hint=_HINT,
        )


def make_logs_dir(logs_dir: Path | None) -> Path:
    """The rehearsal's folder, absolute (the pods run in other folders, and its paths are
    printed): --logs made if missing, else a new temporary folder."""
    if logs_dir is None:
        return Path(tempfile.mkdtemp(prefix="runai-spec-rehearse-")).resolve()
    root = Path(logs_dir).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot create the folder: {exc.strerror or exc}",
            file=str(logs_dir),
            field="--logs",
            hint="give --logs a folder you can write",
        ) from None
    return root
