"""What runai-spec reads and writes on the cluster: references, comparing renders, reading objects."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ClusterError, InternalError
from ..facts import mpi
from ..facts.kubeflow import (
    ANNOTATION_PREFIX,
    JOB_NAME_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from ..render.manifests import Manifest
from .refs import PODS, RESOURCES, Ref, Resource
from .refusals import refusal
from .session import json_body

if TYPE_CHECKING:
    from .session import Session

FIELD_MANAGER = MANAGED_BY  # the server-side apply field manager
# Fields the API server owns: never part of what runai-spec renders, so never diffed.
SERVER_META = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


# --- comparing -------------------------------------------------------------------------


def strip_server_fields(obj: Manifest) -> Manifest:
    """The object without what the server manages (status, uid, resourceVersion, ...)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_META}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    if "annotations" in meta:
        meta["annotations"] = annotations
    out["metadata"] = meta
    return out


def contains(want: Any, have: Any) -> bool:
    """Everything runai-spec renders is in the live object (server defaults may add fields)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and contains(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(contains(w, h) for w, h in zip(want, have, strict=True))
        )
    return bool(want == have and type(want) is type(have)) or (
        isinstance(want, (int, float))
        and not isinstance(want, bool)
        and isinstance(have, (int, float))
        and not isinstance(have, bool)
        and want == have
    )


def same_render(manifest: Manifest, live: Manifest) -> bool:
    """The live object is exactly this render: contains it, with the same runai-spec provenance."""

    def ours(obj: Manifest) -> dict[str, Any]:
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        return {k: v for k, v in notes.items() if k.startswith(ANNOTATION_PREFIX)}

    return ours(manifest) == ours(live) and contains(manifest, live)


def managed_by_us(obj: Manifest) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == FIELD_MANAGER


def ref_of(manifest: Manifest) -> Ref:
    meta = manifest.get("metadata") or {}
    resource = RESOURCES.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))
    if resource is None:
        raise InternalError(f"cannot submit a {manifest.get('apiVersion')} {manifest.get('kind')}")
    if not meta.get("namespace") or not meta.get("name"):
        raise InternalError(f"{resource.kind} without metadata.name and metadata.namespace")
    return Ref(resource, str(meta["namespace"]), str(meta["name"]))


# --- reading ---------------------------------------------------------------------------


def get_object(session: Session, ref: Ref) -> Manifest | None:
    """The live object, or None when it does not exist; CRD missing is an error."""
    resp = session.call("GET", ref.resource.item(ref.namespace, ref.name))
    if resp.status == 404:
        require_served(session, ref)
        return None
    if resp.status != 200:
        raise refusal(resp, ref, "read")
    return checked(json_body(resp), str(ref))


def checked(obj: Any, where: str) -> Manifest:
    """A server object shaped as Kubernetes sends it, or one clear error (exit 3): never a
    traceback on `metadata: "notadict"` or a pod without metadata."""
    problem = _malformed(obj)
    if problem is not None:
        raise ClusterError(
            f"{where}: the API server's answer is malformed: {problem}",
            file="cluster",
            hint="report it to your AI Engineers: the API server "
            "(or a proxy in front of it) does not answer as Kubernetes does",
        )
    return obj  # type: ignore[no-any-return]


def _malformed(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return "not an object"
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "metadata is missing" if meta is None else "metadata is not an object"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name is missing or not a string"
    for key in ("namespace", "uid", "resourceVersion", "deletionTimestamp"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"metadata.{key} is not a string"
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not (
            isinstance(value, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            return f"metadata.{key} is not a mapping of strings"
    for key in ("spec", "status", "data"):
        if obj.get(key) is not None and not isinstance(obj[key], dict):
            return f"{key} is not an object"
    return None


def served(session: Session, resource: Resource) -> bool:
    """Whether the cluster serves RESOURCE (API discovery of its group version)."""
    if resource.group_version == "v1":
        return True
    resp = session.call("GET", f"/apis/{resource.group_version}")
    resources = (json_body(resp) or {}) if resp.status == 200 else {}
    return resource.plural in {r.get("name") for r in resources.get("resources", []) if isinstance(r, dict)}


def require_served(session: Session, ref: Ref) -> None:
    """A 404 can mean 'no such object' or 'no such resource': discovery tells them apart."""
    if not served(session, ref.resource):
        operator = (
            "mpi-operator (its MPIJob v2beta1 CRD)"
            if ref.resource.kind == mpi.KIND
            else "the Kubeflow training operator (its PyTorchJob CRD)"
        )
        raise ClusterError(
            f"{ref}: the cluster does not serve {ref.resource.group_version} {ref.resource.plural}",
            file="cluster",
            hint=f"{operator} is not installed, or the kubeconfig context points at another cluster",
        )


def list_objects(
    session: Session, resource: Resource, namespace: str, query: list[tuple[str, str]]
) -> list[Manifest]:
    ref = f"{resource.plural}/{namespace}"
    resp = session.call("GET", resource.collection(namespace), query)
    if resp.status != 200:
        raise refusal(resp, ref, "list")
    body = json_body(resp)
    items = body.get("items") if isinstance(body, dict) else "absent"
    if not isinstance(items, list | None):
        raise ClusterError(
            f"{ref}: the API server's answer is malformed: not a list of items",
            file="cluster",
            hint="report it to your AI Engineers: the API server "
            "(or a proxy in front of it) does not answer as Kubernetes does",
        )
    return [checked(item, f"{ref}: items[{index}]") for index, item in enumerate(items or [])]


def job_pods(session: Session, name: str, namespace: str) -> list[Manifest]:
    """The job's pods (by the operator's job-name label), master first, then by replica index."""
    pods = list_objects(session, PODS, namespace, [("labelSelector", f"{JOB_NAME_LABEL}={name}")])

    def order(pod: Manifest) -> tuple[int, int, str]:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        role = pod_role(labels).lower()
        first = role in ("master", mpi.LAUNCHER_ROLE)
        return (0 if first else 1, replica_index(labels), str(pod["metadata"].get("name")))

    return sorted(pods, key=order)


def pod_role(labels: Mapping[str, Any]) -> str:
    """The pod's role: the training operator's replica type (Master, Worker), or mpi-operator's
    job role (launcher, worker: it writes no replica type); "" when neither is there."""
    return str(labels.get(REPLICA_TYPE_LABEL) or labels.get(mpi.JOB_ROLE_LABEL) or "")


# The operator writes the index as ASCII digits. `str.isdigit` is no check for `int()`:
# it accepts superscripts (`²`, which int() refuses) and other scripts' digits (`١`, which
# int() reads as 1); a server's odd label reads as 0, never as a crash or another rank.
_INDEX = re.compile(r"[0-9]{1,9}")


def replica_index(labels: Mapping[str, Any]) -> int:
    """The pod's replica index from its operator label; 0 when it is not a plain number."""
    index = labels.get(REPLICA_INDEX_LABEL, "0")
    return int(index) if isinstance(index, str) and _INDEX.fullmatch(index) else 0
