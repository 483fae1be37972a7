"""The Run:ai back-end: a render as a Run:ai workload (Workloads V2); smoke tests, logs via Kubernetes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import ClusterError, InputError
from ..facts import mpi
from ..facts.kubeflow import KIND
from . import runai_api
from .jobs import Confirm, Connection, Deleted, Job, LiveDiff, unsupported
from .kubernetes import KubernetesBackend
from .logs import Follow, FollowResult, LogsResult
from .objects import managed_by_us
from .runai import (
    Wait,
    WorkloadMetadata,
    delete_workload,
    live_workloads,
    submit_workload,
    workload_status,
)
from .status import StatusResult, pod_restarts
from .submit import SubmitResult

if TYPE_CHECKING:
    from ..findings import Finding
    from ..load.site import RunaiControlPlane
    from ..pipeline.workload import Workload
    from ..render.manifests import Manifest

SMOKE_NOTE = (
    "note: the smoke test goes through the Kubernetes client (its ConfigMap is no "
    "Run:ai workload); the workload itself goes through Run:ai"
)

# The jobs Workloads V2 takes as they are (Run:ai's "Supported Workload Types": Kubeflow's
# PyTorchJob and MPIJob are registered): the rendered job of either launcher family.
JOB_KINDS = (KIND, mpi.KIND)


LOGS_HINT = "`runai-spec logs` reads them through the Kubernetes API (logs_backend)"


class RunaiBackend:
    """One control-plane session (one token) per command, opened at its first request."""

    name = "runai"
    error_file = "runai"

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._session: runai_api.RunaiSession | None = None
        self._kubernetes: KubernetesBackend | None = None

    def __enter__(self) -> RunaiBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._kubernetes is not None:
                self._kubernetes.__exit__(*exc)
        finally:
            if self._session is not None:
                self._session.__exit__(*exc)
                self._session = None

    def target(self) -> runai_api.RunaiTarget:
        """The control plane: looked up in runai_api, where the tests slow it down."""
        from .session import enable_debug

        if self.connection.debug:
            enable_debug()
        plane = self.plane()
        target = runai_api.RunaiTarget(
            url=plane.url, cluster=plane.cluster, category=plane.category, progress=self.connection.progress
        )
        return dataclasses.replace(target, timeout=self.connection.timeout(target.timeout))

    def plane(self) -> RunaiControlPlane:
        """The site's control plane; asked for only when a request goes to it (status and
        delete of a smoke test go through Kubernetes without one)."""
        site = self.connection.site
        plane = site.submit.runai if site is not None else None
        if plane is None:
            raise InputError(
                "--via runai needs the site's Run:ai control plane",
                field="--via",
                hint="the AI Engineers set submit.runai (url, cluster) in site.yaml; "
                "until then submit with --via kubernetes",
            )
        return plane

    def connect(self) -> None:
        """The control plane's connection pool (its token comes with the first request)."""
        if self._session is None:
            self._session = runai_api.RunaiSession(self.target())

    @property
    def session(self) -> runai_api.RunaiSession:
        self.connect()
        assert self._session is not None
        return self._session

    @property
    def kubernetes(self) -> KubernetesBackend:
        """What Run:ai's API does not do (a ConfigMap, the pods' logs) goes through here."""
        if self._kubernetes is None:
            self._kubernetes = KubernetesBackend(self.connection)
        return self._kubernetes

    def describe(self, job: Job) -> str:
        return f"runai workload {job.project}/{job.name}"

    def smoke_backend(self, submitting: bool = False) -> KubernetesBackend:
        if submitting:
            self.plane()
            if self.connection.progress is not None:
                self.connection.progress(SMOKE_NOTE)
        return self.kubernetes

    def live_checks(self, workload: Workload) -> list[Finding]:
        return []  # the live checks read the cluster with the kubeconfig, which --via runai needs not

    def submit(
        self, workload: Workload, manifests: Sequence[Manifest], *, dry_run: bool, replace: bool
    ) -> SubmitResult:
        """The rendered job (PyTorchJob or MPIJob), unchanged, as a Run:ai workload; a dry run
        is the control plane's `dryRun=true` answer where the cluster's version documents dryRun (else
        refused); --replace is Run:ai's update call (manifest, priority, category)."""
        (job,) = [dict(m) for m in manifests if m.get("kind") in JOB_KINDS]
        return submit_workload(job, metadata_of(workload), self.session, dry_run=dry_run, replace=replace)

    def status(self, job: Job) -> StatusResult:
        """Run:ai's phase and pods; each pod's restart count from the Kubernetes API where the
        kubeconfig reaches it (Run:ai's pods endpoint reports none), else unknown."""
        if job.smoke:
            return self.kubernetes.status(job)
        result = workload_status(job.name, job.project, job.namespace, self.session)
        counts = self._restarts(job) if result.pods else {}
        pods = tuple(dataclasses.replace(p, restarts=counts.get(p.name)) for p in result.pods)
        return dataclasses.replace(result, pods=pods)

    def _restarts(self, job: Job) -> dict[str, int]:
        """The pods' restart counts as the kubelet reports them; {} where the cluster cannot be
        read with the kubeconfig (none, unreachable, forbidden): the counts stay unknown."""
        try:
            return pod_restarts(job.name, job.namespace, self.kubernetes.session)
        except (ClusterError, InputError):
            return {}

    def logs_backend(self) -> KubernetesBackend:
        return self.kubernetes  # the pods run in the cluster: their logs are read there

    def save_logs(self, job: Job, out: Path, previous: bool) -> LogsResult:
        raise unsupported(self.name, "reading logs", LOGS_HINT)

    def print_logs(
        self, job: Job, sink: IO[bytes], previous: bool, pod: str | None, tail: int | None
    ) -> list[str]:
        raise unsupported(self.name, "reading logs", LOGS_HINT)

    def follow_logs(self, job: Job, sink: IO[bytes], follow: Follow) -> FollowResult:
        raise unsupported(self.name, "reading logs", LOGS_HINT)

    def delete(self, job: Job, confirm: Confirm | None) -> Deleted:
        if job.smoke:
            return self.kubernetes.delete(job, confirm)
        """DELETE through Run:ai; with delete --wait, until the workload is no longer listed
        (it stays in phase Deleting a while)."""
        wait = self.connection.delete_wait
        result = delete_workload(
            job.name, job.project, self.session, confirm=confirm, wait=Wait(*wait) if wait else None
        )
        if result is None:
            return Deleted((), declined=True)
        return Deleted(result.gone, deleting=result.deleting)

    def live_diff(self, workloads: Sequence[Workload]) -> list[LiveDiff]:
        """The workloads as Run:ai holds them, against what submitting would store."""
        if not workloads:
            return self.kubernetes.live_diff(workloads)
        jobs = [job_of(w) for w in workloads]
        pairs = live_workloads(
            [(metadata_of(w), j) for w, j in zip(workloads, jobs, strict=True)], self.target()
        )
        return [
            LiveDiff(
                (job,),
                (pair,),
                ()
                if pair[0] is None or managed_by_us(pair[0])
                else (
                    f"note: runai workload {w.plan.project}/{w.plan.name}: exists and was not "
                    "submitted by runai-spec; submit will not touch it",
                ),
            )
            for w, job, pair in zip(workloads, jobs, pairs, strict=True)
        ]


def metadata_of(workload: Workload) -> WorkloadMetadata:
    """What Run:ai schedules the workload by: its name and project, the preset's priority."""
    preset = workload.approved.preset
    return WorkloadMetadata(
        name=workload.plan.name,
        project=workload.plan.project,
        priority=preset.priority,
        preemptible=preset.preemptible,
    )


def job_of(workload: Workload) -> Manifest:
    (job,) = [dict(m) for m in workload.manifests if m.get("kind") in JOB_KINDS]
    return job
