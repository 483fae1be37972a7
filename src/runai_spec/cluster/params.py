"""`presets verify --live`'s read: the parameters ConfigMap the cluster's admission policy uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


__all__ = ["DeployedParams", "read_params"]
