"""Back-ends behind one interface, chosen by name: submit and its dry run, status, logs, delete, diff --live.

The CLI imports this module of cluster/ and no other: a back-end is one class in its own module
and one `register_backend` line below (torchx's `Scheduler` and its named factories)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import InputError
from .jobs import (
    Confirm,
    Connection,
    Deleted,
    Job,
    LiveDiff,
    find_job,
    kubernetes_target,
    submitted_job,
    unsupported,
)
from .logs import Follow, FollowResult, LogsResult, NoLogs
from .params import read_admission, read_params  # `presets verify --live`, `presets sync`
from .refusals import AdmissionDenied
from .session import enable_debug as enable_debug  # --debug: the CLI turns it on as it reads options
from .status import PodState, StatusResult
from .submit import ObjectOutcome, SubmitResult

if TYPE_CHECKING:
    from ..findings import Finding
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest


@runtime_checkable
class Backend(Protocol):
    """Where a workload goes. Every method raises the tool's own errors (ClusterError,
    InputError), never ends the command itself; what a back-end cannot do is `unsupported`.
    A back-end reaches its server at its first request and lets go at `__exit__`."""

    name: str  # what --via and site.yaml's submit.via call it
    error_file: str  # the `error: FILE:` its errors name ("cluster", "runai")

    def __enter__(self) -> Backend: ...
    def __exit__(self, *exc: object) -> None: ...

    def connect(self) -> None:
        """Load the credentials now, so that a wrong kubeconfig fails before any work."""

    def describe(self, job: Job) -> str:
        """How messages name the job on this back-end."""
        ...

    def smoke_backend(self, submitting: bool = False) -> Backend:
        """Where the smoke test (a ConfigMap and a job) goes: this back-end or another."""
        ...

    def logs_backend(self) -> Backend:
        """Where the job's pods' logs are read: this back-end or another."""
        ...

    def live_checks(self, workload: Workload) -> list[Finding]:
        """`validate --live`'s read-only checks; submit stops on an error finding."""
        ...

    def submit(
        self, workload: Workload, manifests: Sequence[Manifest], *, dry_run: bool, replace: bool
    ) -> SubmitResult:
        """Send the manifests (idempotent: the same render is `unchanged`); a dry run stores
        nothing and answers with what the server would store."""
        ...

    def status(self, job: Job) -> StatusResult:
        """The job's phase and its pods, as the back-end reports them."""
        ...

    def save_logs(self, job: Job, out: Path, previous: bool) -> LogsResult:
        """Every pod's log in its own file under OUT."""
        ...

    def print_logs(
        self, job: Job, sink: IO[bytes], previous: bool, pod: str | None, tail: int | None
    ) -> list[str]:
        """The logs written to SINK; returns the pods skipped (NoLogs when every one was)."""
        ...

    def follow_logs(self, job: Job, sink: IO[bytes], follow: Follow) -> FollowResult:
        """The logs written to SINK as they grow, until the pods end or the time is up."""
        ...

    def delete(self, job: Job, confirm: Confirm | None) -> Deleted:
        """Delete what runai-spec made for the job (checked first; CONFIRM asked last)."""
        ...

    def live_diff(self, workloads: Sequence[Workload]) -> list[LiveDiff]:
        """Per workload, what the back-end holds against what submitting would store."""
        ...


Factory = Callable[[Connection], Backend]
_FACTORIES: dict[str, Factory] = {}


def register_backend(name: str, factory: Factory) -> None:
    """Make `--via NAME` (and site.yaml's submit.via) reach the back-end FACTORY builds."""
    _FACTORIES[name] = factory


def backend_names() -> list[str]:
    return sorted(_FACTORIES)


def checked_name(name: str) -> str:
    """NAME when a back-end is registered by it, else bad input naming the closest one."""
    if name in _FACTORIES:
        return name
    close = difflib.get_close_matches(name, backend_names(), n=1)
    raise InputError(
        f"no back-end {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
        field="--via",
        hint=f"back-ends: {', '.join(backend_names())}",
    )


def open_backend(via: str | None, connection: Connection) -> Backend:
    """The back-end of this call: --via, else the site's submit.via, else kubernetes."""
    name = via or (connection.site.submit.via if connection.site is not None else "kubernetes")
    return _FACTORIES[checked_name(name)](connection)


def _kubernetes(connection: Connection) -> Backend:
    from .kubernetes import KubernetesBackend

    return KubernetesBackend(connection)


def _runai(connection: Connection) -> Backend:
    from .runai_backend import RunaiBackend

    return RunaiBackend(connection)


register_backend("kubernetes", _kubernetes)
register_backend("runai", _runai)

__all__ = [
    "AdmissionDenied",
    "Backend",
    "Confirm",
    "Connection",
    "Deleted",
    "Factory",
    "Follow",
    "FollowResult",
    "Job",
    "LiveDiff",
    "LogsResult",
    "NoLogs",
    "ObjectOutcome",
    "PodState",
    "StatusResult",
    "SubmitResult",
    "backend_names",
    "checked_name",
    "enable_debug",
    "find_job",
    "kubernetes_target",
    "open_backend",
    "read_admission",
    "read_params",
    "register_backend",
    "submitted_job",
    "unsupported",
]
