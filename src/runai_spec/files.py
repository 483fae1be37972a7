"""Files written whole or not at all: exclusive new files and atomic replacement."""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path


def new_file(folder: Path, prefix: str) -> tuple[Path, int]:
    """A file made now in folder under prefix and a random suffix, and its descriptor open for
    writing. Created exclusively (O_EXCL, O_NOFOLLOW): never an existing file, never through a
    link someone placed at a name they guessed. Mode 0666 less the umask, as any new file."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    for _ in range(100):
        path = folder / f"{prefix}{secrets.token_hex(8)}"
        try:
            return path, os.open(path, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(folder))


def write_new(folder: Path, prefix: str, text: str) -> Path:
    """text in a new file of folder (see new_file); removed again when the write fails."""
    path, fd = new_file(folder, prefix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def replace_file(path: Path, text: str) -> None:
    """path's content replaced by text at once (a new file beside it, then a rename): a
    reader sees the old file or the new one, and a link planted at a guessed temporary name
    is never written through."""
    tmp = write_new(path.parent, f".{path.name}.tmp-", text)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
