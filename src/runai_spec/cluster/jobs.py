"""What a command asks of a back-end: how to reach it, the job it names, and the answers it gets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ClusterError
from ..render.manifests import Manifest
from .objects import checked, ref_of, served
from .refs import CONFIGMAP, JOBS, Ref, job_ref
from .refusals import refusal
from .session import Session, Target, json_body

if TYPE_CHECKING:
    from ..load.site import Site
    from ..pipeline.workload import Workload


@dataclass(frozen=True)
class Connection:
    """How one command reaches its back-end: the site file, the kubeconfig, and how patiently;
    progress says a retried request (and a back-end's notes) on stderr as it happens."""

    site: Site | None = None  # None: the default back-end (kubernetes), no Run:ai control plane
    kubeconfig: Path | None = None
    context: str | None = None
    debug: bool = False
    request_timeout: float | None = None
    progress: Callable[[str], None] | None = None
    # delete --wait: (at most seconds, seconds between polls) until what it deleted is gone,
    # where deletion takes time (Run:ai's Deleting phase); None: return once it was accepted
    delete_wait: tuple[float, float] | None = None

    def timeout(self, default: tuple[float, float]) -> tuple[float, float]:
        """(connect, read) seconds: --request-timeout caps both."""
        if self.request_timeout is None:
            return default
        return (min(default[0], self.request_timeout), self.request_timeout)


def kubernetes_target(
    kubeconfig: Path | None, context: str | None, progress: Callable[[str], None] | None = None
) -> Target:
    """The cluster of the kubeconfig: made by the package's `Target`, which the tests replace
    with one that never sleeps."""
    from .. import cluster

    return cluster.Target(kubeconfig=kubeconfig, context=context, progress=progress)


@dataclass(frozen=True)
class Job:
    """A workload as every back-end names it: its name, Run:ai project and namespace, and the
    objects runai-spec made for it on the cluster (the job first)."""

    name: str
    namespace: str
    project: str
    refs: tuple[Ref, ...]
    smoke: bool = False
    # a NAME without its profile: the job's kind is not known (refs[0] says PyTorchJob) and
    # the Kubernetes back-end looks it up as each of refs.JOBS (live_job)
    by_name: bool = False


def find_job(job: str, project: str | None, smoke: bool = False) -> Job:
    """NAME|PROFILE -> the job (with smoke: the smoke job and its ConfigMap)."""
    from ..pipeline.smoke import smoke_names
    from ..pipeline.stream import resolve_job

    name, namespace, workload = resolve_job(job, project)
    owner = workload.plan.project if workload is not None else str(project)
    if smoke:
        smoke_job, configmap = smoke_names(name)
        refs = (job_ref(smoke_job, namespace), Ref(CONFIGMAP, namespace, configmap))
        return Job(smoke_job, namespace, owner, refs, smoke=True)
    if workload is not None:
        return Job(name, namespace, owner, tuple(ref_of(m) for m in workload.manifests))
    return Job(name, namespace, owner, (job_ref(name, namespace),), by_name=True)


def submitted_job(workload: Workload, manifests: Sequence[Manifest]) -> Job:
    """The job among the manifests just submitted (submit --wait watches it)."""
    kinds = {r.kind for r in JOBS}
    ref = next(ref_of(m) for m in manifests if m.get("kind") in kinds)
    return Job(ref.name, ref.namespace, workload.plan.project, (ref,))


def live_job(session: Session, job: Job) -> Ref:
    """The job's own reference on the cluster. Given its profile, the plan's kind says it
    (refs from the rendered manifests). Given a NAME only, each kind of refs.JOBS the cluster
    serves is asked in turn (PyTorchJob first: a name runai-spec used before MPIJobs keeps its
    one request) and the first that holds NAME is the job; none holds it: the first kind
    served, whose lookup then says `not found` (none served: the PyTorchJob, whose lookup says
    the cluster serves no such resource)."""
    if not job.by_name:
        return job.refs[0]
    first: Ref | None = None
    for resource in JOBS:
        ref = job_ref(job.name, job.namespace, resource)
        resp = session.call("GET", resource.item(job.namespace, job.name))
        if resp.status == 200:
            checked(json_body(resp), str(ref))
            return ref
        if resp.status != 404:
            raise refusal(resp, ref, "read")
        if first is None and served(session, resource):
            first = ref
    return first or job.refs[0]


@dataclass(frozen=True)
class LiveDiff:
    """diff --live of one workload: the manifests compared, per manifest (what the back-end
    holds, None when absent; what submitting would store), and a note per object that exists
    but is not runai-spec's (submit will not touch it)."""

    manifests: tuple[Manifest, ...]
    pairs: tuple[tuple[Manifest | None, Manifest], ...]
    foreign: tuple[str, ...] = ()


@dataclass(frozen=True)
class Deleted:
    """What delete did: the objects deleted, those already gone, those whose deletion was
    accepted and is still under way (Run:ai's Deleting), or nothing (declined)."""

    deleted: tuple[str, ...]
    missing: tuple[str, ...] = ()
    declined: bool = False
    deleting: tuple[str, ...] = ()


Confirm = Callable[[list[str]], bool]  # asked with what is there to delete; False deletes nothing


def unsupported(via: str, what: str, hint: str = "use --via kubernetes") -> ClusterError:
    """A back-end asked for what it cannot do: one error line naming it, and where to go."""
    return ClusterError(f"--via {via}: {what} is not something this back-end does", file=via, hint=hint)


__all__ = [
    "Confirm",
    "Connection",
    "Deleted",
    "Job",
    "LiveDiff",
    "find_job",
    "kubernetes_target",
    "live_job",
    "submitted_job",
    "unsupported",
]
