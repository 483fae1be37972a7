"""A small Kubernetes-API-compatible server for tests (standard library, 127.0.0.1 only).

It serves the part of the API that runai-spec's cluster commands use: discovery,
PyTorchJobs and ConfigMaps (create, get, list, delete, server-side apply with dryRun,
force and strict field validation, validated against the upstream CRD), pods, pod logs
and events; with a bearer-token check, RBAC refusals, injectable faults and a record of
every request received. Stored ValidatingAdmissionPolicies (`store_policy`) are enforced
on PyTorchJob create and apply, evaluated with a real CEL implementation (cel_eval.py).
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from conftest import crd_validator, upstream_crd

KINDS = {
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"),
    "mpijobs": ("kubeflow.org/v2beta1", "MPIJob"),
    "configmaps": ("v1", "ConfigMap"),
    "pods": ("v1", "Pod"),
    "events": ("v1", "Event"),
}


@dataclass
class Fault:
    """One injected misbehaviour, used by the first matching request."""

    status: int | None = None
    method: str | None = None
    path_contains: str | None = None
    retry_after: str | None = None
    delay: float = 0.0  # seconds before answering
    drop: bool = False  # close the connection without an answer
    commit: bool = False  # perform the request first, then misbehave (the write happened)
    body: dict[str, Any] | None = None
    # issue 12: answer as the server would, then rewrite the answer (a malformed object);
    # keep: for every matching request, not only the first; dry_run: match only dry runs
    # (True) or only real writes (False)
    mangle: Callable[[Any], Any] | None = None
    keep: bool = False
    dry_run: bool | None = None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeKube:
    """The server's state; tests seed and inspect it directly."""

    token: str = "test-token-0123456789abcdef"
    namespaces: set[str] = field(
        default_factory=lambda: {"runai-team-a", "runai-nlp-lab", "runai-cv-lab", "default"}
    )
    crd_installed: bool = True
    # mpi-operator's MPIJob kubeflow.org/v2beta1 (issue 39): served only where a test says so
    mpi_installed: bool = False
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (verb, plural)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    owners: dict[tuple[str, str, str], dict[str, set[tuple[str, ...]]]] = field(default_factory=dict)
    logs: dict[tuple[str, str, bool], str] = field(default_factory=dict)  # (ns, pod, previous)
    faults: list[Fault] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    stopping: threading.Event = field(default_factory=threading.Event)
    version: int = 1000
    # issue 13 (site checks): read-only objects by API path, and resources whose GETs are 403
    site_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    denied: set[str] = field(default_factory=set)
    # issue 14: admissionregistration.k8s.io/v1 objects (cluster-scoped, by name)
    admission_policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    admission_bindings: dict[str, dict[str, Any]] = field(default_factory=dict)
    evaluators: dict[str, Any] = field(default_factory=dict)  # policy name -> cel_eval.Evaluator

    # -- test helpers -------------------------------------------------------------------

    def inject(self, status: int | None = None, **kwargs: Any) -> Fault:
        fault = Fault(status=status, **kwargs)
        with self.lock:
            self.faults.append(fault)
        return fault

    def put(self, plural: str, obj: dict[str, Any], manager: str = "kubectl") -> dict[str, Any]:
        """Store an object as if another client had created it."""
        meta = obj.setdefault("metadata", {})
        key = (plural, meta.get("namespace", "default"), meta["name"])
        api_version, kind = KINDS[plural]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind)
        with self.lock:
            self._stamp(obj, None)
            self.objects[key] = obj
            self.owners[key] = {manager: set(leaves(_content(obj)))}
        return obj

    def store_policy(self, documents: list[dict[str, Any]]) -> None:
        """Store ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding and ConfigMap
        documents (what `presets policy` writes) as the AI Engineers would apply them."""
        with self.lock:
            for doc in copy.deepcopy(documents):
                kind, name = doc["kind"], doc["metadata"]["name"]
                if kind == "ValidatingAdmissionPolicy":
                    from cel_eval import Evaluator

                    self.admission_policies[name] = doc
                    # compiled here, not while a client waits for its answer
                    self.evaluators[name] = Evaluator(doc["spec"]).compile_all()
                    self.site_objects[f"{ADMISSION_PATH}/validatingadmissionpolicies/{name}"] = doc
                elif kind == "ValidatingAdmissionPolicyBinding":
                    self.admission_bindings[name] = doc
                    self.site_objects[f"{ADMISSION_PATH}/validatingadmissionpolicybindings/{name}"] = doc
                elif kind == "ConfigMap":
                    self.namespaces.add(doc["metadata"]["namespace"])
                    self.put("configmaps", doc, manager="kubectl")
                else:
                    raise ValueError(f"store_policy: unexpected {kind}")

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

    def count(self, plural: str) -> int:
        return sum(1 for key in self.objects if key[0] == plural)

    def sent(self, method: str) -> list[Received]:
        """The requests received with this method, dry runs included, in order."""
        return [r for r in self.requests if r.method == method]

    def writes(self) -> list[Received]:
        return [
            r
            for r in self.requests
            if r.method in ("POST", "PUT", "PATCH", "DELETE") and "dryRun" not in r.query
        ]

    def add_pod(
        self,
        job: str,
        namespace: str,
        role: str,
        index: int,
        phase: str = "Running",
        state: dict[str, Any] | None = None,
        restarts: int = 0,
        conditions: list[dict[str, Any]] | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        pod = {
            "metadata": {
                "name": name or f"{job}-{role}-{index}",
                "namespace": namespace,
                "labels": labels
                or {
                    "training.kubeflow.org/job-name": job,
                    "training.kubeflow.org/replica-type": role,
                    "training.kubeflow.org/replica-index": str(index),
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                },
            },
            "spec": {"nodeName": f"node-{index}" if phase != "Pending" else None},
            "status": {
                "phase": phase,
                "conditions": conditions or [],
                "containerStatuses": [
                    {
                        "name": "pytorch",
                        "restartCount": restarts,
                        "state": state
                        or (
                            {"running": {}}
                            if phase == "Running"
                            else {"waiting": {"reason": "ContainerCreating"}}
                        ),
                    }
                ],
            },
        }
        return self.put("pods", pod, manager="kubelet")

    def add_mpi_pod(self, job: str, namespace: str, role: str, index: int, phase: str = "Running") -> None:
        """A pod of an MPIJob as mpi-operator v0.6.0 labels it (pkg/controller/
        mpi_job_controller.go defaultLabels: operator-name, job-name, job-role launcher|worker;
        newWorker adds replica-index; no replica-type label). The launcher's pod is made by
        the launcher Job (batch/v1), named <job>-launcher-<suffix>; worker I is <job>-worker-I."""
        labels = {
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": job,
            "training.kubeflow.org/job-role": role,
        }
        if role == "launcher":
            labels["job-name"] = f"{job}-launcher"  # the Job controller's own label
            name = f"{job}-launcher-x7k2q"
        else:
            labels["training.kubeflow.org/replica-index"] = str(index)
            name = f"{job}-worker-{index}"
        self.add_pod(job, namespace, role, index, phase, name=name, labels=labels)

    def add_event(
        self,
        namespace: str,
        involved: str,
        reason: str,
        message: str,
        kind: str = "Pod",
        type_: str = "Warning",
    ) -> None:
        name = f"{involved}.{uuid.uuid4().hex[:8]}"
        self.put(
            "events",
            {
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"kind": kind, "name": involved, "namespace": namespace},
                "reason": reason,
                "message": message,
                "type": type_,
                "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )

    # -- object mechanics ---------------------------------------------------------------

    def _stamp(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.version += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.version)
        if old is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["generation"] = 1
        else:
            for key in ("uid", "creationTimestamp"):
                meta[key] = old["metadata"][key]
            changed = old.get("spec") != obj.get("spec")
            meta["generation"] = old["metadata"].get("generation", 1) + (1 if changed else 0)
            if "status" in old:
                obj["status"] = old["status"]


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """What field ownership covers: everything but server-set metadata and status."""
    out = {k: v for k, v in obj.items() if k not in ("status",)}
    out["metadata"] = {
        k: v
        for k, v in obj.get("metadata", {}).items()
        if k in ("name", "namespace", "labels", "annotations")
    }
    return out


Path_ = tuple[str, ...]


def leaves(value: Any, path: Path_ = ()) -> dict[Path_, Any]:
    """Leaf paths of an object; lists are atomic (as with most fields of a CRD)."""
    if isinstance(value, dict) and value:
        out: dict[Path_, Any] = {}
        for key, child in value.items():
            out.update(leaves(child, (*path, key)))
        return out
    return {path: value}


def dotted(path: Path_) -> str:
    return "." + ".".join(path)


def unflatten(flat: dict[Path_, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for parts, value in sorted(flat.items()):
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
    return out


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the structural schema does not declare (what fieldValidation=Strict rejects)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = []
        for key, child in value.items():
            if props is not None and key in props:
                out += unknown_fields(child, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += unknown_fields(child, extra, f"{path}.{key}")
            elif props is not None and not (path == "" and key in ("apiVersion", "kind")):
                out.append(f"{path}.{key}")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            u for i, item in enumerate(value) for u in unknown_fields(item, schema["items"], f"{path}[{i}]")
        ]
    return []


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a response is written as headers, then body; with Nagle the body waits for
    # the client's delayed ACK of the headers (about 40 ms a request on Linux)
    disable_nagle_algorithm = True
    timeout = 10  # an idle or stuck client connection ends by itself
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        kube = self.server.kube
        split = urlsplit(self.path)
        path, query = unquote(split.path), parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        with kube.lock:
            kube.requests.append(Received(self.command, path, query, headers, body))
            fault = next(
                (
                    f
                    for f in kube.faults
                    if f.matches(self.command, path)
                    and (f.dry_run is None or f.dry_run == ("dryRun" in query))
                ),
                None,
            )
            if fault and not fault.keep:
                kube.faults.remove(fault)
        if fault and not fault.commit and self._misbehave(fault):
            return
        auth = self.headers.get("Authorization", "")
        if auth != f"Bearer {kube.token}":
            code, reply = 401, status_body(401, "Unauthorized", "Unauthorized")
        else:
            try:
                code, reply = route(
                    kube, self.command, path, query, body, self.headers.get("Content-Type", "")
                )
            except Exception as exc:  # a bug in the fake: answer 500, visibly
                code, reply = 500, status_body(500, "InternalError", f"fake server bug: {exc!r}")
        if fault and fault.commit and self._misbehave(fault):
            return
        if fault and fault.mangle is not None and code < 300:
            reply = fault.mangle(copy.deepcopy(reply))
        self._send(code, reply)

    def _misbehave(self, fault: Fault) -> bool:
        """Apply a fault; True when the answer has been given (or withheld)."""
        if fault.delay:
            self.server.kube.stopping.wait(fault.delay)
        if fault.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if fault.status is None:
            return False
        reason = {
            400: "BadRequest",
            401: "Unauthorized",
            403: "Forbidden",
            404: "NotFound",
            409: "Conflict",
            422: "Invalid",
            429: "TooManyRequests",
            500: "InternalError",
            503: "ServiceUnavailable",
        }.get(fault.status, "Unknown")
        extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        self._send(
            fault.status, fault.body or status_body(fault.status, reason, f"injected {fault.status}"), extra
        )
        return True

    def _send(self, code: int, reply: Any, extra: dict[str, str] | None = None) -> None:
        if isinstance(reply, str):
            data, ctype = reply.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(reply).encode(), "application/json"
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve


def route(
    kube: FakeKube, method: str, path: str, query: dict[str, list[str]], body: bytes, content_type: str
) -> tuple[int, Any]:
    parts = [p for p in path.split("/") if p]
    hit = site_route(kube, method, path)
    if hit is not None:
        return hit
    if path == "/version":
        return 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"}
    if path == "/api":
        return 200, {"kind": "APIVersions", "versions": ["v1"]}
    if path == "/apis":
        versions = [{"groupVersion": "kubeflow.org/v1", "version": "v1"}] if kube.crd_installed else []
        if kube.mpi_installed:
            versions.append({"groupVersion": "kubeflow.org/v2beta1", "version": "v2beta1"})
        groups = [{"name": "kubeflow.org", "versions": versions}]
        return 200, {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups if versions else [],
        }
    if path == "/api/v1":
        return 200, resource_list(
            "v1",
            [
                ("configmaps", "ConfigMap"),
                ("pods", "Pod"),
                ("pods/log", "Pod"),
                ("events", "Event"),
                ("namespaces", "Namespace"),
            ],
        )
    if path == "/apis/kubeflow.org/v1":
        if not kube.crd_installed:
            return 404, "404 page not found"
        return 200, resource_list(
            "kubeflow.org/v1", [("pytorchjobs", "PyTorchJob"), ("pytorchjobs/status", "PyTorchJob")]
        )
    if path == "/apis/kubeflow.org/v2beta1":
        if not kube.mpi_installed:
            return 404, "404 page not found"
        return 200, resource_list(
            "kubeflow.org/v2beta1", [("mpijobs", "MPIJob"), ("mpijobs/status", "MPIJob")]
        )
    # /api/v1/namespaces/NS/PLURAL[/NAME[/log]]  or  /apis/kubeflow.org/v1[v2beta1]/namespaces/...
    kubeflow = parts[:2] == ["apis", "kubeflow.org"] and parts[2:3] in (["v1"], ["v2beta1"])
    prefix = 2 if parts[:2] == ["api", "v1"] else 3 if kubeflow else 0
    rest = parts[prefix:]
    if not prefix or len(rest) < 3 or rest[0] != "namespaces":
        return 404, "404 page not found"
    namespace, plural = rest[1], rest[2]
    if plural not in KINDS or (prefix == 3) != (plural in GROUPS and GROUPS[plural][0] == "kubeflow.org"):
        return 404, "404 page not found"
    if prefix == 3 and KINDS[plural][0] != "/".join(parts[1:3]):
        return 404, "404 page not found"
    if (plural == "pytorchjobs" and not kube.crd_installed) or (
        plural == "mpijobs" and not kube.mpi_installed
    ):
        return 404, "404 page not found"
    name = rest[3] if len(rest) > 3 else None
    sub = rest[4] if len(rest) > 4 else None
    verb = {
        "GET": "get" if name else "list",
        "POST": "create",
        "PATCH": "patch",
        "DELETE": "delete",
        "PUT": "update",
    }[method]
    if (verb, plural) in kube.forbidden:
        group = GROUPS.get(plural, ("", ""))[0]
        return 403, status_body(
            403,
            "Forbidden",
            f'{plural}.{group} "{name or ""}" is forbidden: User '
            f'"alice" cannot {verb} resource "{plural}" in API group "{group}" '
            f'in the namespace "{namespace}"',
            name=name or "",
            kind=plural,
        )
    with kube.lock:
        if sub == "log":
            return pod_log(kube, namespace, name or "", query)
        if method == "GET" and name is None:
            return 200, list_objects(kube, plural, namespace, query)
        if method == "GET":
            obj = kube.get(plural, namespace, name or "")
            return (200, obj) if obj else not_found(plural, name or "")
        if method == "DELETE":
            return delete(kube, plural, namespace, name or "", body)
        if namespace not in kube.namespaces:
            return 404, status_body(
                404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces"
            )
        if method == "PATCH" and content_type.startswith("application/apply-patch+yaml"):
            return apply(kube, plural, namespace, name or "", query, body)
        if method == "POST":
            return create(kube, plural, namespace, query, body)
    return 405, status_body(405, "MethodNotAllowed", f"{method} is not supported by the fake")


def resource_list(group_version: str, items: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": n,
                "singularName": "",
                "namespaced": True,
                "kind": k,
                "verbs": ["create", "delete", "get", "list", "patch", "update"],
            }
            for n, k in items
        ],
    }


def not_found(plural: str, name: str) -> tuple[int, Any]:
    group = GROUPS.get(plural, ("", ""))[0]
    return 404, status_body(
        404, "NotFound", f'{plural}.{group} "{name}" not found', name=name, group=group, kind=plural
    )


def list_objects(kube: FakeKube, plural: str, namespace: str, query: dict[str, list[str]]) -> dict[str, Any]:
    items = [o for (p, ns, _), o in sorted(kube.objects.items()) if p == plural and ns == namespace]
    for selector in query.get("labelSelector", []):
        for term in selector.split(","):
            key, _, value = term.partition("=")
            items = [o for o in items if o["metadata"].get("labels", {}).get(key) == value]
    for selector in query.get("fieldSelector", []):
        for term in selector.split(","):
            key, _, value = term.partition("=")

            def pick(obj: dict[str, Any], dotted: str = key) -> Any:
                for part in dotted.split("."):
                    obj = obj.get(part, {}) if isinstance(obj, dict) else {}
                return obj

            items = [o for o in items if pick(o) == value]
    api_version, kind = KINDS[plural]
    return {
        "kind": f"{kind}List",
        "apiVersion": api_version,
        "metadata": {"resourceVersion": str(kube.version)},
        "items": items,
    }


def pod_log(kube: FakeKube, namespace: str, name: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    if kube.get("pods", namespace, name) is None:
        return not_found("pods", name)
    previous = query.get("previous", ["false"])[0] == "true"
    text = kube.logs.get((namespace, name, previous))
    if text is None:
        what = "previous terminated container" if previous else "container"
        return 400, status_body(400, "BadRequest", f'{what} "pytorch" in pod "{name}" not found')
    return 200, text


def validate(
    kube: FakeKube, plural: str, obj: dict[str, Any], name: str, strict: bool
) -> tuple[int, Any] | None:
    if obj.get("metadata", {}).get("name") != name:
        return 400, status_body(400, "BadRequest", "the name of the object does not match the URL")
    if plural != "pytorchjobs":
        return None
    if strict:
        unknown = unknown_fields(obj, crd_validator().schema)
        if unknown:
            return 400, status_body(
                400,
                "BadRequest",
                "failed to create typed patch object "
                f"(/{name}; kubeflow.org/v1, Kind=PyTorchJob): "
                + ", ".join(f"{u}: field not declared in schema" for u in unknown),
            )
    errors = sorted(crd_validator().iter_errors(obj), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    causes = []
    for error in errors:
        dotted = ""
        for part in error.absolute_path:
            dotted += f"[{part}]" if isinstance(part, int) else f".{part}"
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {error.message}",
                "field": dotted.lstrip("."),
            }
        )
    message = f'PyTorchJob.kubeflow.org "{name}" is invalid: ' + ", ".join(
        f"{c['field']}: {c['message']}" for c in causes
    )
    return 422, status_body(
        422, "Invalid", message, name=name, group="kubeflow.org", kind="PyTorchJob", causes=causes
    )


GROUPS = {
    "pytorchjobs": ("kubeflow.org", "v1"),
    "mpijobs": ("kubeflow.org", "v2beta1"),
    "configmaps": ("", "v1"),
}


def admit(
    kube: FakeKube, plural: str, operation: str, obj: dict[str, Any], old: dict[str, Any] | None
) -> tuple[int, Any] | None:
    """Validating admission by the stored policies, as the API server answers it (read in
    kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/
    dispatcher.go (read at commit 0cbcb7cd) and policy_decision.go, Kubernetes v1.30 and
    later; admission.NewForbidden in staging/src/k8s.io/apiserver/pkg/admission/errors.go):
    the first denied
    decision becomes a Forbidden StatusError (admission.NewForbidden) whose message is
    `<resource>.<group> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with
    binding '<binding>' denied request: <message>`; its reason is the validation's `reason`
    (default Invalid) and its code reasonToCode(reason): Forbidden 403, Unauthorized 401,
    RequestEntityTooLarge 413, otherwise 422; details.causes gets the inner message. Dry runs
    are judged too (admission runs before the dry run is dropped). None: admitted."""
    if not kube.admission_policies:
        return None
    from cel_eval import Evaluator, rule_matches, selects

    group, version = GROUPS.get(plural, ("", "v1"))
    meta = obj.get("metadata", {})
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    ns_object = kube.site_objects.get(f"/api/v1/namespaces/{namespace}") or {}
    ns_labels = dict((ns_object.get("metadata") or {}).get("labels") or {})
    denied: list[tuple[str, str, str, str]] = []  # (policy, binding, message, reason)
    for policy_name, policy in sorted(kube.admission_policies.items()):
        spec = policy.get("spec") or {}
        constraints = spec.get("matchConstraints") or {}
        if not (
            rule_matches(constraints.get("resourceRules") or [], group, version, plural, operation)
            and selects(constraints.get("namespaceSelector"), ns_labels)
            and selects(constraints.get("objectSelector"), dict(meta.get("labels") or {}))
        ):
            continue
        evaluator = kube.evaluators.get(policy_name)
        if evaluator is None:
            evaluator = kube.evaluators[policy_name] = Evaluator(spec)
        bindings = [
            b
            for _, b in sorted(kube.admission_bindings.items())
            if (b.get("spec") or {}).get("policyName") == policy_name
        ]
        for binding in bindings:
            bspec = binding.get("spec") or {}
            bname = binding["metadata"]["name"]
            match = bspec.get("matchResources") or {}
            if not (
                selects(match.get("namespaceSelector"), ns_labels)
                and selects(match.get("objectSelector"), dict(meta.get("labels") or {}))
            ):
                continue
            if "Deny" not in (bspec.get("validationActions") or []):
                continue
            params: dict[str, Any] | None = None
            if spec.get("paramKind"):
                ref = bspec.get("paramRef") or {}
                params = kube.objects.get(
                    ("configmaps", ref.get("namespace") or namespace, ref.get("name", ""))
                )
                if params is None:
                    if ref.get("parameterNotFoundAction") == "Allow":
                        continue
                    denied.append(
                        (
                            policy_name,
                            bname,
                            "failed to configure binding: no params "
                            "found for policy binding with `Deny` parameterNotFoundAction",
                            "Invalid",
                        )
                    )
                    continue
            failures = evaluator.failures(
                obj, params=params, namespace_labels=ns_labels, old=old, operation=operation
            )
            denied += [(policy_name, bname, f.message, f.reason) for f in failures or []]
    if not denied:
        return None
    policy_name, bname, message, reason = denied[0]
    inner = f"ValidatingAdmissionPolicy '{policy_name}' with binding '{bname}' denied request: {message}"
    code = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}.get(reason, 422)
    resource = f"{plural}.{group}" if group else plural
    return code, status_body(
        code,
        reason,
        f'{resource} "{name}" is forbidden: {inner}',
        name=name,
        group=group,
        kind=plural,
        causes=[{"message": inner}],
    )


def parse_body(body: bytes) -> dict[str, Any] | None:
    try:  # libyaml's safe loader: PyYAML's pure-Python one took 4-10 ms a request (issue 29)
        value = yaml.load(body.decode("utf-8"), Loader=yaml.CSafeLoader)
    except (UnicodeDecodeError, yaml.YAMLError):
        return None
    return value if isinstance(value, dict) else None


def apply(
    kube: FakeKube, plural: str, namespace: str, name: str, query: dict[str, list[str]], body: bytes
) -> tuple[int, Any]:
    manager = query.get("fieldManager", [""])[0]
    if not manager:
        return 422, status_body(
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: '
            "fieldManager: Required value: is required for apply patch",
        )
    obj = parse_body(body)
    if obj is None:
        return 400, status_body(400, "BadRequest", "error decoding YAML: not an object")
    obj.setdefault("metadata", {}).setdefault("namespace", namespace)
    if obj["metadata"]["namespace"] != namespace:
        return 400, status_body(400, "BadRequest", "the namespace of the object does not match")
    strict = query.get("fieldValidation", ["Warn"])[0] == "Strict"
    force = query.get("force", ["false"])[0] == "true"
    dry = query.get("dryRun", [""])[0] == "All"
    key = (plural, namespace, name)
    old = kube.objects.get(key)
    applied = leaves(_content(obj))
    owners = copy.deepcopy(kube.owners.get(key, {}))
    if old is not None:
        current = leaves(_content(old))
        conflicts = sorted(
            p
            for other, paths in owners.items()
            if other != manager
            for p in paths
            if p in applied and current.get(p) != applied[p]
        )
        if conflicts and not force:
            causes = [
                {
                    "reason": "FieldManagerConflict",
                    "field": dotted(p),
                    "message": f'conflict with "{next(o for o, ps in owners.items() if p in ps)}": '
                    f"{dotted(p)}",
                }
                for p in conflicts
            ]
            return 409, status_body(
                409,
                "Conflict",
                f"Apply failed with {len(causes)} conflicts: " + "; ".join(c["message"] for c in causes),
                causes=causes,
                name=name,
                kind=plural,
            )
        for other in owners:
            if other != manager:
                owners[other] -= set(applied)
        kept = {p: v for p, v in current.items() if any(p in ps for o, ps in owners.items() if o != manager)}
        merged = unflatten({**kept, **applied})
    else:
        merged = unflatten(applied)
    owners[manager] = set(applied)
    new = {**merged, "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    refused = validate(kube, plural, new, name, strict) or admit(
        kube, plural, "UPDATE" if old else "CREATE", new, old
    )
    if refused:
        return refused
    kube._stamp(new, old)
    new["metadata"]["managedFields"] = [
        {
            "manager": m,
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {dotted(p): {} for p in sorted(ps)},
        }
        for m, ps in owners.items()
    ]
    if dry:
        kube.version -= 1
        return (200 if old else 201), new
    kube.objects[key] = new
    kube.owners[key] = owners
    return (200 if old else 201), new


def create(
    kube: FakeKube, plural: str, namespace: str, query: dict[str, list[str]], body: bytes
) -> tuple[int, Any]:
    obj = parse_body(body)
    if obj is None:
        return 400, status_body(400, "BadRequest", "error decoding the body")
    name = obj.get("metadata", {}).get("name", "")
    obj["metadata"].setdefault("namespace", namespace)
    key = (plural, namespace, name)
    if key in kube.objects:
        return 409, status_body(
            409, "AlreadyExists", f'{plural} "{name}" already exists', name=name, kind=plural
        )
    refused = validate(kube, plural, obj, name, query.get("fieldValidation", [""])[0] == "Strict") or admit(
        kube, plural, "CREATE", obj, None
    )
    if refused:
        return refused
    kube._stamp(obj, None)
    if query.get("dryRun", [""])[0] != "All":
        kube.objects[key] = obj
        kube.owners[key] = {query.get("fieldManager", ["unknown"])[0]: set(leaves(_content(obj)))}
    return 201, obj


def delete(kube: FakeKube, plural: str, namespace: str, name: str, body: bytes) -> tuple[int, Any]:
    key = (plural, namespace, name)
    obj = kube.objects.get(key)
    if obj is None:
        return not_found(plural, name)
    options = parse_body(body) or {} if body else {}
    uid = (options.get("preconditions") or {}).get("uid")
    if uid and uid != obj["metadata"]["uid"]:
        return 409, status_body(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {obj['metadata']['uid']}",
            name=name,
            kind=plural,
        )
    del kube.objects[key]
    kube.owners.pop(key, None)
    if plural in ("pytorchjobs", "mpijobs"):  # the garbage collector removes the job's pods
        for pod_key in [
            k
            for k, o in kube.objects.items()
            if k[0] == "pods"
            and k[1] == namespace
            and o["metadata"].get("labels", {}).get("training.kubeflow.org/job-name") == name
        ]:
            del kube.objects[pod_key]
    return 200, status_body(200, "", "", name=name, kind=plural, uid=obj["metadata"]["uid"]) | {
        "status": "Success"
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, kube: FakeKube, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.kube = kube
        self.tls = tls

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.tls is None:
            return sock, address
        sock.settimeout(5)  # a client that never finishes the handshake cannot stall the server
        return self.tls.wrap_socket(sock, server_side=True), address  # OSError: dropped


class KubeAPI:
    """The running server: `url`, `kube` (state), `stop()`."""

    def __init__(self, kube: FakeKube | None = None, tls: tuple[Path, Path] | None = None) -> None:
        """tls: (certificate, key) files: serve https:// with them (issue 12's TLS tests)."""
        self.kube = kube or FakeKube()
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
        self.server = _Server(self.kube, context)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="fake-kube-api",
        )
        self.thread.start()

    def stop(self) -> None:
        self.kube.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def kubeconfig(self, path: Path, token: str | None = None, context: str = "fake") -> Path:
        """A kubeconfig with token auth pointing at this server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "alice", "user": {"token": token or self.kube.token}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "alice"}}],
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path


# --- issue 13: the site checks' resources and per-resource RBAC denial --------------------

SITE_RESOURCES = {
    "namespaces": "namespaces",
    "queues": "queues.scheduling.run.ai",
    "priorityclasses": "priorityclasses",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "secrets": "secrets",
    "nodes": "nodes",
    "network-attachment-definitions": "network-attachment-definitions.k8s.cni.cncf.io",
    "customresourcedefinitions": "customresourcedefinitions",
    "deployments": "deployments",
    "topologies": "topologies.kai.scheduler",
    "validatingadmissionpolicies": "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings": "validatingadmissionpolicybindings.admissionregistration.k8s.io",
}
ADMISSION_PATH = "/apis/admissionregistration.k8s.io/v1"


def _site_resource(path: str) -> str | None:
    parts = [p for p in path.split("/") if p]
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in SITE_RESOURCES and (index == len(parts) - 1 or index == len(parts) - 2):
            if parts[index] == "namespaces" and index != len(parts) - 2:
                continue
            return SITE_RESOURCES[parts[index]]
    return None


def site_route(kube: FakeKube, method: str, path: str) -> tuple[int, Any] | None:
    """GETs of the site checks' objects; None for every other request."""
    resource = _site_resource(path)
    if method != "GET" or resource is None:
        return None
    if resource in kube.denied:
        return 403, status_body(
            403,
            "Forbidden",
            f'{resource} is forbidden: User "alice" cannot get resource "{resource}"',
            kind=resource,
        )
    with kube.lock:
        if path in kube.site_objects:
            return 200, kube.site_objects[path]
        items = [o for p, o in sorted(kube.site_objects.items()) if p.rsplit("/", 1)[0] == path]
    if items or path.endswith(("/nodes", "/queues")):
        return 200, {"kind": "List", "apiVersion": "v1", "items": items}
    return 404, status_body(404, "NotFound", f'{resource} "{path.rsplit("/", 1)[-1]}" not found')


def seed_site(kube: FakeKube) -> None:
    """A cluster that matches the shipped site file and presets (the examples pass)."""
    from runai_spec.load.registry import PresetRegistry

    registry = PresetRegistry()
    site = registry.site()
    put = kube.site_objects.__setitem__
    projects = {"team-a", "nlp-lab", "vision-lab", "cv-lab"}
    for project in projects:
        ns = site.namespace_pattern.format(project=project)
        kube.namespaces.add(ns)
        put(f"/api/v1/namespaces/{ns}", {"metadata": {"name": ns, "labels": {site.queue_label: project}}})
        put(
            f"/apis/scheduling.run.ai/v2/queues/{project}",
            {"metadata": {"name": project}, "spec": {"resources": {"gpu": {"quota": 64}}}},
        )
        for claim in ("checkpoints", "team-checkpoints"):
            name = f"{project}-{claim}"
            put(
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
                {
                    "metadata": {"name": name},
                    "spec": {"accessModes": ["ReadWriteMany"]},
                    "status": {"phase": "Bound"},
                },
            )
        for source in site.data_sources:
            claim = site.claim_for(source, project)
            put(
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}",
                {
                    "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteMany"]},
                    "status": {"phase": "Bound"},
                },
            )
    for priority in site.priorities:
        put(
            f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority}",
            {"metadata": {"name": priority}, "value": 100},
        )
    pools: set[str | None] = set()
    networks: set[str] = set()
    extended: dict[str, int] = {}
    for name in registry.names():
        preset = registry.get(name).preset
        pools.add(preset.node_pool)
        text = preset.network.annotations.get("k8s.v1.cni.cncf.io/networks", "")
        networks.update(e.strip().split("@")[0] for e in text.split(",") if e.strip())
        for key, count in preset.network.resources.items():
            extended[key] = max(extended.get(key, 0), count)
    for index, pool in enumerate(sorted(pools, key=str)):
        labels = {"nvidia.com/gpu.product": "NVIDIA-H200"}
        if pool:
            labels[site.node_pool_label] = pool
        put(
            f"/api/v1/nodes/node-{index}",
            {
                "metadata": {"name": f"node-{index}", "labels": labels},
                "status": {
                    "allocatable": {
                        "nvidia.com/gpu": "8",
                        "cpu": "224",
                        "memory": "2000Gi",
                        **{k: str(v) for k, v in extended.items()},
                    }
                },
            },
        )
    for entry in networks:
        ns, _, name = entry.rpartition("/")
        for target in [ns] if ns else [site.namespace_pattern.format(project=p) for p in projects]:
            put(
                f"/apis/k8s.cni.cncf.io/v1/namespaces/{target}/network-attachment-definitions/{name}",
                {"metadata": {"name": name, "namespace": target}},
            )
    if site.topology is not None:  # KAI's Topology with every level a placement names
        levels = sorted({level for p in site.topology.placement.values() for _, level in p.levels()})
        put(
            f"/apis/kai.scheduler/v1alpha1/topologies/{site.topology.name}",
            {
                "metadata": {"name": site.topology.name},
                "spec": {"levels": [{"nodeLabel": level} for level in levels]},
            },
        )
    put(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
        copy.deepcopy(upstream_crd()),
    )
    put(
        "/apis/apps/v1/namespaces/kubeflow/deployments/training-operator",
        {
            "metadata": {"name": "training-operator"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "training-operator", "image": "kubeflow/training-operator:v1.9.0"}
                        ]
                    }
                }
            },
        },
    )
