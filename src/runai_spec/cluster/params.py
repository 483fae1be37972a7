"""`presets verify --live`'s read: the parameters ConfigMap the cluster's admission policy uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..errors import ClusterError
from .refs import CONFIGMAP, Ref
from .refusals import refusal
from .session import Session, Target, clean, json_body


@dataclass(frozen=True)
class DeployedParams:
    """What the cluster holds: `data` (None: the ConfigMap does not exist), or `forbidden`
    (the server's reason) when the credentials may not read it."""

    ref: str
    data: dict[str, str] | None
    forbidden: str | None = None


def read_params(target: Target, namespace: str, name: str) -> DeployedParams:
    """GET the ConfigMap NAMESPACE/NAME (read-only); a 403 is an answer, not an error;
    unreachable or any other refusal is a ClusterError (exit 3)."""
    ref = Ref(CONFIGMAP, namespace, name)
    with Session(target) as session:
        return _answer(ref, session.call("GET", CONFIGMAP.item(namespace, name)))


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class DeployedObject:
    """One cluster-scoped admission object: `body` (None: it does not exist), or `forbidden`."""

    ref: str
    body: dict[str, Any] | None
    forbidden: str | None = None


def read_admission(target: Target, policies: list[str], bindings: list[str]) -> dict[str, DeployedObject]:
    """GET the ValidatingAdmissionPolicies POLICIES and the bindings BINDINGS (read-only):
    `validatingadmissionpolicies/<name>` -> what the cluster holds."""
    out = {}
    with Session(target) as session:
        for plural, names in (
            ("validatingadmissionpolicies", policies),
            ("validatingadmissionpolicybindings", bindings),
        ):
            for name in names:
                ref = f"{plural}/{name}"
                resp = session.call("GET", f"{ADMISSION}/{plural}/{quote(name, safe='')}")
                out[ref] = _object(ref, resp)
    return out


def _object(ref: str, resp: Any) -> DeployedObject:
    if resp.status == 403:
        body = json_body(resp)
        message = body.get("message") if isinstance(body, dict) else None
        return DeployedObject(ref, None, clean(message or "forbidden", 200))
    if resp.status == 404:
        return DeployedObject(ref, None)
    if resp.status != 200:
        raise refusal(resp, ref, "read")
    body = json_body(resp)
    if not isinstance(body, dict):
        raise ClusterError(f"{ref}: the API server sent something that is not an object", file="cluster")
    return DeployedObject(ref, body)


def _answer(ref: Ref, resp: Any) -> DeployedParams:
    if resp.status == 403:
        body = json_body(resp)
        message = body.get("message") if isinstance(body, dict) else None
        return DeployedParams(str(ref), None, clean(message or "forbidden", 200))
    if resp.status == 404:
        return DeployedParams(str(ref), None)
    if resp.status != 200:
        raise refusal(resp, ref, "read")
    body = json_body(resp)
    if not isinstance(body, dict):
        raise ClusterError(f"{ref}: the API server sent something that is not an object", file="cluster")
    data = body.get("data") or {}
    if not isinstance(data, dict):
        raise ClusterError(f"{ref}: data is not a map", file="cluster")
    return DeployedParams(str(ref), {str(k): str(v) for k, v in data.items()})


__all__ = ["DeployedObject", "DeployedParams", "read_admission", "read_params"]
