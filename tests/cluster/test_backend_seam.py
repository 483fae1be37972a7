"""The back-end seam (issue 37 item 1): a third back-end, written and registered here alone,
takes submit, its dry run, submit --wait, status and delete through the CLI; --via is checked
against the registry; the two real back-ends implement the whole interface."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from kube_helpers import NAME, NS, PROFILE, run
from runai_spec.cluster import backend
from runai_spec.cluster.backend import (
    Backend,
    Confirm,
    Connection,
    Deleted,
    Follow,
    FollowResult,
    Job,
    LiveDiff,
    LogsResult,
    ObjectOutcome,
    PodState,
    StatusResult,
    SubmitResult,
    register_backend,
    unsupported,
)
from runai_spec.errors import EXIT_CLUSTER, EXIT_INPUT, ClusterError, InputError
from runai_spec.findings import Finding
from runai_spec.pipeline.workload import Workload
from runai_spec.render.manifests import Manifest

FAKE = "queue"  # the third back-end's name: a batch queue that takes whole manifests


@dataclass
class Calls:
    """What the fake back-end was asked, in order, and what it answers."""

    submitted: list[tuple[list[Manifest], bool, bool]] = field(default_factory=list)
    statuses: list[Job] = field(default_factory=list)
    deleted: list[Job] = field(default_factory=list)
    phase: str = "Running"
    exited: bool = False


class QueueBackend:
    """A back-end that knows nothing of Kubernetes: it keeps what it is sent."""

    name = FAKE
    error_file = FAKE

    def __init__(self, connection: Connection, calls: Calls) -> None:
        self.connection, self.calls = connection, calls

    def __enter__(self) -> QueueBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.exited = True

    def connect(self) -> None:
        pass

    def describe(self, job: Job) -> str:
        return f"queue entry {job.project}/{job.name}"

    def smoke_backend(self, submitting: bool = False) -> QueueBackend:
        return self

    def logs_backend(self) -> QueueBackend:
        return self

    def live_checks(self, workload: Workload) -> list[Finding]:
        return []

    def submit(
        self, workload: Workload, manifests: Sequence[Manifest], *, dry_run: bool, replace: bool
    ) -> SubmitResult:
        self.calls.submitted.append(([dict(m) for m in manifests], dry_run, replace))
        action = "would create" if dry_run else "created"
        return SubmitResult(
            tuple(ObjectOutcome(f"queue/{m['metadata']['name']}", action, dict(m)) for m in manifests),
            dry_run,
        )

    def status(self, job: Job) -> StatusResult:
        self.calls.statuses.append(job)
        pod = PodState(f"{job.name}-master-0", "Master", 0, self.calls.phase, "queued", 0, None, None)
        return StatusResult(job.name, job.namespace, self.calls.phase, None, (pod,), ())

    def save_logs(self, job: Job, out: Path, previous: bool) -> LogsResult:
        raise unsupported(FAKE, "reading logs")

    def print_logs(
        self, job: Job, sink: IO[bytes], previous: bool, pod: str | None, tail: int | None
    ) -> list[str]:
        raise unsupported(FAKE, "reading logs")

    def follow_logs(self, job: Job, sink: IO[bytes], follow: Follow) -> FollowResult:
        raise unsupported(FAKE, "reading logs")

    def delete(self, job: Job, confirm: Confirm | None) -> Deleted:
        self.calls.deleted.append(job)
        return Deleted((self.describe(job),))

    def live_diff(self, workloads: Sequence[Workload]) -> list[LiveDiff]:
        return [LiveDiff(tuple(w.manifests), tuple((None, m) for m in w.manifests)) for w in workloads]


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """QueueBackend registered by name for this test alone."""
    monkeypatch.setattr(backend, "_FACTORIES", dict(backend._FACTORIES))  # undone after the test
    calls = Calls()
    register_backend(FAKE, lambda connection: QueueBackend(connection, calls))
    yield calls


def rendered() -> list[dict[str, Any]]:
    """`runai-spec render`'s manifests, as its stdout has them."""
    result = run("render", PROFILE)
    assert result.exit_code == 0, result.stderr
    return [dict(d) for d in yaml.safe_load_all(result.stdout) if d]


def test_submit_through_a_registered_third_back_end_sends_it_the_rendered_manifests(queue: Calls) -> None:
    result = run("submit", PROFILE, "--via", FAKE)
    assert result.exit_code == 0, result.output
    assert queue.submitted == [(rendered(), False, False)]
    assert f"created: queue/{NAME}" in result.stderr
    assert queue.exited  # the command let go of it


def test_a_dry_run_through_it_prints_what_it_would_store_and_replace_reaches_it(queue: Calls) -> None:
    result = run("submit", PROFILE, "--via", FAKE, "--dry-run", "server", "--replace")
    assert result.exit_code == 0, result.output
    assert queue.submitted == [(rendered(), True, True)]
    assert [d for d in yaml.safe_load_all(result.stdout) if d] == rendered()


def test_submit_wait_watches_the_third_back_end_and_a_failed_job_is_its_own_error(
    queue: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runai_spec.cli.common.watch_sleep", lambda seconds: None)
    queue.phase = "Failed"
    result = run("submit", PROFILE, "--via", FAKE, "--wait")
    assert result.exit_code == EXIT_CLUSTER, result.output
    assert [(j.name, j.namespace) for j in queue.statuses] == [(NAME, NS)]
    assert f"error: {FAKE}: queue entry nlp-lab/{NAME}: Failed (the status above says why)" in result.stderr


def test_status_and_delete_through_it_name_the_job_by_name_and_project(queue: Calls) -> None:
    result = run("status", NAME, "--project", "nlp-lab", "--via", FAKE)
    assert result.exit_code == 0, result.output
    assert "Running" in result.stdout and f"{NAME}-master-0" in result.stdout
    result = run("delete", PROFILE, "--via", FAKE, "--yes")
    assert result.exit_code == 0, result.output
    assert f"deleted: queue entry nlp-lab/{NAME}" in result.stderr
    assert [(j.name, j.namespace, j.project) for j in [*queue.statuses, *queue.deleted]] == [
        (NAME, NS, "nlp-lab"),
        (NAME, NS, "nlp-lab"),
    ]


@pytest.mark.parametrize(("typo", "closest"), [("kubernets", "kubernetes"), ("runia", "runai")])
def test_an_unknown_back_end_is_bad_input_naming_the_closest(typo: str, closest: str) -> None:
    for args in (["submit", PROFILE], ["status", NAME, "-p", "nlp-lab"], ["delete", PROFILE, "--yes"]):
        result = run(*args, "--via", typo)
        assert result.exit_code == EXIT_INPUT, result.output
        assert f"did you mean {closest!r}?" in result.stderr
        assert "hint: back-ends: kubernetes, runai" in result.stderr


def test_a_back_end_registered_later_is_accepted_by_name(queue: Calls) -> None:
    assert FAKE in backend.backend_names()
    assert backend.checked_name(FAKE) == FAKE
    with pytest.raises(InputError, match="did you mean 'queue'"):
        backend.checked_name("queu")


# -- the real back-ends ------------------------------------------------------------------------


def members(protocol: type) -> dict[str, Any]:
    """The interface's methods and attributes, as the Protocol declares them."""
    names = {n for n in vars(protocol) if not n.startswith("_") or n in ("__enter__", "__exit__")}
    names |= set(getattr(protocol, "__annotations__", {}))
    return {n: getattr(protocol, n, None) for n in sorted(names - {"_is_protocol", "_is_runtime_protocol"})}


def shape(method: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """A method's parameters: names, kinds and defaults (not annotations, which name the class)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(method).parameters.values()]


@pytest.mark.parametrize("name", ["kubernetes", "runai", FAKE])
def test_every_registered_back_end_implements_the_whole_interface(name: str, queue: Calls) -> None:
    made = backend.open_backend(name, Connection())
    assert isinstance(made, Backend)
    assert made.name == name
    for member, declared in members(Backend).items():
        assert hasattr(made, member), f"{name} lacks {member}"
        if callable(declared):
            assert shape(getattr(type(made), member)) == shape(declared), f"{name}.{member}"


def test_the_interface_has_submit_status_logs_delete_live_diff_and_the_live_checks() -> None:
    declared = set(members(Backend))
    assert declared >= {
        "submit",
        "status",
        "save_logs",
        "print_logs",
        "follow_logs",
        "delete",
        "live_diff",
        "live_checks",
        "name",
        "error_file",
    }


def test_run_ai_reads_no_logs_itself_and_says_where_they_are_read() -> None:
    runai = backend.open_backend("runai", Connection())
    job = Job(NAME, NS, "nlp-lab", ())
    with pytest.raises(ClusterError) as raised:
        runai.save_logs(job, Path("logs"), False)
    assert raised.value.hint is not None and "Kubernetes API" in raised.value.hint
    assert runai.logs_backend().name == "kubernetes"
    assert runai.smoke_backend().name == "kubernetes"
