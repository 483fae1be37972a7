"""References to objects on the cluster: a resource's REST paths, and one object of it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from ..facts import mpi
from ..facts.kubeflow import API_VERSION, KIND, PLURAL


@dataclass(frozen=True)
class Resource:
    """A namespaced API resource and its REST paths."""

    group_version: str
    kind: str
    plural: str

    def collection(self, namespace: str) -> str:
        prefix = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        return f"{prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{quote(name, safe='')}"


PYTORCHJOB = Resource(API_VERSION, KIND, PLURAL)


# mpi-operator's MPIJob (launcher: mpi): submit applies it as it does a PyTorchJob
MPIJOB = Resource(mpi.API_VERSION, mpi.KIND, mpi.PLURAL)


CONFIGMAP = Resource("v1", "ConfigMap", "configmaps")


PODS = Resource("v1", "Pod", "pods")


EVENTS = Resource("v1", "Event", "events")


RESOURCES = {(r.group_version, r.kind): r for r in (PYTORCHJOB, MPIJOB, CONFIGMAP)}


# The kinds a job of runai-spec's is (its launcher picks one): a NAME without its profile is
# looked up as each, in this order
JOBS = (PYTORCHJOB, MPIJOB)


@dataclass(frozen=True)
class Ref:
    """One object on the cluster: `pytorchjobs/<namespace>/<name>`."""

    resource: Resource
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.resource.plural}/{self.namespace}/{self.name}"


def job_ref(name: str, namespace: str, resource: Resource = PYTORCHJOB) -> Ref:
    """Job NAME of RESOURCE (a PyTorchJob unless given)."""
    return Ref(resource, namespace, name)
