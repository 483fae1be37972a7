"""Reading the rendered PyTorchJob: its replicas, containers, volume roles, world and the operator's env."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..facts.kubeflow import DEFAULT_PORT, PORT_NAME, operator_env
from ..facts.kubeflow import nproc_int as nproc_of
from ..facts.kubeflow import pytorch_container as container_of
from ..facts.kubeflow import replica_specs as replicas_of
from ..plan.launcher import PYTORCHJOB, WorkloadKind
from ..plan.volumes import CHECKPOINT, volume_role

if TYPE_CHECKING:
    from ..plan.plan import Plan

# The operator's facts live in kubeflow.py; the rehearsal's names for them stay importable.
__all__ = [
    "DEFAULT_PORT",
    "PORT_NAME",
    "checkpoint_mount",
    "container_of",
    "find_job",
    "nproc_of",
    "operator_env",
    "plan_world_size",
    "replicas_of",
    "volume_roles",
]


def find_job(manifests: Iterable[Mapping[str, Any]], kind: WorkloadKind | None = None) -> Mapping[str, Any]:
    """The one job of workload KIND (a plan's `workload`; PyTorchJob unless given) among MANIFESTS."""
    kind = kind or PYTORCHJOB
    jobs = [m for m in manifests if m.get("kind") == kind.kind]
    if len(jobs) != 1:
        raise InputError(
            f"expected one {kind.kind} among the manifests, found {len(jobs)}",
            hint="rehearse takes the rendered output of one profile",
        )
    job = jobs[0]
    if job.get("apiVersion") != kind.api_version:
        raise InputError(f"{kind.kind} apiVersion {job.get('apiVersion')!r} is not {kind.api_version}")
    return job


def plan_world_size(job: Mapping[str, Any]) -> int:
    """The processes the rendered JOB starts in the cluster at its planned size: its pods times
    nprocPerNode (Plan.world_size, read back from the render)."""
    return sum(count for _, count, _ in replicas_of(job)) * max(1, nproc_of(job))


def volume_roles(job: Mapping[str, Any], plan: Plan | None = None) -> dict[str, str]:
    """The role (plan.volumes' CHECKPOINT, DATA, SHM) of each of JOB's volumes, by name: the
    PLAN's where given; else read back from the names the planner gives them (volume_role)."""
    if plan is not None:
        return {v.name: v.role for v in plan.volumes}
    roles: dict[str, str] = {}
    for _, _, spec in replicas_of(job):
        for volume in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []:
            name = str(volume.get("name"))
            if (role := volume_role(name)) is not None:
                roles[name] = role
    return roles


def checkpoint_mount(job: Mapping[str, Any], plan: Plan | None = None) -> str | None:
    """Where JOB's pods mount the volume of role CHECKPOINT (the first replica's container:
    every pod mounts the same), else None."""
    roles = volume_roles(job, plan)
    rtype, _, replica = replicas_of(job)[0]
    mounts = container_of(replica, rtype).get("volumeMounts") or []
    return next(
        (str(m.get("mountPath")) for m in mounts if roles.get(str(m.get("name"))) == CHECKPOINT), None
    )
