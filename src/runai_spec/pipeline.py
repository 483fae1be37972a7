"""Profile paths -> workloads, one at a time: the one loop over many profiles, streaming."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from .errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError, RunaiSpecError
from .findings import Finding
from .loading import new_file, write_new
from .presets import PresetRegistry
from .workload import Workload, prepare_workload


class StdinProfile(type(Path())):  # type: ignore[misc]
    """`-`: the profile read from standard input, once; named `<stdin>` in messages."""

    _data: bytes | None = None
    is_stdin = True  # loading.read_text reads it through open(), not the file system

    def __str__(self) -> str:
        return "<stdin>"

    def open(self, mode: str = "r", *args: object, **kwargs: object) -> IO[bytes]:
        import io
        import sys

        from .loading import MAX_BYTES

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


@dataclass
class Gate:
    """What stops a many-profile command, collected as the profiles stream past: bad input
    (exit 2) reported before the findings (1), as when every profile was loaded first."""

    bad: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
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
    def lines(self) -> list[str]:
        return [*self.bad, *self.notes]

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
                   ) -> tuple[list[ProfileCheck], list[RunaiSpecError]]:
    """`validate`: every profile checked (and, with crd, its rendered objects against that
    CRD's schema), collecting bad input instead of stopping."""
    extra: Callable[[Workload], list[Finding]] = lambda w: []  # noqa: E731
    if crd is not None:
        from .crd import crd_findings, load_crd_schemas

        schemas = load_crd_schemas(crd)
        extra = lambda w: crd_findings(list(w.manifests), schemas, "PyTorchJob", w.path)  # noqa: E731
    checks: list[ProfileCheck] = []
    bad: list[RunaiSpecError] = []
    for item in workloads(paths):
        if isinstance(item, Workload):
            checks.append(profile_check(item, [*extra(item), *(live(item) if live else [])]))
        else:
            bad.append(item)
    return checks, bad


def check_exit(checks: list[ProfileCheck], bad: list[RunaiSpecError]) -> int:
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
    """Files written under hidden temporary names as they come; `commit` renames them all into
    place, `discard` (or a failed write) removes them and any folder made for them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.made: list[Path] = []
        self.staged: list[tuple[Path, Path]] = []

    def _folder(self) -> None:
        if self.made or self.folder.is_dir():
            return
        missing = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        self.made = missing  # deepest first

    def add(self, name: str, text: str) -> None:
        try:
            self._folder()
            tmp = write_new(self.folder, f".{name}.tmp-", text)
        except OSError as exc:
            self.discard()
            raise InputError(f"cannot write: {exc.strerror}", file=str(self.folder)) from None
        self.staged.append((tmp, self.folder / name))

    def commit(self) -> list[str]:
        """Every file replaced, or none: each previous file is kept under a backup name until
        all are in place, and put back when one fails."""
        for _, final in self.staged:  # every target checked before the first rename
            if final.is_symlink() or (final.exists() and not final.is_file()):
                self.discard()
                raise InputError("is not a regular file; nothing was written", file=str(final),
                                 hint="remove it or choose another --out-dir folder")
        saved: list[tuple[Path, Path]] = []  # (file, its previous content's backup)
        created: list[Path] = []  # files that were not there before
        final = self.folder
        try:
            for tmp, final in self.staged:
                backup = _backup(final) if final.exists() else None
                if backup is not None:
                    saved.append((final, backup))
                os.replace(tmp, final)
                if backup is None:
                    created.append(final)
        except BaseException as exc:
            kept = _roll_back(saved, created)
            self.discard()
            if not isinstance(exc, OSError):
                raise
            reason = f"cannot write: {exc.strerror or exc}"
            if kept:
                raise InputError(f"{reason}; could not undo: {'; '.join(kept)}",
                                 file=str(final), hint="move each backup over its file by "
                                 "hand and remove the new files") from None
            raise InputError(f"{reason}; no file was changed", file=str(final),
                             hint="check the file's permissions and attributes (`lsattr`), "
                             "or choose another --out-dir folder") from None
        for _, backup in saved:
            backup.unlink(missing_ok=True)
        return [f"wrote {final}" for _, final in self.staged]

    def discard(self) -> None:
        for tmp, _ in self.staged:
            tmp.unlink(missing_ok=True)
        self.staged = []
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:
                break


def _backup(path: Path) -> Path:
    """path's present content under a new hidden name beside it: a second hard link, so path
    itself stays in place; where the file system has no hard links, path renamed."""
    prefix = f".{path.name}.bak-"
    for _ in range(100):
        backup = path.with_name(f"{prefix}{secrets.token_hex(8)}")
        try:
            os.link(path, backup, follow_symlinks=False)
            return backup
        except FileExistsError:
            continue
        except OSError:
            break
    backup, fd = new_file(path.parent, prefix)  # the name is ours: the rename lands on it
    os.close(fd)
    try:
        os.replace(path, backup)
    except BaseException:
        backup.unlink(missing_ok=True)
        raise
    return backup


def _roll_back(saved: list[tuple[Path, Path]], created: list[Path]) -> list[str]:
    """Each saved file's previous content back in place, each created file removed; what
    could not be undone, in words (such a backup is kept)."""
    kept: list[str] = []
    for path in created:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            kept.append(f"{path} is new and not removed")
    for path, backup in reversed(saved):
        try:
            if not _same_file(path, backup):  # else a hard link of a file never replaced
                os.replace(backup, path)
            backup.unlink(missing_ok=True)
        except OSError:
            kept.append(f"{path}'s previous content is in {backup}")
    return kept


def _same_file(a: Path, b: Path) -> bool:
    try:
        one, two = os.stat(a, follow_symlinks=False), os.stat(b, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


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


def render_all(paths: Iterable[Path], piece: Piece, sink: Sink) -> tuple[list[str], int]:
    """Render every profile into sink, one at a time; (stderr lines, exit code), the caller
    commits the sink when the code is 0. Bad input and error findings first, then two
    workloads of one name, then pieces refused (all of one kind reported together): any of
    them and the sink is discarded."""
    gate = Gate()
    first: dict[str, int] = {}
    duplicate: tuple[int, str] | None = None
    refused: list[str] = []
    try:
        for i, workload in enumerate(gate.passed(workloads(paths))):
            name = workload.plan.name
            if name in first:
                duplicate = min(duplicate or (first[name], name), (first[name], name))
            first.setdefault(name, i)
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
    lines, code = gate.lines, gate.code
    if code == EXIT_OK and duplicate is not None:
        lines += InputError(f"two profiles render the workload {duplicate[1]!r}", field="name",
                            hint="workload names must be unique within one call").lines()
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
    from .kubeflow import DNS1035
    from .plan import namespace_for

    if Path(job).suffix in (".yaml", ".yml") or Path(job).is_file():
        workload = prepare_workload(Path(job))
        return workload.plan.name, workload.plan.namespace, workload
    if not DNS1035.match(job) or len(job) > 63:
        raise InputError(f"{job!r} is neither a profile file nor a workload name", field="NAME")
    if project is None:
        raise InputError("a workload NAME needs --project (or pass its profile instead)",
                         field="--project")
    return job, namespace_for(PresetRegistry().site(), project), None
