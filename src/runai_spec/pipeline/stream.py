"""Profile paths -> workloads, one at a time: the one loop over many profiles, streaming."""

import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, overload

from ..errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError, Location, RunaiSpecError
from ..findings import Finding
from ..load.registry import PresetRegistry
from ..records import Record
from .spool import LineSpool, Names, Sink, Spooled
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
    """Profile arguments as given, kept as one string (a call with 100,000 profiles keeps
    their names, about 1.3 MB, not 100,000 objects), each made its Path (profile_path) when
    read. `-` is standard input, read once. `@FILE` stands for the profiles FILE lists, one a
    line (relative to the current folder, as xargs reads them): a command line holds a few
    thousand profiles at most (ARG_MAX), and the interpreter keeps every argument several
    times over, about 0.4 KiB each (issue 29 item 2)."""

    def __init__(self, args: Iterable[str]) -> None:
        self._starts = array("q")
        self._stdin: Path | None = None
        chunks: list[str] = []  # joined a thousand names at a time
        names: list[str] = []
        at = 0
        for arg in args:
            for name in _listed(arg):
                if name == "-" and self._stdin is None:
                    self._stdin = profile_path(Path("-"))
                self._starts.append(at)
                at += len(name) + 1
                names.append(name)
                if len(names) == 1000:
                    chunks.append("\0".join(names) + "\0")
                    names = []
        self._text = "".join([*chunks, *(["\0".join(names) + "\0"] if names else [])])

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> Path: ...
    @overload
    def __getitem__(self, index: slice) -> list[Path]: ...
    def __getitem__(self, index: int | slice) -> Path | list[Path]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start = self._starts[index]
        name = self._text[start : self._text.index("\0", start)]
        if name == "-" and self._stdin is not None:
            return self._stdin
        return profile_path(Path(name))


def _listed(arg: str) -> Iterator[str]:
    """ARG, or for `@FILE` the lines of FILE (blank lines skipped)."""
    if not arg.startswith("@") or arg == "@":
        yield arg
        return
    listing = Path(arg[1:])
    try:
        with listing.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    yield line.rstrip("\r\n")
    except FileNotFoundError:
        raise InputError(
            "no such file (a list of profiles, one a line)",
            file=str(listing),
            hint="write the list first, e.g. `ls profiles/*.yaml > list.txt`, or name a profile "
            "starting with @ as ./@name",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the list of profiles: {exc}", file=str(listing)) from None


def workloads(
    paths: Iterable[Path], registry: PresetRegistry | None = None
) -> Iterator[Workload | InputError]:
    """Each profile carried through, in order: its workload, or the bad input that stopped it.
    Nothing is kept: a workload lives until the caller drops it."""
    registry = registry or PresetRegistry()
    for path in paths:
        try:
            yield prepare_workload(path, registry)
        except InputError as exc:
            yield exc


class Gate:
    """What stops a many-profile command, collected as the profiles stream past: bad input
    (exit 2) reported before the findings (1), as when every profile was loaded first."""

    def __init__(self) -> None:
        self.bad = LineSpool()
        self.notes = LineSpool()
        self.bad_count = 0
        self.failed = 0

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


class ProfileCheck(Record):
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
        return (
            f"{self.workload}: {self.layout}, {self.pods} pod(s) x {self.procs_per_pod} "
            f"process(es), world size {self.world_size}"
        )


# ProfileCheck as the spool writes it (marshal: builtins only), and back: its fields, its
# findings' and their locations', in the records' order (tests/pipeline/test_streaming.py
# sets every field of each to a value of its own and reads it back).
def _check_record(check: ProfileCheck) -> tuple[Any, ...]:
    findings = tuple(
        (f.rule, (f.location.file, f.location.line, f.location.field), f.message, f.hint, f.severity)
        for f in check.findings
    )
    return (
        check.path,
        check.workload,
        check.layout,
        check.pods,
        check.procs_per_pod,
        check.world_size,
        findings,
    )


def _check_from_record(record: tuple[Any, ...]) -> ProfileCheck:
    path, workload, layout, pods, procs_per_pod, world_size, findings = record
    return ProfileCheck(  # (the spool's decode)
        path,
        workload,
        layout,
        pods,
        procs_per_pod,
        world_size,
        tuple(
            Finding(rule, Location(*at), message, hint, severity)
            for rule, at, message, hint, severity in findings
        ),
    )


def profile_check(workload: Workload, extra: Iterable[Finding] = ()) -> ProfileCheck:
    p = workload.plan
    return ProfileCheck(
        workload.path, p.name, p.layout, p.pods, p.procs_per_pod, p.world_size, (*workload.findings, *extra)
    )


def check_profiles(
    paths: Iterable[Path],
    crd: Path | None = None,
    live: Callable[[Workload], list[Finding]] | None = None,
) -> tuple[Spooled[ProfileCheck], list[RunaiSpecError]]:
    """`validate`: every profile checked (and, with crd, its rendered objects against that
    CRD's schema), collecting bad input instead of stopping."""
    extra: Callable[[Workload], list[Finding]] = lambda w: []  # noqa: E731
    if crd is not None:
        from ..check.crd import crd_findings, load_crd_schemas

        schemas = load_crd_schemas(crd)
        # the plan's own job kind (an MPIJob for launcher: mpi), never left unchecked
        extra = lambda w: crd_findings(list(w.manifests), schemas, w.plan.workload.kind, w.path)  # noqa: E731
    checks: Spooled[ProfileCheck] = Spooled(_check_record, _check_from_record)
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

Piece = Callable[[Workload], tuple[str, str]]  # a workload -> (file name, text)


def render_all(paths: Sequence[Path], piece: Piece, sink: Sink) -> tuple[Iterable[str], int]:
    """Render every profile into sink, one at a time; (stderr lines, exit code), the caller
    commits the sink when the code is 0. Bad input and error findings first, then two
    workloads of one name, then pieces refused (all of one kind reported together): any of
    them and the sink is discarded. What is kept per profile is its name's hash (Names)."""
    gate = Gate()
    registry = PresetRegistry()
    names = Names()
    places = array("q")  # each name's profile, by its index in paths
    duplicate: Duplicate | None = None
    refused: list[str] = []
    try:
        for index, item in enumerate(workloads(paths, registry)):
            for workload in gate.passed([item]):
                again = _again(paths, registry, workload, [places[i] for i in names.add(workload.plan.name)])
                places.append(index)
                duplicate = min(duplicate or again, again) if again else duplicate
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
        lines = [
            *lines,
            *InputError(
                f"two profiles render the workload {name!r}: {one} and {other}",
                file=other,
                line=line,
                field="name",
                hint="workload names must be unique within one call: rename one of them",
            ).lines(),
        ]
        code = EXIT_INPUT
    elif code == EXIT_OK and refused:
        lines, code = [*lines, *refused], EXIT_INPUT
    if code != EXIT_OK:
        sink.discard()
    return lines, code


# (the first profile's index, the name, its path, the second profile's path and line)
Duplicate = tuple[int, str, str, str, int | None]


def _again(
    paths: Sequence[Path], registry: PresetRegistry, workload: Workload, earlier: list[int]
) -> Duplicate | None:
    """WORKLOAD's name met again: the first of the EARLIER profiles (indexes in paths, whose
    names share its name's hash) that renders the same name, prepared once more to confirm."""
    for index in earlier:
        first = prepare_workload(paths[index], registry)
        if first.plan.name == workload.plan.name:
            return (index, first.plan.name, first.path, workload.path, workload.loaded.line("name"))
    return None


def prepare_all(
    paths: Iterable[Path], registry: PresetRegistry | None = None
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
        raise InputError("a workload NAME needs --project (or pass its profile instead)", field="--project")
    return job, namespace_for(PresetRegistry().site(), project), None
