"""What a command asks of a back-end: how to reach it, the job it names, and the answers it gets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ClusterError
from ..facts.kubeflow import KIND
from ..render.manifests import Manifest
from .objects import ref_of
from .refs import CONFIGMAP, Ref, job_ref
from .session import Target

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
    return Job(name, namespace, owner, (job_ref(name, namespace),))


def submitted_job(workload: Workload, manifests: Sequence[Manifest]) -> Job:
    """The job among the manifests just submitted (submit --wait watches it)."""
    ref = next(ref_of(m) for m in manifests if m.get("kind") == KIND)
    return Job(ref.name, ref.namespace, workload.plan.project, (ref,))


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
    "submitted_job",
    "unsupported",
]
