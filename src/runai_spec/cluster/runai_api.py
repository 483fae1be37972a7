"""Run:ai's control plane over urllib3: tokens (never shown), retried requests, names to ids."""

# The endpoints and schemas follow NVIDIA Run:ai's published OpenAPI documents (control-plane
# API 2.24, run-ai-docs.nvidia.com/api/2.24/...; the self-hosted v3.0 reference at
# docs.nvidia.com/run-ai/self-hosted/reference/rest-api/endpoints/...), as republished in
# github.com/api-evangelist/runai openapi/runai-*-api-openapi.yml ("version: latest"):
#
# - Tokens: POST /api/v2/token (grant_token_v2, "latest" and v3.0): a form-encoded OAuth2
#   request {grant_type: client_credentials, client_id, client_secret} -> OAuth2TokenResponse
#   {access_token, token_type, expires_in}, errors OAuth2Error {error, error_description};
#   where it is absent (404/405), POST /api/v1/token (grant_token, deprecated since 2.25):
#   TokenRequest {grantType, clientID, clientSecret} -> TokenResponse {accessToken, expiresIn}.
#   Both document 503 ("try again"): retried as every call is (session.call_with_retries).
# - Clusters: GET /api/v1/clusters (get_clusters): an array of DisplayedCluster {uuid, name,
#   version}; the version decides whether a dry run may go through Run:ai (facts.runai_api).
# - Projects: GET /api/v1/org-unit/projects?filterBy=name==P (get_projects):
#   {projects: [Project {id, name, clusterId, status: {namespace}}]}.
# - Workloads: GET /api/v1/workloads?filterBy=name==N,projectId==P (get_workloads):
#   {workloads: [Workload {id, name, projectId, clusterId, phase, phaseMessage}]}; its pods:
#   GET /api/v1/workloads/{workloadId}/pods (get_workload_pods): {pods: [{name, nodeName,
#   k8sPhase}]}.
# - Workloads V2: POST /api/v2/workloads[?dryRun=true] (create_workload_v2):
#   WorkloadV2CreateRequest {metadata: WorkloadV2MetadataCreateParams {name, projectId,
#   clusterId, priority, preemptibility, category}, manifest}; 202 (2.24) or 201 (2.23) with
#   WorkloadV2 {metadata, desiredPhase, workloadManifest, rawManifest}.
#   GET /api/v2/workloads/{WorkloadV2Id} (get_workload_v2_by_id): WorkloadV2GetResponse
#   {workload: WorkloadV2, syncInfo}. PUT the same path (update_workload_v2):
#   WorkloadV2UpdateRequest {metadata: {priority, category}, manifest}. DELETE it
#   (delete_workload_v2): 202.
# - Errors: Error {code, message, details}.

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from .. import __version__
from ..errors import ClusterError, InputError
from ..facts.runai_api import TOKEN_V1_PATH, TOKEN_V2_PATH
from ..render.manifests import Manifest
from .refusals import REFUSED_WORDS, refused_line
from .session import (
    Retry,
    RetryPolicy,
    Unreached,
    call_with_retries,
    clean,
    log,
    own_session,
    reason_of,
    retry_after_of,
)

# Where the credentials come from, in this order (docs/runai-submit.md).
ENV_CLIENT_ID = "RUNAI_CLIENT_ID"
ENV_CLIENT_SECRET = "RUNAI_CLIENT_SECRET"
ENV_ACCESS_KEY_FILE = "RUNAI_ACCESS_KEY_FILE"  # YAML/JSON: clientId (or clientID), clientSecret
ENV_CLI = "RUNAI_CLI"  # the runai CLI to ask for the logged-in user's token (default: on PATH)
CLI_TOKEN_ARGS = ("auth", "get-token", "--output", "plaintext")
LOGIN_HINT = (
    "log in again: `runai login` (runai-spec asks `runai auth get-token`), or renew "
    f"the access key in {ENV_CLIENT_ID}/{ENV_CLIENT_SECRET} or {ENV_ACCESS_KEY_FILE}"
)
CLUSTERS_PATH = "/api/v1/clusters"
PROJECTS_PATH = "/api/v1/org-unit/projects"
WORKLOADS_V1_PATH = "/api/v1/workloads"
WORKLOADS_V2_PATH = "/api/v2/workloads"
EXPIRY_MARGIN = 30.0  # seconds: a token this close to its end is renewed before use
KEY_FILE_LIMIT = 64 * 1024  # bytes: an access key file is a few lines


@dataclass(frozen=True)
class RunaiTarget:
    """Which control plane and cluster, and how patiently; sleep and environ are injectable."""

    url: str
    cluster: str  # id (UUID) or name
    category: str | None = "Train"
    timeout: tuple[float, float] = (5.0, 30.0)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    progress: Callable[[str], None] | None = None
    environ: Mapping[str, str] | None = None  # None: os.environ
    clock: Callable[[], float] = time.monotonic


@dataclass
class _Token:
    value: str
    expires: float | None  # clock() time; None: unknown (a CLI token: renewed on a 401)


class _Credentials:
    """The bearer token: from an access key (exchanged at POST /api/v2/token, else the
    deprecated /api/v1/token) or from the runai CLI's login (`runai auth get-token`); renewed
    when it expires or is refused. Every token it held is remembered, to be masked."""

    def __init__(self, target: RunaiTarget, session: RunaiSession) -> None:
        self.target, self.session = target, session
        env = target.environ if target.environ is not None else os.environ
        self.env = env
        self.key = _access_key(env)
        self.token: _Token | None = None
        self.seen: list[str] = []

    @property
    def source(self) -> str:
        return "the access key" if self.key else "the runai CLI's login"

    def secrets(self) -> list[str]:
        """What must never be shown: every token held, and the access key's secret."""
        return [s for s in (*self.seen, self.key[1] if self.key else None) if s]

    def header(self, *, renew: bool = False) -> str:
        now = self.target.clock()
        token = self.token
        if renew or token is None or (token.expires is not None and now >= token.expires):
            token = self.token = self._fetch()
            self.seen.append(token.value)
        return f"Bearer {token.value}"

    def _fetch(self) -> _Token:
        if self.key is not None:
            return self._exchange(*self.key)
        return _cli_token(self.env)

    def _exchange(self, client_id: str, secret: str) -> _Token:
        form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
        status, data = self._request(TOKEN_V2_PATH, form=form)
        fields = ("access_token", "expires_in")
        if status in (404, 405):  # a control plane without v2: the deprecated v1 call
            body = {"grantType": "client_credentials", "clientID": client_id, "clientSecret": secret}
            status, data = self._request(TOKEN_V1_PATH, body=body)
            fields = ("accessToken", "expiresIn")
        if status in (400, 401, 403):
            raise ClusterError(
                f"unauthorised: the Run:ai control plane refused the access key "
                f"(HTTP {status}: {_message(self.session.scrub(data), status)})",
                file="runai",
                hint=LOGIN_HINT,
            )
        value = data.get(fields[0]) if isinstance(data, dict) else None
        if status != 200 or not isinstance(value, str) or not value:
            raise ClusterError(
                f"the Run:ai token endpoint answered HTTP {status} without a token",
                file="runai",
                hint="try again later; report it if it persists",
            )
        expires_in = data.get(fields[1])
        expires = (
            self.target.clock() + max(0.0, float(expires_in) - EXPIRY_MARGIN)
            if isinstance(expires_in, int | float)
            else None
        )
        return _Token(value, expires)

    def _request(self, path: str, body: Any = None, form: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """One token request, retried on 429/503 (both token calls document 503) and on a
        request that never left, as every call is."""
        return call_with_retries(
            lambda: self.session.send_raw("POST", path, body=body, auth=None, form=form),
            Retry(self.target, "runai", "the control plane's status", "the Run:ai control plane"),
            f"POST {path}",
            write=False,  # a token request is safe to repeat
            refused_hint="check site.yaml's submit.runai.url and that the control plane is up",
        )


def _access_key(env: Mapping[str, str]) -> tuple[str, str] | None:
    client_id, secret = env.get(ENV_CLIENT_ID), env.get(ENV_CLIENT_SECRET)
    if client_id and secret:
        return client_id, secret
    if client_id or secret:
        raise InputError(
            f"{ENV_CLIENT_ID} and {ENV_CLIENT_SECRET} go together; only one is set",
            field=ENV_CLIENT_ID if not client_id else ENV_CLIENT_SECRET,
            hint="set both (an access key's client id and secret), or neither",
        )
    path = env.get(ENV_ACCESS_KEY_FILE)
    if not path:
        return None
    import yaml

    try:
        data = yaml.safe_load(_key_file_text(path))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(
            f"cannot read the access key file ({type(exc).__name__})",
            file=path,
            field=ENV_ACCESS_KEY_FILE,
            hint="a YAML or JSON file with clientId and clientSecret",
        ) from None
    if isinstance(data, dict):
        client_id = data.get("clientId") or data.get("clientID")
        secret = data.get("clientSecret")
        if isinstance(client_id, str) and isinstance(secret, str) and client_id and secret:
            return client_id, secret
    raise InputError(
        "the access key file has no clientId and clientSecret",
        file=path,
        field=ENV_ACCESS_KEY_FILE,
        hint="a YAML or JSON file with clientId and clientSecret (strings)",
    )


def _key_file_text(path: str) -> str:
    """The access key file's text: a regular file of at most KEY_FILE_LIMIT bytes (a FIFO
    would block the read, a device such as /dev/zero would never end it); opened without
    blocking and checked on the open file, so a swap between check and read changes nothing."""

    def refuse(what: str) -> InputError:
        return InputError(
            f"the access key file {what}",
            file=path,
            field=ENV_ACCESS_KEY_FILE,
            hint=f"a regular YAML or JSON file (at most {KEY_FILE_LIMIT // 1024} KiB) "
            "with clientId and clientSecret",
        )

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise refuse(f"cannot be opened ({exc.strerror or type(exc).__name__})") from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        data = os.read(fd, KEY_FILE_LIMIT + 1) if regular else b""
    finally:
        os.close(fd)
    if not regular:
        raise refuse("is not a regular file")
    if len(data) > KEY_FILE_LIMIT:
        raise refuse(f"is larger than {KEY_FILE_LIMIT // 1024} KiB")
    return data.decode("utf-8")


def _cli_token(env: Mapping[str, str]) -> _Token:
    """The logged-in user's token from the runai CLI's configuration; its output is never
    shown (it is the token), nor its stderr."""
    cli = env.get(ENV_CLI) or shutil.which("runai", path=env.get("PATH"))
    if not cli:
        raise ClusterError(
            "no Run:ai credentials: no access key and no runai CLI to ask for a token",
            file="runai",
            hint=f"set {ENV_CLIENT_ID} and {ENV_CLIENT_SECRET} (an access key), "
            f"or {ENV_ACCESS_KEY_FILE}, or install the runai CLI and `runai login`",
        )
    try:
        done = subprocess.run(
            [cli, *CLI_TOKEN_ARGS], capture_output=True, timeout=30, check=False, env=dict(env)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(
            f"cannot run `runai auth get-token` ({type(exc).__name__})", file="runai", hint=LOGIN_HINT
        ) from None
    token = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode != 0 or not token or any(c.isspace() for c in token):
        raise ClusterError(
            f"`runai auth get-token` gave no token (exit {done.returncode}); "
            "runai-spec never shows its output",
            file="runai",
            hint=LOGIN_HINT,
        )
    return _Token(token, None)


def _message(data: Any, status: int) -> str:
    """The Error schema's message (and details), or OAuth2Error's error_description (and
    error), as one clean line."""
    if isinstance(data, dict) and data.get("message"):
        details = f" ({data['details']})" if data.get("details") else ""
        return clean(f"{data['message']}{details}", 300)
    if isinstance(data, dict) and (data.get("error_description") or data.get("error")):
        code = f" ({data['error']})" if data.get("error") and data.get("error_description") else ""
        return clean(f"{data.get('error_description') or data['error']}{code}", 300)
    return f"HTTP {status}"


class RunaiSession:
    """One connection pool to the control plane; every request goes through `call`."""

    def __init__(self, target: RunaiTarget) -> None:
        import urllib3

        self.target = target
        self.base = target.url.rstrip("/")
        self.host = clean(self.base, 200)
        self.pool = urllib3.PoolManager(headers={"User-Agent": f"runai-spec/{__version__}"}, retries=False)
        self.credentials = _Credentials(target, self)
        self.attempts = 0  # how many times the last call was sent (a create retried: reconcile)

    def __enter__(self) -> RunaiSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.clear()

    def scrub(self, data: Any) -> Any:
        """An answer without this session's credentials, wherever a server echoed them (any
        string in it, at any depth): each token it held and the secret become `***`."""
        secrets = self.credentials.secrets()
        if not secrets:
            return data

        def mask(value: Any) -> Any:
            if isinstance(value, str):
                for secret in secrets:
                    value = value.replace(secret, "***")
                return value
            if isinstance(value, dict):
                return {k: mask(v) for k, v in value.items()}
            if isinstance(value, list):
                return [mask(v) for v in value]
            return value

        return mask(data)

    def send_raw(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]] = (),
        body: Any = None,
        auth: str | None = None,
        form: Mapping[str, str] | None = None,
    ) -> tuple[int, Any, float | None]:
        """One attempt: (status, JSON body or None, Retry-After). The token goes only into
        the header; FORM is sent form-encoded (the OAuth2 token call)."""
        import urllib3

        query = list(query)
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        payload = json.dumps(body) if body is not None else None
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            payload = urlencode(list(form.items()))
        elif body is not None:
            headers["Content-Type"] = "application/json"
        if auth is not None:
            headers["Authorization"] = auth
        started = self.target.clock()
        try:
            resp = self.pool.request(
                method,
                url,
                headers=headers,
                body=payload,
                timeout=urllib3.Timeout(connect=self.target.timeout[0], read=self.target.timeout[1]),
                redirect=False,
            )
        except (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError) as exc:
            raise Unreached(f"cannot connect to {self.host}: {reason_of(exc)}", sent=False) from None
        except urllib3.exceptions.SSLError as exc:
            raise ClusterError(
                f"cannot connect to {self.host}: TLS failure ({reason_of(exc)})",
                file="runai",
                hint="check site.yaml's submit.runai.url and the system's trusted certificates",
            ) from None
        except urllib3.exceptions.HTTPError as exc:
            reason = reason_of(exc)
            if reason == "timed out":
                reason = f"none within {self.target.timeout[1]:g} s (--request-timeout)"
            raise Unreached(f"no answer from {self.host}: {reason}", sent=True) from None
        log.debug("runai %s %s -> %s (%.3f s)", method, path, resp.status, self.target.clock() - started)
        try:
            data = json.loads(resp.data or b"null")
        except ValueError:
            data = None
        return resp.status, data, retry_after_of(resp.headers)

    def call(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]] = (),
        body: Any = None,
        write: bool = False,
    ) -> tuple[int, Any]:
        """Send with the token, renewed once on a 401; bounded retries on 429/503 and on
        requests that never left. A write whose outcome is unknown raises Uncertain."""
        query = list(query)
        renewed = False
        self.attempts = 0

        def attempt() -> tuple[int, Any, float | None]:
            nonlocal renewed
            self.attempts += 1
            answer = self.send_raw(method, path, query, body, self.credentials.header())
            if answer[0] == 401 and not renewed:  # renewed once, not counted as an attempt
                renewed = True
                answer = self.send_raw(method, path, query, body, self.credentials.header(renew=True))
            if answer[0] == 401:
                raise ClusterError(
                    f"unauthorised: the Run:ai control plane refused "
                    f"{self.credentials.source}'s token ({_message(self.scrub(answer[1]), 401)})",
                    file="runai",
                    hint=LOGIN_HINT,
                )
            return answer

        status, data = call_with_retries(
            attempt,
            Retry(self.target, "runai", "the control plane's status", "the Run:ai control plane"),
            f"{method} {clean(path, 120)}",
            write=write,
            refused_hint="check site.yaml's submit.runai.url and that the control plane is up",
        )
        return status, (self.scrub(data) if status >= 400 else data)


def runai_session_for(target: RunaiTarget | RunaiSession) -> contextlib.AbstractContextManager[RunaiSession]:
    """The command's own Run:ai session, or one for this call alone (one token)."""
    return own_session(target, RunaiSession, RunaiSession)


def refused(status: int, data: Any, where: str, verb: str) -> ClusterError:
    """A refused control-plane request as one `error:` line with the server's reason."""
    metadata = (
        "the metadata (priority, preemptibility, category) comes from the preset and site.yaml: "
        "ask the AI Engineers whether Run:ai knows those values"
    )
    return refused_line(
        where,
        status,
        _message(data, status),
        "runai",
        {
            403: f"ask the Run:ai administrators for a role that may {verb} workloads in the project",
            404: "check the name, the project and site.yaml's submit.runai",
            409: "a workload of that name exists: `runai-spec status` shows it; --replace updates it",
            400: metadata,
            422: metadata,
        },
        {**REFUSED_WORDS, 400: "refused by Run:ai", 422: "refused by Run:ai"},
    )


def _is_uuid(value: str) -> bool:
    from ..load.site import RUNAI_CLUSTER_ID

    return bool(re.match(RUNAI_CLUSTER_ID, value))


def resolve_cluster(session: RunaiSession) -> str:
    """site.yaml's cluster (an id, or a name looked up in GET /api/v1/clusters) -> its id."""
    cluster = session.target.cluster
    if _is_uuid(cluster):
        return cluster
    status, data = session.call("GET", CLUSTERS_PATH)
    if status != 200:
        raise refused(status, data, f"cluster {cluster}", "list")
    clusters = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
    for c in clusters:
        if c.get("name") == cluster and isinstance(c.get("uuid"), str):
            return str(c["uuid"])
    names = ", ".join(sorted(clean(c.get("name"), 60) for c in clusters)) or "none"
    raise ClusterError(
        f"cluster {cluster!r}: not known to the Run:ai control plane",
        file="runai",
        hint=f"site.yaml's submit.runai.cluster; clusters: {names}",
    )


def cluster_version(session: RunaiSession, cluster_id: str) -> tuple[str, str | None]:
    """The cluster's name and the version it reports (DisplayedCluster.version; None: none)."""
    status, data = session.call("GET", CLUSTERS_PATH)
    if status != 200:
        raise refused(status, data, f"cluster {cluster_id}", "list")
    for c in data if isinstance(data, list) else []:
        if isinstance(c, dict) and c.get("uuid") == cluster_id:
            version = c.get("version")
            return clean(c.get("name"), 60), clean(version, 40) if isinstance(version, str) else None
    return cluster_id, None


@dataclass(frozen=True)
class Project:
    """A Run:ai project on the cluster: its id, and its namespace where Run:ai reports one."""

    id: str
    namespace: str | None


def find_project(session: RunaiSession, project: str, cluster_id: str) -> Project:
    """A project name -> the project on this cluster (GET /api/v1/org-unit/projects)."""
    status, data = session.call("GET", PROJECTS_PATH, [("filterBy", f"name=={project}")])
    if status != 200:
        raise refused(status, data, f"project {project}", "read")
    projects = data.get("projects") if isinstance(data, dict) else None
    found = [
        p
        for p in projects or []
        if isinstance(p, dict) and p.get("name") == project and p.get("clusterId") == cluster_id
    ]
    if not found:
        raise ClusterError(
            f"project {project!r}: not found on cluster {cluster_id} of the Run:ai control plane",
            file="runai",
            hint="check the profile's project; `runai project list` shows yours",
        )
    status_ = found[0].get("status")
    namespace = status_.get("namespace") if isinstance(status_, dict) else None
    return Project(str(found[0]["id"]), clean(namespace, 80) if isinstance(namespace, str) else None)


def resolve_project(session: RunaiSession, project: str, cluster_id: str) -> str:
    """A project name -> its id on this cluster."""
    return find_project(session, project, cluster_id).id


@dataclass(frozen=True)
class Found:
    """A workload of that name in the project: its id, (V2) its manifest and the metadata it
    was stored with (WorkloadV2MetadataResponse), and its phase."""

    id: str
    raw: Manifest | None
    phase: str | None
    message: str | None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def find_workload(session: RunaiSession, name: str, project_id: str) -> Found | None:
    """The project's workload called NAME (GET /api/v1/workloads), with its rawManifest
    (GET /api/v2/workloads/{id}); None when there is none."""
    status, data = session.call(
        "GET", WORKLOADS_V1_PATH, [("filterBy", f"name=={name},projectId=={project_id}")]
    )
    if status != 200:
        raise refused(status, data, f"workload {name}", "list")
    items = data.get("workloads") if isinstance(data, dict) else None
    match = [
        w
        for w in items or []
        if isinstance(w, dict)
        and w.get("name") == name
        and str(w.get("projectId")) == project_id
        and not w.get("deletedAt")
    ]
    if not match:
        return None
    item = match[0]
    workload_id = str(item.get("id"))
    status, data = session.call("GET", f"{WORKLOADS_V2_PATH}/{quote(workload_id, safe='')}")
    raw: Manifest | None = None
    metadata: dict[str, Any] = {}
    if status == 200 and isinstance(data, dict) and isinstance(data.get("workload"), dict):
        raw = _manifest(data["workload"].get("rawManifest"))
        stored = data["workload"].get("metadata")
        metadata = dict(stored) if isinstance(stored, dict) else {}
    elif status != 404:  # a V1 workload (not submitted through V2) answers 404 there
        raise refused(status, data, f"workload {name}", "read")
    phase = item.get("phase")
    message = item.get("phaseMessage")
    return Found(
        workload_id,
        raw,
        clean(phase, 40) if phase else None,
        clean(message, 200) if message else None,
        metadata,
    )


def _manifest(value: Any) -> Manifest | None:
    """A stored manifest whose metadata, labels and annotations have the shapes runai-spec
    reads; anything else reads as none (so: not runai-spec's, never touched)."""
    if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
        return None
    meta = value["metadata"]
    if not all(isinstance(meta.get(k, {}), dict) for k in ("labels", "annotations")):
        return None
    return value
