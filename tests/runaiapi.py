"""A fake Run:ai control plane for tests (standard library, 127.0.0.1 only), as tests/kubeapi.py
fakes the Kubernetes API. The endpoints and their answers follow Run:ai's published OpenAPI
documents (control-plane API 2.24; see src/runai_spec/cluster/runai_api.py for each endpoint and
tests/runai_schemas.py for the request schemas it validates):

- POST /api/v2/token (grant_token_v2, "latest"/v3.0): form-encoded OAuth2 client_credentials
  -> OAuth2TokenResponse {access_token, token_type, expires_in}; OAuth2Error on 400/401;
  absent (404) with token_v2=False, as on a control plane before it
- POST /api/v1/token (grant_token, deprecated): TokenRequest client_credentials ->
  {accessToken, expiresIn}
- GET /api/v1/clusters (get_clusters): [DisplayedCluster {uuid, tenantId, name, createdAt,
  version}]
- GET /api/v1/org-unit/projects?filterBy=name==P (get_projects): {projects: [Project {...,
  status: {namespace}}]}
- GET /api/v1/workloads?filterBy=... (get_workloads): {workloads: [Workload]}
- GET /api/v1/workloads/{id}/pods (get_workload_pods): {pods: [...]}
- POST /api/v2/workloads[?dryRun=true] (create_workload_v2): 202 WorkloadV2; 409 on a name
  taken in the project; 400 with the Error schema for an invalid body or an unknown priority.
  dryRun is documented by the 2.24 and v3.0 references, not by "latest": with
  honours_dry_run=False the fake ignores it, as a control plane that does not know it does
  (it stores the workload)
- GET / PUT / DELETE /api/v2/workloads/{WorkloadV2Id}: DELETE answers 202 and the workload
  stays listed in phase Deleting (desiredPhase Deleted) for `deletion_reads` list reads;
  PUT applies the manifest and WorkloadV2MetadataUpdateParams (priority, category), or only
  the metadata with update_applies_manifest=False
- a workload's phase is any of components/schemas/Phase (runai_schemas.PHASES), set by tests

Every request needs a current bearer token (401 otherwise, with the Error schema); faults
inject 401/403/404/409/422/429/503 and slow answers, or (after=True) an error answer to a
request that was carried out (a create stored, then answered 503); every request is recorded.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import runai_schemas

CLUSTER_NAME = "spike"
CLUSTER_UUID = "71f69d83-ba66-4822-adf5-55ce55efd210"
CLIENT_ID = "runai-spec-ci"
CLIENT_SECRET = "s3cr3t-0123456789abcdef-access-key"


@dataclass
class Fault:
    """One injected answer, used by the first matching request (every one with keep)."""

    status: int | None = None
    method: str | None = None
    path_contains: str | None = None
    retry_after: str | None = None
    delay: float = 0.0
    body: dict[str, Any] | None = None
    keep: bool = False
    after: bool = False  # carry the request out, then answer the fault instead
    echo: bool = False  # the answer's message echoes the request's bearer token (no "Bearer ")

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
    body: Any


@dataclass
class FakeRunai:
    """The control plane's state; tests seed and inspect it directly."""

    clusters: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "uuid": CLUSTER_UUID,
                "tenantId": 1001,
                "name": CLUSTER_NAME,
                "createdAt": "2026-01-15T10:30:00Z",
                "version": "2.24.7",
            }
        ]
    )
    projects: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"id": str(i), "name": name, "clusterId": CLUSTER_UUID, "status": {"namespace": f"runai-{name}"}}
            for i, name in enumerate(("team-a", "nlp-lab", "vision-lab"), start=7)
        ]
    )
    access_keys: dict[str, str] = field(default_factory=lambda: {CLIENT_ID: CLIENT_SECRET})
    tokens: set[str] = field(default_factory=set)  # the tokens it accepts now
    static_tokens: set[str] = field(default_factory=set)  # a CLI login's tokens
    expires_in: int = 3600
    priorities: tuple[str, ...] = runai_schemas.PRIORITIES  # the cluster's priority dictionary
    issued: int = 0
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> WorkloadV2 + v1
    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # workload id -> pods
    faults: list[Fault] = field(default_factory=list)
    token_v2: bool = True  # False: POST /api/v2/token is absent (404), v1 only
    honours_dry_run: bool = True  # False: dryRun=true is ignored and the workload stored
    deletion_reads: int = 2  # list reads a deleted workload stays listed in phase Deleting
    update_applies_manifest: bool = True  # False: a PUT changes the metadata only
    deleting: dict[str, int] = field(default_factory=dict)  # workload id -> reads left
    requests: list[Received] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def inject(self, status: int | None = None, **kwargs: Any) -> Fault:
        fault = Fault(status=status, **kwargs)
        with self.lock:
            self.faults.append(fault)
        return fault

    def sent(self, method: str, path_contains: str = "") -> list[Received]:
        return [r for r in self.requests if r.method == method and path_contains in r.path]

    def writes(self) -> list[Received]:
        return [
            r
            for r in self.requests
            if r.method in ("POST", "PUT", "DELETE") and r.path not in ("/api/v1/token", "/api/v2/token")
        ]

    def revoke_tokens(self) -> None:
        """Every token issued so far expires now (the next request answers 401)."""
        with self.lock:
            self.tokens.clear()

    def only(self) -> dict[str, Any]:
        (workload,) = self.workloads.values()
        return workload


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: a response is written as headers, then body; with Nagle the body waits for
    # the client's delayed ACK of the headers (about 40 ms a request on Linux)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    muted = False  # a fault with after=True: the real answer is not sent

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        if self.muted:
            return
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"code": status, "message": message})  # components/schemas/Error

    def _serve(self, method: str) -> None:
        state = self.server.state
        split = urlsplit(self.path)
        path, query = unquote(split.path), parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with state.lock:
            state.requests.append(Received(method, path, query, dict(self.headers.items()), body))
            fault = next((f for f in state.faults if f.matches(method, path)), None)
            if fault is not None and not fault.keep:
                state.faults.remove(fault)
        if fault is not None and fault.after:
            self.muted = True
            try:
                self._carry_out(method, path, query, body)
            finally:
                self.muted = False
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status is not None:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                token = str(self.headers.get("Authorization")).removeprefix("Bearer ")
                echoed = f" (token {token})" if fault.echo else ""
                self._send(
                    fault.status,
                    fault.body or {"code": fault.status, "message": f"injected {fault.status}{echoed}"},
                    headers,
                )
                return
        self._carry_out(method, path, query, body)

    def _carry_out(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> None:
        state = self.server.state
        if path == "/api/v1/token" and method == "POST":
            self._token(body)
            return
        if path == "/api/v2/token" and method == "POST":
            if state.token_v2:
                self._token_v2(body)
            else:
                self._error(404, f"no route {method} {path}")
            return
        auth = self.headers.get("Authorization", "")
        with state.lock:
            known = state.tokens | state.static_tokens
        if not auth.startswith("Bearer ") or auth.removeprefix("Bearer ") not in known:
            self._error(401, "Issuer is not familiar.")
            return
        with state.lock:
            self._route(method, path, query, body)

    def _token(self, body: Any) -> None:
        state = self.server.state
        problems = runai_schemas.errors(runai_schemas.TOKEN_REQUEST, body)
        if problems:
            self._error(400, "; ".join(problems))
            return
        if body.get("grantType") != "client_credentials" or state.access_keys.get(
            body.get("clientID")
        ) != body.get("clientSecret"):
            self._error(401, "invalid client credentials")
            return
        with state.lock:
            state.issued += 1
            token = f"ra-{state.issued}-{uuid.uuid4().hex[:12]}"  # opaque, short: as v2's
            state.tokens.add(token)
        self._send(200, {"accessToken": token, "expiresIn": state.expires_in})

    def _token_v2(self, body: Any) -> None:
        """grant_token_v2: application/x-www-form-urlencoded; OAuth2Error on failure."""
        state = self.server.state
        if self.headers.get("Content-Type") != "application/x-www-form-urlencoded" or not isinstance(
            body, str
        ):
            self._send(400, {"error": "invalid_request", "error_description": "form-encoded body expected"})
            return
        form = {k: v[-1] for k, v in parse_qs(body).items()}
        if form.get("grant_type") != "client_credentials":
            self._send(400, {"error": "unsupported_grant_type"})
            return
        if state.access_keys.get(form.get("client_id", "")) != form.get("client_secret"):
            self._send(401, {"error": "invalid_client", "error_description": "Client authentication failed"})
            return
        with state.lock:
            state.issued += 1
            token = f"ra2-{state.issued}-{uuid.uuid4().hex[:12]}"  # opaque, short: no JWT, no long run
            state.tokens.add(token)
        self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": state.expires_in})

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> None:
        state = self.server.state
        parts = path.strip("/").split("/")
        if method == "GET" and path == "/api/v1/clusters":
            self._send(200, state.clusters)
        elif method == "GET" and path == "/api/v1/org-unit/projects":
            wanted = _filters(query)
            self._send(200, {"projects": [p for p in state.projects if _match(p, wanted)]})
        elif method == "GET" and path == "/api/v1/workloads":
            wanted = _filters(query)
            self._deletion_goes_on()
            items = [_v1(w) for w in state.workloads.values()]
            self._send(200, {"workloads": [w for w in items if _match(w, wanted)]})
        elif (
            method == "GET"
            and parts[:3] == ["api", "v1", "workloads"]
            and len(parts) == 5
            and parts[4] == "pods"
        ):
            if parts[3] not in state.workloads:
                self._error(404, "Resource id not found.")
            else:
                self._send(200, {"pods": state.pods.get(parts[3], [])})
        elif method == "POST" and path == "/api/v2/workloads":
            self._create(body, query.get("dryRun") == ["true"] and state.honours_dry_run)
        elif parts[:3] == ["api", "v2", "workloads"] and len(parts) == 4:
            workload = state.workloads.get(parts[3])
            if workload is None:
                self._error(404, "Resource id not found.")
            elif method == "GET":
                self._send(200, {"workload": _v2(workload), "syncInfo": {"status": "Synced"}})
            elif method == "PUT":
                self._update(workload, body)
            elif method == "DELETE":
                workload["desiredPhase"] = "Deleted"
                workload["phase"], workload["phaseMessage"] = "Deleting", None
                state.deleting.setdefault(parts[3], state.deletion_reads)
                self._deletion_goes_on(count=False)
                self._send(202, _v2(workload))
            else:
                self._error(405, "method not allowed")
        else:
            self._error(404, f"no route {method} {path}")

    def _deletion_goes_on(self, count: bool = True) -> None:
        """A deleted workload is listed (phase Deleting) for deletion_reads list reads."""
        state = self.server.state
        for workload_id, left in list(state.deleting.items()):
            if left <= 0:
                state.workloads.pop(workload_id, None)
                del state.deleting[workload_id]
            elif count:
                state.deleting[workload_id] = left - 1

    def _semantic(self, metadata: dict[str, Any]) -> str | None:
        priority = metadata.get("priority")
        known = self.server.state.priorities
        if priority is not None and priority not in known:
            return f"priority {priority!r} is not a valid priority class; valid values: " + ", ".join(known)
        return None

    def _create(self, body: Any, dry_run: bool) -> None:
        state = self.server.state
        problems = runai_schemas.errors(runai_schemas.WORKLOAD_V2_CREATE, body)
        if problems:
            self._error(400, "; ".join(problems))
            return
        metadata = body["metadata"]
        project = next((p for p in state.projects if p["id"] == metadata.get("projectId")), None)
        if project is None or metadata.get("clusterId") != project["clusterId"]:
            self._error(400, "project not found in the given cluster")
            return
        problem = self._semantic(metadata)
        if problem:
            self._error(400, problem)
            return
        if any(
            w["metadata"]["name"] == metadata.get("name") and w["metadata"]["projectId"] == project["id"]
            for w in state.workloads.values()
        ):
            self._error(409, "Resource with this name already exists")
            return
        manifest = body.get("manifest") or {}
        workload: dict[str, Any] = {
            "metadata": {
                **metadata,
                "id": str(uuid.uuid4()),
                "projectName": project["name"],
                "tenantId": 1001,
                "gvk": {"group": "kubeflow.org", "version": "v1", "kind": manifest.get("kind", "")},
            },
            "desiredPhase": "Running",
            "workloadManifest": copy.deepcopy(manifest),
            "rawManifest": copy.deepcopy(manifest),
            "phase": "Pending",
            "phaseMessage": "Waiting for resources",
        }
        if not dry_run:
            state.workloads[workload["metadata"]["id"]] = workload
        self._send(202, _v2(workload))

    def _update(self, workload: dict[str, Any], body: Any) -> None:
        problems = runai_schemas.errors(runai_schemas.WORKLOAD_V2_UPDATE, body)
        if problems:
            self._error(400, "; ".join(problems))
            return
        problem = self._semantic(body.get("metadata") or {})
        if problem:
            self._error(400, problem)
            return
        workload["metadata"].update(body.get("metadata") or {})
        if "manifest" in body and self.server.state.update_applies_manifest:
            workload["rawManifest"] = copy.deepcopy(body["manifest"])
            workload["workloadManifest"] = copy.deepcopy(body["manifest"])
        self._send(202, _v2(workload))


def _v2(workload: dict[str, Any]) -> dict[str, Any]:
    """components/schemas/WorkloadV2."""
    return {
        k: copy.deepcopy(workload[k]) for k in ("metadata", "desiredPhase", "workloadManifest", "rawManifest")
    }


def _v1(workload: dict[str, Any]) -> dict[str, Any]:
    """The fields of components/schemas/Workload (get_workloads) that runai-spec reads."""
    meta = workload["metadata"]
    return {
        "id": meta["id"],
        "name": meta["name"],
        "projectId": meta["projectId"],
        "projectName": meta["projectName"],
        "clusterId": meta["clusterId"],
        "priorityClassName": meta.get("priority"),
        "category": meta.get("category"),
        "phase": workload["phase"],
        "phaseMessage": workload.get("phaseMessage"),
        "deletedAt": None,
        "type": "pytorchjob",
    }


def _filters(query: dict[str, list[str]]) -> list[tuple[str, str]]:
    """filterBy (explode: false): comma-separated `field==value` terms; only == is served."""
    terms = [t for value in query.get("filterBy", []) for t in value.split(",") if t]
    return [tuple(t.split("==", 1)) for t in terms if "==" in t]  # type: ignore[misc]


def _match(item: dict[str, Any], wanted: list[tuple[str, str]]) -> bool:
    return all(str(item.get(key)) == value for key, value in wanted)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: FakeRunai) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class RunaiAPI:
    """The running control plane: `url`, `state`, `stop()`."""

    def __init__(self, state: FakeRunai | None = None) -> None:
        self.state = state or FakeRunai()
        self.server = _Server(self.state)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="fake-runai-api",
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
