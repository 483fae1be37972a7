"""Files written whole or not at all: exclusive new files, atomic replacement, folders swapped."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .errors import InputError

# A new file, never an existing one nor through a link someone placed at a name they guessed;
# mode 0666 less the umask, as any new file.
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create(path: str, dir_fd: int | None) -> int:
    return os.open(path, _NEW, 0o666, dir_fd=dir_fd)


class ReplacedFiles:
    """Files written whole or not at all: each under a new temporary name beside its own
    (`.NAME.tmp-<random>`, created exclusively), synced, and renamed over NAME only when every
    one of them is complete, so that a reader sees the old files or the new ones and a link
    planted at a guessed name is never written through. A `with` block commits when it ends
    cleanly and removes the temporaries when it raises. With dir_fd, names are relative to
    that open folder (one opened without following a link at its name)."""

    def __init__(self, folder: Path, dir_fd: int | None = None) -> None:
        self.folder = folder
        self.dir_fd = dir_fd
        self.staged: list[tuple[str, str, IO[bytes]]] = []  # (temporary name, name, its file)

    def _at(self, name: str) -> str:
        return name if self.dir_fd is not None else str(self.folder / name)

    def open(self, name: str) -> IO[bytes]:
        """A new temporary file for NAME, open for writing bytes."""
        for _ in range(100):
            tmp = f".{name}.tmp-{secrets.token_hex(8)}"
            try:
                fd = _create(self._at(tmp), self.dir_fd)
            except FileExistsError:
                continue
            handle = os.fdopen(fd, "wb")
            self.staged.append((tmp, name, handle))
            return handle
        raise FileExistsError(errno.EEXIST, "no unused temporary name", str(self.folder))

    def add(self, name: str, text: str) -> None:
        self.open(name).write(text.encode("utf-8"))

    def commit(self) -> None:
        """Every file renamed into place (each synced first); on an error the temporaries
        not yet renamed are removed."""
        try:
            for _, _, handle in self.staged:
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
            while self.staged:
                tmp, name, _ = self.staged[0]
                os.replace(self._at(tmp), self._at(name), src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                self.staged.pop(0)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        for tmp, _, handle in self.staged:
            handle.close()
            with contextlib.suppress(OSError):
                os.unlink(self._at(tmp), dir_fd=self.dir_fd)
        self.staged = []

    def __enter__(self) -> ReplacedFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def replace_file(path: Path, text: str) -> None:
    """path's content replaced by text at once (see ReplacedFiles)."""
    with ReplacedFiles(path.parent) as out:
        out.add(path.name, text)


class StagedFiles:
    """`render -d DIR`: the folder replaced as a whole, so that whoever looks at DIR sees the
    old set of files or the new one, never a mix and never a temporary, even when the process
    is killed (SIGKILL) half-way (issue 23). The files are written into a new hidden folder
    beside DIR, `.<DIR>.render-<random>`, which also gets every other entry of DIR (each file
    as a second hard link, a link as a link); `commit` exchanges the two folders in one
    rename(2) (renameat2 RENAME_EXCHANGE) and removes the hidden one, which then holds the old
    set. A hidden folder that a killed render left is removed by the next render into DIR.
    DIR itself must hold only files and links: a folder inside it is refused, as are the
    current folder and what holds it (their content, or a shell's place, would move) and a
    mount point (which no rename moves)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        # the names written, one a line, in order: in memory up to a MB, then in a file
        self.names: IO[str] | None = None
        self.made: list[Path] = []  # missing parents made for DIR, deepest first
        self.target: Path | None = None  # DIR's real path (a link to a folder followed)
        self.stage: Path | None = None
        self.fd: int | None = None  # the stage, open and locked (flock) while this render works

    def _start(self) -> None:
        target = self._target()
        parent = target.parent
        missing = [p for p in (parent, *parent.parents) if not p.exists()]
        parent.mkdir(parents=True, exist_ok=True)
        self.made = missing
        _remove_stale(parent, target.name)
        self.stage, self.fd = _new_stage(parent, f".{target.name}.render-")
        self.target = target

    def _target(self) -> Path:
        folder = Path(os.path.abspath(self.folder))
        if folder.is_symlink():
            if not folder.exists():
                raise InputError(
                    "is a link to nothing",
                    file=str(self.folder),
                    hint="remove the link or choose another --out-dir folder",
                )
            folder = Path(os.path.realpath(folder))
        if folder.exists() and not folder.is_dir():
            raise InputError(
                "is not a folder",
                file=str(self.folder),
                hint="choose a folder for the manifests, e.g. -d manifests",
            )
        if folder.exists() and os.path.ismount(folder):
            raise InputError(
                "is a mount point, which cannot be replaced as a whole (render -d swaps the folder at once)",
                file=str(self.folder),
                hint=f"render into a folder inside it, e.g. -d {Path(self.folder) / 'manifests'}",
            )
        cwd = Path(os.path.realpath(Path.cwd()))
        if folder.parent == folder or cwd == folder or folder in cwd.parents:
            raise InputError(
                "is the current folder or holds it; render -d replaces the whole folder at once",
                file=str(self.folder),
                hint="give a folder of its own for the manifests, e.g. -d manifests",
            )
        return folder

    def add(self, name: str, text: str) -> None:
        try:
            if self.fd is None:
                self._start()
            assert self.fd is not None
            fd = _create(name, self.fd)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            self.discard()
            raise InputError(
                f"cannot write: {exc.strerror or exc}",
                file=str(self.folder),
                hint="check the folder and its parent can be written",
            ) from None
        except BaseException:
            self.discard()
            raise
        if self.names is None:
            import tempfile

            self.names = tempfile.SpooledTemporaryFile(1 << 20, mode="w+", encoding="utf-8")  # noqa: SIM115
        self.names.write(name + "\n")
        self.count += 1

    def _written(self) -> Iterator[str]:
        """The names written, read back as they are iterated; this sink starts a new list."""
        names, self.names, self.count = self.names, None, 0
        return _read_lines(names)

    def commit(self) -> Iterator[str]:
        """Every file replaced, or none: DIR's other entries are carried into the new folder,
        then the two folders are exchanged at once; the lines to print, `wrote` one per file
        in the order added, read as they are printed."""
        if self.fd is None or self.target is None or self.stage is None:
            return iter([])
        target, stage, fd = self.target, self.stage, self.fd
        try:
            mode, owner = self._carry(target, fd)
            os.fchmod(fd, mode)
            if owner is not None and owner != (os.getuid(), os.getgid()):
                with contextlib.suppress(OSError):  # root rendering into a user's folder
                    os.fchown(fd, *owner)
            swap = target.exists()
            if swap:
                _exchange(stage, target)
            else:
                os.rename(stage, target)
        except InputError:
            self.discard()
            raise
        except OSError as exc:
            self.discard()
            raise InputError(
                f"cannot write: {exc.strerror or exc}; no file was changed",
                file=str(self.folder),
                hint="check the folder's permissions and "
                "attributes (`lsattr`), or choose another --out-dir folder",
            ) from None
        except BaseException:
            self.discard()
            raise
        warnings = []
        try:  # the stage's name now holds the old set
            if swap:
                shutil.rmtree(stage)
        except OSError as exc:
            warnings.append(f"warning: the previous files stay in {stage}: {exc.strerror or exc}")
        os.close(fd)
        self.fd = self.stage = None
        self.made = []
        folder = self.folder
        return itertools.chain((f"wrote {folder / name}" for name in self._written()), warnings)

    def _carry(self, target: Path, fd: int) -> tuple[int, tuple[int, int] | None]:
        """Every entry of DIR that this render does not write, into the stage (a file as a
        second hard link, or a copy where the file system has none; a link as a link); the
        mode and owner the new folder gets (DIR's). Bad input before anything changes: a target that is not a
        regular file, a folder or a FIFO in DIR, a file marked immutable or append-only."""
        if not target.exists():
            umask = os.umask(0)
            os.umask(umask)
            return 0o777 & ~umask, None
        info = os.stat(target)
        # DIR's entries streamed (a folder of 100,000 manifests is not listed into memory);
        # the first problem by name is the one reported, as when they were sorted
        problems = (self._problem(entry, fd) for entry in _listing(target))
        first = min((p for p in problems if p is not None), key=lambda p: p[0], default=None)
        if first is not None:
            raise first[1]
        for entry in _listing(target):
            if _staged(entry.name, fd):
                continue
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), entry.name, dir_fd=fd)
                continue
            try:
                os.link(entry.path, entry.name, dst_dir_fd=fd, follow_symlinks=False)
            except OSError:  # no hard links here: a copy, with its mode and times
                assert self.stage is not None
                shutil.copy2(entry.path, self.stage / entry.name, follow_symlinks=False)
        return stat.S_IMODE(info.st_mode), (info.st_uid, info.st_gid)

    def _problem(self, entry: os.DirEntry[str], fd: int) -> tuple[str, InputError] | None:
        """Why ENTRY of DIR stops the render before anything changes, if it does: a target
        that is not a regular file, a folder or a FIFO, a file marked immutable or append-only."""
        shown = str(self.folder / entry.name)
        st = entry.stat(follow_symlinks=False)
        problem = None
        if _staged(entry.name, fd):
            if not stat.S_ISREG(st.st_mode):
                problem = InputError(
                    "is not a regular file; nothing was written",
                    file=shown,
                    hint="remove it or choose another --out-dir folder",
                )
        elif stat.S_ISDIR(st.st_mode):
            problem = InputError(
                "is a folder; render -d replaces the whole folder at once, "
                "so it writes only into a folder of files; nothing was "
                "written",
                file=shown,
                hint="give the manifests a folder of their own",
            )
        elif not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            problem = InputError(
                "is not a file, a link or a folder; nothing was written",
                file=shown,
                hint="remove it or choose another --out-dir folder",
            )
        if problem is None and stat.S_ISREG(st.st_mode) and _pinned(entry.path):
            problem = InputError(
                "cannot write: Operation not permitted; no file was changed",
                file=shown,
                hint="check the file's permissions and attributes "
                "(`lsattr`), or choose another --out-dir folder",
            )
        return None if problem is None else (entry.name, problem)

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
        if self.names is not None:
            self.names.close()
        self.names, self.count = None, 0
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:
                break
        self.made = []


def _read_lines(lines: IO[str] | None) -> Iterator[str]:
    if lines is not None:
        with lines:
            lines.seek(0)
            yield from (line[:-1] for line in lines)


def _listing(folder: Path) -> Iterator[os.DirEntry[str]]:
    with os.scandir(folder) as listing:
        yield from listing


def _staged(name: str, fd: int) -> bool:
    """Whether this render wrote NAME: it is in the stage (the open folder FD)."""
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


_FS_IOC_GETFLAGS = 0x80086601  # linux/fs.h: _IOR('f', 1, long)
_PINNED_FLAGS = 0x10 | 0x20  # FS_IMMUTABLE_FL, FS_APPEND_FL (chattr +i, +a)


def _pinned(path: str) -> bool:
    """True for a file marked immutable or append-only: it can be neither linked nor
    removed, so the folder holding it cannot be replaced (nor the file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))
    except OSError:  # no such attributes on this file system
        return False
    finally:
        os.close(fd)
    return bool(int.from_bytes(flags[:4], sys.byteorder) & _PINNED_FLAGS)


_STALE_S = 2.0  # a stage younger than this may be a render's that has not locked it yet


def _new_stage(parent: Path, prefix: str) -> tuple[Path, int]:
    """A new folder beside DIR (mode 0700 until commit), open and locked (flock): the lock
    tells a later render that this one still works in it."""
    for _ in range(100):
        stage = parent / f"{prefix}{secrets.token_hex(8)}"
        try:
            os.mkdir(stage, 0o700)
        except FileExistsError:
            continue
        fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return stage, fd
    raise FileExistsError(errno.EEXIST, "no unused folder name", str(parent))


def _remove_stale(parent: Path, name: str) -> None:
    """Remove what a killed render into DIR left beside it: a stage nobody holds locked."""
    prefix = f".{name}.render-"
    try:
        with os.scandir(parent) as listing:
            stale = [e.path for e in listing if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for path in stale:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: another render is at work
            if time.time() - os.fstat(fd).st_mtime > _STALE_S:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass
        finally:
            os.close(fd)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two folders at once: renameat2(RENAME_EXCHANGE) (Linux 3.15, glibc 2.28). Where
    the file system or the C library has no such call: b moved aside, then a moved to b (b is
    missing for that instant)."""
    import ctypes

    call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if call is not None:
        if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(b))
    aside = a.with_name(a.name + "-old")
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except OSError:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


def exchange_folders(a: Path, b: Path) -> None:
    """Swap folders A and B at once (`presets sync`: the new set for the old; see _exchange)."""
    _exchange(a, b)
