"""The Kubernetes back-end: server-side apply with the kubeconfig, the pods' logs, the live checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .checks import live_findings
from .delete import delete_job
from .jobs import Confirm, Connection, Deleted, Job, LiveDiff, kubernetes_target, live_job
from .logs import Follow, FollowResult, LogsResult, follow_logs, print_logs, save_logs
from .objects import managed_by_us
from .refs import Ref
from .session import Session, Target, enable_debug
from .status import StatusResult, job_status
from .submit import SubmitResult, live_objects_all, submit_manifests

if TYPE_CHECKING:
    from ..findings import Finding
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest


class KubernetesBackend:
    """One kubeconfig load (one Session) per command, made at its first request."""

    name = "kubernetes"
    error_file = "cluster"

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._session: Session | None = None
        self._found: dict[Job, Ref] = {}  # a job named by NAME: the kind it was found as

    def __enter__(self) -> KubernetesBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def target(self) -> Target:
        if self.connection.debug:
            enable_debug()
        c = self.connection
        target = kubernetes_target(c.kubeconfig, c.context, c.progress)
        return dataclasses.replace(target, timeout=c.timeout(target.timeout))

    def connect(self) -> None:
        """The kubeconfig loaded (once) and its client made."""
        if self._session is None:
            self._session = Session(self.target())

    @property
    def session(self) -> Session:
        self.connect()
        assert self._session is not None
        return self._session

    def describe(self, job: Job) -> str:
        return str(self._found.get(job, job.refs[0]))

    def smoke_backend(self, submitting: bool = False) -> KubernetesBackend:
        return self  # the smoke test's ConfigMap and job are Kubernetes objects: here already

    def logs_backend(self) -> KubernetesBackend:
        return self

    def live_checks(self, workload: Workload) -> list[Finding]:
        return live_findings(self.session, workload)

    def submit(
        self, workload: Workload, manifests: Sequence[Manifest], *, dry_run: bool, replace: bool
    ) -> SubmitResult:
        """Server-side apply; a dry run is the API server's `dryRun=All` answer."""
        return submit_manifests(manifests, self.session, dry_run=dry_run, replace=replace)

    def job_ref(self, job: Job) -> Ref:
        """The job's own object: its plan's kind, or looked up by NAME (jobs.live_job) once per
        command (status --watch asks again and again)."""
        if job not in self._found:
            self._found[job] = live_job(self.session, job)
        return self._found[job]

    def status(self, job: Job) -> StatusResult:
        ref = self.job_ref(job)
        return job_status(ref.name, ref.namespace, self.session, ref.resource)

    def save_logs(self, job: Job, out: Path, previous: bool) -> LogsResult:
        ref = self.job_ref(job)
        return save_logs(ref.name, ref.namespace, out, self.session, previous=previous, resource=ref.resource)

    def print_logs(
        self, job: Job, sink: IO[bytes], previous: bool, pod: str | None, tail: int | None
    ) -> list[str]:
        ref = self.job_ref(job)
        return print_logs(
            ref.name,
            ref.namespace,
            self.session,
            sink,
            previous=previous,
            pod=pod,
            tail=tail,
            resource=ref.resource,
        )

    def follow_logs(self, job: Job, sink: IO[bytes], follow: Follow) -> FollowResult:
        ref = self.job_ref(job)
        return follow_logs(ref.name, ref.namespace, self.session, sink, follow, ref.resource)

    def delete(self, job: Job, confirm: Confirm | None) -> Deleted:
        """Only what runai-spec created, exactly the objects checked; with --smoke either
        object may already be gone."""

        def asked(refs: list[Ref]) -> bool:
            assert confirm is not None
            return confirm([str(ref) for ref in refs])

        refs = [self.job_ref(job), *job.refs[1:]]
        result = delete_job(refs, self.session, missing_ok=job.smoke, confirm=asked if confirm else None)
        return Deleted(result.deleted, result.missing, result.declined)

    def live_diff(self, workloads: Sequence[Workload]) -> list[LiveDiff]:
        """Each workload's objects as the cluster holds them, against a dry-run apply."""
        live = live_objects_all([w.manifests for w in workloads], self.target())
        return [
            LiveDiff(
                tuple(w.manifests),
                tuple((o.live, o.applied) for o in objects),
                tuple(
                    f"note: {o.ref}: exists and was not created by runai-spec; submit will not touch it"
                    for o in objects
                    if o.live is not None and not managed_by_us(o.live)
                ),
            )
            for w, objects in zip(workloads, live, strict=True)
        ]
