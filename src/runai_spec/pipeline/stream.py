"""Profile paths -> workloads, one at a time: the one loop over many profiles, streaming."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Generic, Protocol, TypeVar, overload

from ..errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError, RunaiSpecError
from ..findings import Finding
from ..load.presets import PresetRegistry
from .workload import Workload, prepare_workload


class StdinProfile(type(Path())):  # type: ignore[misc]
    """`-`: the profile read from standard input, once; named `<stdin>` in messages."""

    _data: bytes | None = None
    is_stdin = True  # loading.read_text reads it through open(), not the file system

    def __str__(self) -> str:
        return "<stdin>"

    def open(self, mode: str = "r", *args: object, **kwargs: object) -> IO[bytes]:
        import io

        from ..load.yaml import MAX_BYTES

        if StdinProfile._data is None:
            # never more than the loader reads of a file: one byte past its cap, so that an
            # endless stream (`< /dev/zero`) is refused as too large instead of filling memory
            # (a buffered reader's read(n) reads on until n bytes or the end)
            StdinProfile._data = sys.stdin.buffer.read(MAX_BYTES + 1)
        return io.BytesIO(StdinProfile._data)


def profile_path(path: Path) -> Path:
    """What a profile argument means: `-` standard input, a folder its profile.yaml."""
    if str(path) == "-":
        StdinProfile._data = None
        return StdinProfile("-")
    if path.is_dir():
        return path / "profile.yaml"
    return path


class ProfileArgs(Sequence[Path]):
    """Profile arguments as given (strings), each made its Path (profile_path) when read: a
    call with 100,000 profiles keeps their names, not 100,000 Path objects. `-` is read once."""

    def __init__(self, args: Iterable[str]) -> None:
        self._args: list[str | Path] = [profile_path(Path(a)) if a == "-" else a for a in args]

    def __len__(self) -> int:
        return len(self._args)

    @overload
    def __getitem__(self, index: int) -> Path: ...
    @overload
    def __getitem__(self, index: slice) -> list[Path]: ...
    def __getitem__(self, index: int | slice) -> Path | list[Path]:
        if isinstance(index, slice):
            return [self._path(a) for a in self._args[index]]
        return self._path(self._args[index])

    @staticmethod
    def _path(arg: str | Path) -> Path:
        return arg if isinstance(arg, Path) else profile_path(Path(arg))


def workloads(paths: Iterable[Path], registry: PresetRegistry | None = None
              ) -> Iterator[Workload | InputError]:
    """Each profile carried through, in order: its workload, or the bad input that stopped it.
    Nothing is kept: a workload lives until the caller drops it."""
    registry = registry or PresetRegistry()
    for path in paths:
        try:
            yield prepare_workload(path, registry)
        except InputError as exc:
            yield exc


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Reported(Protocol[T_co]):
    """What a report reads: iterated (more than once) and counted; a list or a Spooled."""

    def __iter__(self) -> Iterator[T_co]: ...
    def __len__(self) -> int: ...


class Spooled(Generic[T]):
    """Items kept pickled in a temporary file (in memory up to a MB), read back in order: what
    a many-profile command reports at its end, so that its memory does not grow with the
    number of profiles (issue 29 item 2). Appended to and iterated, never indexed."""

    def __init__(self) -> None:
        import tempfile

        # closed with the object: it lives as long as the command's report
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(1 << 20)  # noqa: SIM115
        self._count = 0
        self._end = 0
        self._replaced: dict[int, T] = {}

    def append(self, item: T) -> None:
        import pickle

        self._file.seek(self._end)
        pickle.dump(item, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._end = self._file.tell()
        self._count += 1

    def replace(self, index: int, item: T) -> None:
        """Item INDEX reads back as ITEM from now on."""
        self._replaced[index] = item

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[T]:
        import pickle

        at = 0  # each iterator keeps its own place: loops may nest
        for index in range(self._count):
            self._file.seek(at)
            item = pickle.load(self._file)
            at = self._file.tell()
            yield self._replaced.get(index, item)


class LineSpool(Spooled[str]):
    """Lines to print at the end, in order, kept out of memory."""

    def __iadd__(self, lines: Iterable[str]) -> LineSpool:
        for line in lines:
            self.append(line)
        return self


@dataclass
class Gate:
    """What stops a many-profile command, collected as the profiles stream past: bad input
    (exit 2) reported before the findings (1), as when every profile was loaded first."""

    bad: LineSpool = field(default_factory=LineSpool)
    notes: LineSpool = field(default_factory=LineSpool)
    bad_count: int = 0
    failed: int = 0

    def passed(self, items: Iterable[Workload | InputError]) -> Iterator[Workload]:
        """The workloads of items (with error findings too), noting every problem."""
        for item in items:
            if isinstance(item, Workload):
                self.notes += [line for f in item.findings for line in f.lines()]
                self.failed += bool(item.errors)
                yield item
            else:
                self.bad += item.lines()
                self.bad_count += 1

    @property
    def lines(self) -> Iterator[str]:
        yield from self.bad
        yield from self.notes

    @property
    def code(self) -> int:
        return EXIT_INPUT if self.bad_count else EXIT_FINDINGS if self.failed else EXIT_OK


# --- validate ----------------------------------------------------------------------

@dataclass(frozen=True)
class ProfileCheck:
    """What validate reports of one profile; the workload itself is not kept."""

    path: str
    workload: str
    layout: str
    pods: int
    procs_per_pod: int
    world_size: int
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def summary(self) -> str:
        return (f"{self.workload}: {self.layout}, {self.pods} pod(s) x {self.procs_per_pod} "
                f"process(es), world size {self.world_size}")


def profile_check(workload: Workload, extra: Iterable[Finding] = ()) -> ProfileCheck:
    p = workload.plan
    return ProfileCheck(workload.path, p.name, p.layout, p.pods, p.procs_per_pod, p.world_size,
                        (*workload.findings, *extra))


def check_profiles(paths: Iterable[Path], crd: Path | None = None,
                   live: Callable[[Workload], list[Finding]] | None = None,
                   ) -> tuple[Spooled[ProfileCheck], list[RunaiSpecError]]:
    """`validate`: every profile checked (and, with crd, its rendered objects against that
    CRD's schema), collecting bad input instead of stopping."""
    extra: Callable[[Workload], list[Finding]] = lambda w: []  # noqa: E731
    if crd is not None:
        from ..check.crd import crd_findings, load_crd_schemas
        from ..facts.kubeflow import KIND

        schemas = load_crd_schemas(crd)
        extra = lambda w: crd_findings(list(w.manifests), schemas, KIND, w.path)  # noqa: E731
    checks: Spooled[ProfileCheck] = Spooled()
    bad: list[RunaiSpecError] = []
    for item in workloads(paths):
        if isinstance(item, Workload):
            checks.append(profile_check(item, [*extra(item), *(live(item) if live else [])]))
        else:
            bad.append(item)
    return checks, bad


def check_exit(checks: Iterable[ProfileCheck], bad: list[RunaiSpecError]) -> int:
    if bad:
        return EXIT_INPUT
    return EXIT_FINDINGS if any(c.errors for c in checks) else EXIT_OK


# --- render ------------------------------------------------------------------------

class Sink(Protocol):
    """Where rendered text goes: kept aside as it comes, delivered all at once or not at all."""

    def add(self, name: str, text: str) -> None: ...
    def commit(self) -> list[str]: ...
    def discard(self) -> None: ...


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
        self.names: list[str] = []
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
                raise InputError("is a link to nothing", file=str(self.folder),
                                 hint="remove the link or choose another --out-dir folder")
            folder = Path(os.path.realpath(folder))
        if folder.exists() and not folder.is_dir():
            raise InputError("is not a folder", file=str(self.folder),
                             hint="choose a folder for the manifests, e.g. -d manifests")
        if folder.exists() and os.path.ismount(folder):
            raise InputError("is a mount point, which cannot be replaced as a whole (render -d "
                             "swaps the folder at once)", file=str(self.folder),
                             hint="render into a folder inside it, e.g. -d "
                             f"{Path(self.folder) / 'manifests'}")
        cwd = Path(os.path.realpath(Path.cwd()))
        if folder.parent == folder or cwd == folder or folder in cwd.parents:
            raise InputError("is the current folder or holds it; render -d replaces the whole "
                             "folder at once", file=str(self.folder),
                             hint="give a folder of its own for the manifests, e.g. -d manifests")
        return folder

    def add(self, name: str, text: str) -> None:
        try:
            if self.fd is None:
                self._start()
            assert self.fd is not None
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o666, dir_fd=self.fd)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            self.discard()
            raise InputError(f"cannot write: {exc.strerror or exc}", file=str(self.folder),
                             hint="check the folder and its parent can be written") from None
        except BaseException:
            self.discard()
            raise
        self.names.append(name)

    def commit(self) -> list[str]:
        """Every file replaced, or none: DIR's other entries are carried into the new folder,
        then the two folders are exchanged at once."""
        if self.fd is None or self.target is None or self.stage is None:
            return []
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
            raise InputError(f"cannot write: {exc.strerror or exc}; no file was changed",
                             file=str(self.folder), hint="check the folder's permissions and "
                             "attributes (`lsattr`), or choose another --out-dir folder") from None
        except BaseException:
            self.discard()
            raise
        lines = [f"wrote {self.folder / name}" for name in self.names]
        try:  # the stage's name now holds the old set
            if swap:
                shutil.rmtree(stage)
        except OSError as exc:
            lines.append(f"warning: the previous files stay in {stage}: {exc.strerror or exc}")
        os.close(fd)
        self.fd = self.stage = None
        self.made = []
        return lines

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
        staged = set(self.names)
        with os.scandir(target) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            shown = str(self.folder / entry.name)
            st = entry.stat(follow_symlinks=False)
            if entry.name in staged:
                if not stat.S_ISREG(st.st_mode):
                    raise InputError("is not a regular file; nothing was written", file=shown,
                                     hint="remove it or choose another --out-dir folder")
            elif stat.S_ISDIR(st.st_mode):
                raise InputError("is a folder; render -d replaces the whole folder at once, "
                                 "so it writes only into a folder of files; nothing was "
                                 "written", file=shown,
                                 hint="give the manifests a folder of their own")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                raise InputError("is not a file, a link or a folder; nothing was written",
                                 file=shown, hint="remove it or choose another --out-dir folder")
            if stat.S_ISREG(st.st_mode) and _pinned(entry.path):
                raise InputError("cannot write: Operation not permitted; no file was changed",
                                 file=shown, hint="check the file's permissions and attributes "
                                 "(`lsattr`), or choose another --out-dir folder")
        for entry in entries:
            if entry.name in staged:
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

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
        self.names = []
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:
                break
        self.made = []


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
            stale = [e.path for e in listing if e.name.startswith(prefix)
                     and e.is_dir(follow_symlinks=False)]
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


class Spool:
    """Text for one stream, joined by sep, kept in a temporary file past a few MB, so that
    nothing reaches the stream unless every profile rendered."""

    def __init__(self, stream: IO[str], sep: str) -> None:
        import tempfile

        self.stream = stream
        self.sep = sep
        # closed by commit or discard, which render_all always reaches
        self.buffer: IO[str] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
            8 << 20, mode="w+", encoding="utf-8")
        self.count = 0

    def add(self, name: str, text: str) -> None:
        self.buffer.write((self.sep if self.count else "") + text)
        self.count += 1

    def commit(self) -> list[str]:
        import shutil

        self.buffer.seek(0)
        shutil.copyfileobj(self.buffer, self.stream)
        self.buffer.close()
        return []

    def discard(self) -> None:
        self.buffer.close()


Piece = Callable[[Workload], tuple[str, str]]  # a workload -> (file name, text)


def render_all(paths: Iterable[Path], piece: Piece, sink: Sink) -> tuple[Iterable[str], int]:
    """Render every profile into sink, one at a time; (stderr lines, exit code), the caller
    commits the sink when the code is 0. Bad input and error findings first, then two
    workloads of one name, then pieces refused (all of one kind reported together): any of
    them and the sink is discarded."""
    gate = Gate()
    first: dict[str, tuple[int, str]] = {}  # name -> (its first profile's index, path)
    # (the first profile's index, the name, its path, the second profile's path and line)
    duplicate: tuple[int, str, str, str, int | None] | None = None
    refused: list[str] = []
    try:
        for i, workload in enumerate(gate.passed(workloads(paths))):
            name = workload.plan.name
            if name in first:
                again = (*first[name][:1], name, first[name][1], workload.path,
                         workload.loaded.line("name"))
                duplicate = min(duplicate or again, again)
            first.setdefault(name, (i, workload.path))
            if gate.code != EXIT_OK or duplicate is not None:
                continue
            try:
                named = piece(workload)
            except InputError as exc:
                refused += exc.lines()
                continue
            sink.add(*named)
    except BaseException:
        sink.discard()
        raise
    lines: Iterable[str] = gate.lines
    code = gate.code
    if code == EXIT_OK and duplicate is not None:
        _, name, one, other, line = duplicate
        lines = [*lines, *InputError(f"two profiles render the workload {name!r}: {one} and {other}",
                            file=other, line=line, field="name",
                            hint="workload names must be unique within one call: rename one "
                            "of them").lines()]
        code = EXIT_INPUT
    elif code == EXIT_OK and refused:
        lines, code = [*lines, *refused], EXIT_INPUT
    if code != EXIT_OK:
        sink.discard()
    return lines, code


def prepare_all(paths: Iterable[Path], registry: PresetRegistry | None = None
                ) -> tuple[list[Workload], list[InputError]]:
    """Every profile's workload, kept (for what needs them all at once: one cluster session),
    and the bad input, collected instead of stopping."""
    done: list[Workload] = []
    bad: list[InputError] = []
    for item in workloads(paths, registry):
        (done if isinstance(item, Workload) else bad).append(item)  # type: ignore[arg-type]
    return done, bad


# --- cluster commands: which workload a NAME or PROFILE means -------------------------

def resolve_job(job: str, project: str | None) -> tuple[str, str, Workload | None]:
    """NAME|PROFILE -> (workload name, namespace, its workload when a profile was given); the
    namespace always comes from the site file."""
    from ..facts.kubeflow import DNS1035
    from ..plan.metadata import namespace_for

    if Path(job).suffix in (".yaml", ".yml") or Path(job).is_file():
        workload = prepare_workload(Path(job))
        return workload.plan.name, workload.plan.namespace, workload
    if not DNS1035.match(job) or len(job) > 63:
        raise InputError(f"{job!r} is neither a profile file nor a workload name", field="NAME")
    if project is None:
        raise InputError("a workload NAME needs --project (or pass its profile instead)",
                         field="--project")
    return job, namespace_for(PresetRegistry().site(), project), None
