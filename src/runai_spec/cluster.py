"""The only importer of kubernetes (inside functions): submit, diff --live, status, logs, delete."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from . import __version__
from .errors import ClusterError, InputError, InternalError
from .manifests import Manifest

FIELD_MANAGER = "runai-spec"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PROFILE_SHA_ANNOTATION = "runai-spec/profile-sha256"
# The training operator's pod labels (kubeflow/common pkg/apis/common/v1/constants.go).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
CONTAINER = "pytorch"
# Fields the API server owns: never part of what runai-spec renders, so never diffed.
SERVER_META = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
               "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")
APPLY_TYPE = "application/apply-patch+yaml"

log = logging.getLogger("runai_spec.cluster")


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


PYTORCHJOB = Resource("kubeflow.org/v1", "PyTorchJob", "pytorchjobs")
CONFIGMAP = Resource("v1", "ConfigMap", "configmaps")
PODS = Resource("v1", "Pod", "pods")
EVENTS = Resource("v1", "Event", "events")
RESOURCES = {(r.group_version, r.kind): r for r in (PYTORCHJOB, CONFIGMAP)}


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries for 429/503 and unsent requests: few attempts, little total waiting."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 4.0  # one wait, also the cap on a server's Retry-After
    max_total: float = 15.0  # all waits of one request together


@dataclass(frozen=True)
class Target:
    """Which cluster to talk to and how patiently; sleep is injectable so tests run fast."""

    kubeconfig: Path | None = None
    context: str | None = None
    timeout: tuple[float, float] = (5.0, 30.0)  # connect, read (seconds)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    wait_deleted: float = 120.0  # seconds --replace waits for the old object to go


@dataclass(frozen=True)
class Ref:
    """One object on the cluster: `pytorchjobs/<namespace>/<name>`."""

    resource: Resource
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.resource.plural}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ObjectOutcome:
    ref: str
    action: str  # created, unchanged, replaced, would create, would replace
    stored: Manifest | None  # what the server stored (or would store), server fields stripped


@dataclass(frozen=True)
class SubmitResult:
    outcomes: tuple[ObjectOutcome, ...]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return any(o.action != "unchanged" for o in self.outcomes)


@dataclass(frozen=True)
class LiveObject:
    ref: str
    live: Manifest | None  # None: does not exist yet
    applied: Manifest  # the server's dry-run apply result


@dataclass(frozen=True)
class PodState:
    name: str
    role: str
    index: int
    phase: str
    state: str  # running, waiting: <reason>, terminated: exit <code> (<reason>)
    restarts: int
    node: str | None
    reason: str | None  # why it is pending, in plain words


@dataclass(frozen=True)
class StatusResult:
    name: str
    namespace: str
    phase: str
    message: str | None
    pods: tuple[PodState, ...]
    pending_reasons: tuple[str, ...]


@dataclass(frozen=True)
class SavedLog:
    pod: str
    path: Path
    size: int


@dataclass(frozen=True)
class LogsResult:
    saved: tuple[SavedLog, ...]
    skipped: tuple[tuple[str, str], ...]  # (pod, why)


@dataclass(frozen=True)
class DeleteResult:
    deleted: tuple[str, ...]
    missing: tuple[str, ...] = ()  # with missing_ok: already gone, skipped


# --- transport -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class _Uncertain(Exception):
    """A write whose outcome is unknown (timed out, dropped, 5xx): read back before retrying."""


class _Transport(Exception):
    def __init__(self, what: str, sent: bool) -> None:
        super().__init__(what)
        self.what = what
        self.sent = sent


# Credentials: after `bearer`/`token`, JWTs, and long unbroken base64-like runs (no dots, so
# field paths and label keys survive).
_TOKENISH = re.compile(r"(?i)(bearer\s+|token[\"'=:\s]+)[A-Za-z0-9._~+/=-]+|"
                       r"eyJ[\w-]+\.[\w-]+\.[\w-]+|[A-Za-z0-9+/=_-]{40,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean(text: object, limit: int = 300) -> str:
    """One safe line of server or library text: no control characters, no token-like runs."""
    line = _CONTROL.sub(" ", str(text)).strip()
    line = _TOKENISH.sub(lambda m: (m.group(1) or "") + "<redacted>", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


class RedactFilter(logging.Filter):
    """Defence in depth for --debug: rewrite any record that could carry a credential."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if re.search(r"(?i)authorization|bearer|token", text):
            record.msg, record.args = clean(text, 2000), ()
        return True


def enable_debug() -> None:
    """--debug: our request lines and urllib3's connection lines on stderr, redacted.

    The kubernetes client's own debug switch (Configuration.debug) turns on http.client's
    header dump, which prints the bearer token: it stays off.
    """
    for name in ("runai_spec", "urllib3"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
            handler = _StderrHandler()
            handler.addFilter(RedactFilter())
            handler.setFormatter(logging.Formatter("debug: %(name)s: %(message)s"))
            logger.addHandler(handler)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is now (tests and runners swap it)."""

    @property
    def stream(self) -> Any:
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class Session:
    """One API client and the retry rules; every request goes through `call`."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.api = _api_client(target)
        self.host = str(self.api.configuration.host)

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, path: str, query: Iterable[tuple[str, str]] = (),
             body: str | None = None, content_type: str = "application/json",
             stream: bool = False) -> Any:
        """One attempt. Returns the client's raw response; raises _Transport."""
        import urllib3

        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=list(query), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        started = time.monotonic()
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body,
                                     _request_timeout=self.target.timeout)
            if not stream or resp.status >= 300:
                resp.read()
        except (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError) as exc:
            raise _Transport(f"cannot connect to {self.host}: {_reason(exc)}", sent=False) from None
        except urllib3.exceptions.HTTPError as exc:
            raise _Transport(f"no answer from {self.host}: {_reason(exc)}", sent=True) from None
        except OSError as exc:
            raise _Transport(f"cannot reach {self.host}: {exc.strerror or type(exc).__name__}",
                             sent=True) from None
        log.debug("%s %s -> %s (%.3f s)", method, path, resp.status, time.monotonic() - started)
        return resp

    def call(self, method: str, path: str, query: Iterable[tuple[str, str]] = (),
             body: str | None = None, content_type: str = "application/json",
             write: bool = False, stream: bool = False) -> Any:
        """Send with bounded retries on 429/503 and on requests that never left.

        A write whose outcome is unknown raises _Uncertain: the caller reads back first.
        """
        policy = self.target.retry
        query = list(query)
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self.send(method, path, query, body, content_type, stream)
            except _Transport as exc:
                if exc.sent and write:
                    raise _Uncertain(exc.what) from None
                failure: str = exc.what
                retry_after = None
            else:
                if resp.status in (429, 503) or (resp.status >= 500 and not write):
                    failure = f"the API server is busy or failing (HTTP {resp.status})"
                    retry_after = _retry_after(resp.headers)
                elif resp.status >= 500:
                    raise _Uncertain(f"HTTP {resp.status}")
                else:
                    return resp
            delay = min(policy.max_delay, retry_after if retry_after is not None
                        else policy.base_delay * 2 ** (attempt - 1))
            if attempt >= policy.attempts or waited + delay > policy.max_total:
                raise ClusterError(f"{failure}; gave up after {attempt} attempt(s)",
                                   file="cluster", hint="try again later; check the cluster's "
                                   "status with your engineers if it persists")
            log.debug("retrying in %.2f s (%s)", delay, failure)
            self.target.sleep(delay)
            waited += delay


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, BaseException) and reason is not exc:
        return _reason(reason)
    text = type(reason).__name__ if not str(reason) else str(reason)
    if "timed out" in text.lower() or "timeout" in type(reason).__name__.lower():
        return "timed out"
    if "refused" in text.lower():
        return "connection refused"
    if "RemoteDisconnected" in text or "closed" in text.lower() or "ProtocolError" in text:
        return "connection closed by the server"
    return clean(re.sub(r"<[^>]*>", "", text), 120)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _api_client(target: Target) -> Any:
    """An ApiClient from the kubeconfig; its debug output stays off (it prints the token)."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # its loaders are untyped
    cfg = client.Configuration()
    path = target.kubeconfig
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        first = env.split(os.pathsep)[0] if env else ""
        path = Path(first) if first else Path.home() / ".kube" / "config"
        if not path.exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
            return _finish_client(cfg)
    if not path.is_file():
        raise ClusterError("no kubeconfig found", file=str(path), hint="pass --kubeconfig FILE "
                           "or set KUBECONFIG")
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=str(path))
        names = [c.get("name") for c in contexts or []]
        if target.context is not None and target.context not in names:
            raise ClusterError(f"context {target.context!r} not in the kubeconfig", file=str(path),
                               hint=f"contexts: {', '.join(map(str, names)) or 'none'}")
        config.load_kube_config(config_file=str(path), context=target.context,
                                client_configuration=cfg, persist_config=False)
    except ClusterError:
        raise
    except Exception as exc:  # the loader raises many types; its text may quote the file
        raise ClusterError(f"cannot use the kubeconfig ({type(exc).__name__})", file=str(path),
                           hint="check it with `kubectl config view` (which hides secrets)") from None
    return _finish_client(cfg)


def _finish_client(cfg: Any) -> Any:
    from kubernetes import client

    cfg.debug = False
    cfg.retries = False  # runai-spec retries itself: reads back writes before any retry
    cfg.client_go_retries = False
    api = client.ApiClient(cfg)
    api.user_agent = f"runai-spec/{__version__}"
    return api


# --- errors ----------------------------------------------------------------------------


def refusal(resp: Any, ref: Ref | str, verb: str, manifest: Manifest | None = None) -> ClusterError:
    """One clear line for a refused request, with a hint; never the headers or the token."""
    data = Reply(resp.status, resp.data or b"", {}).json()
    status = data if isinstance(data, dict) and data.get("kind") == "Status" else {}
    message = clean(status.get("message") or resp.reason or f"HTTP {resp.status}")
    code = resp.status
    where = str(ref)
    if code == 401:
        return ClusterError("unauthorised: the API server refused the credentials", file="cluster",
                            hint="log in again or refresh the token of the kubeconfig context")
    if code == 403:
        return ClusterError(f"{where}: forbidden: {message}", file="cluster",
                            hint=f"ask the cluster engineers for permission to {verb} it")
    if code == 404:
        return ClusterError(f"{where}: not found: {message}", file="cluster",
                            hint="check the name, the project (namespace) and the kubeconfig context")
    if code == 409:
        conflicts = "; ".join(clean(c.get("message", ""), 120) for c in _causes(status))
        return ClusterError(f"{where}: conflict: {conflicts or message}", file="cluster",
                            hint="another client changed it; check with `runai-spec status`, "
                            "then submit again (or --replace)")
    if code == 422:
        causes = _causes(status)
        parts = [f"{clean(c.get('field', ''), 120)}: {clean(c.get('message', ''), 160)}"
                 for c in causes] or [message]
        profile_field = next((f for c in causes if (f := profile_field_of(c.get("field", "")))), None)
        hint = (f"it comes from the profile's `{profile_field}`" if profile_field else
                "the field comes from the preset or template, not the profile: report it to the "
                "engineers (the cluster's CRD may differ from the upstream one)")
        return ClusterError(f"{where}: invalid: {'; '.join(parts)}", file="cluster", hint=hint)
    if code == 400:
        return ClusterError(f"{where}: bad request: {message}", file="cluster",
                            hint="the server refused the manifest; an unknown field means the "
                            "cluster's CRD is older than what runai-spec renders: report it")
    return ClusterError(f"{where}: HTTP {code}: {message}", file="cluster",
                        hint="try again later; report it if it persists")


def _causes(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    causes = (status.get("details") or {}).get("causes") or []
    return [c for c in causes if isinstance(c, dict)]


_PROFILE_FIELDS = (
    (re.compile(r"containers\[\d+\]\.image$"), "image"),
    (re.compile(r"containers\[\d+\]\.(command|args)"), "command"),
    (re.compile(r"containers\[\d+\]\.env"), "env"),
    (re.compile(r"containers\[\d+\]\.workingDir"), "working_dir"),
    (re.compile(r"^\.?metadata\.name"), "name"),
    (re.compile(r"persistentVolumeClaim|volumeMounts"), "checkpoint / data"),
    (re.compile(r"^\.?metadata\.(namespace|labels)"), "project"),
)


def profile_field_of(manifest_path: str) -> str | None:
    """Map a server's field path (details.causes[].field) back to the profile field it came from."""
    for pattern, name in _PROFILE_FIELDS:
        if pattern.search(manifest_path):
            return name
    return None


# --- comparing -------------------------------------------------------------------------


def strip_server_fields(obj: Manifest) -> Manifest:
    """The object without what the server manages (status, uid, resourceVersion, ...)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_META}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if "annotations" in meta:
        meta["annotations"] = annotations
    out["metadata"] = meta
    return out


def contains(want: Any, have: Any) -> bool:
    """Everything runai-spec renders is in the live object (server defaults may add fields)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and contains(v, have[k])
                                              for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(have, list) and len(want) == len(have)
                and all(contains(w, h) for w, h in zip(want, have, strict=True)))
    return bool(want == have and type(want) is type(have)) or (
        isinstance(want, (int, float)) and not isinstance(want, bool)
        and isinstance(have, (int, float)) and not isinstance(have, bool) and want == have)


def same_render(manifest: Manifest, live: Manifest) -> bool:
    """The live object is exactly this render: contains it, with the same runai-spec provenance."""
    def ours(obj: Manifest) -> dict[str, Any]:
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        return {k: v for k, v in notes.items() if k.startswith("runai-spec/")}
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
        _require_served(session, ref)
        return None
    if resp.status != 200:
        raise refusal(resp, ref, "read")
    body = Reply(resp.status, resp.data, {}).json()
    if not isinstance(body, dict):
        raise ClusterError(f"{ref}: the API server sent something that is not an object",
                           file="cluster")
    return body


def _require_served(session: Session, ref: Ref) -> None:
    """A 404 can mean 'no such object' or 'no such resource': discovery tells them apart."""
    if ref.resource.group_version == "v1":
        return
    resp = session.call("GET", f"/apis/{ref.resource.group_version}")
    resources = (Reply(resp.status, resp.data, {}).json() or {}) if resp.status == 200 else {}
    plurals = {r.get("name") for r in resources.get("resources", []) if isinstance(r, dict)}
    if ref.resource.plural not in plurals:
        raise ClusterError(f"{ref}: the cluster does not serve {ref.resource.group_version} "
                           f"{ref.resource.plural}", file="cluster",
                           hint="the Kubeflow training operator (its PyTorchJob CRD) is not "
                           "installed, or the kubeconfig context points at another cluster")


def _list(session: Session, resource: Resource, namespace: str,
          query: list[tuple[str, str]]) -> list[Manifest]:
    ref = f"{resource.plural}/{namespace}"
    resp = session.call("GET", resource.collection(namespace), query)
    if resp.status != 200:
        raise refusal(resp, ref, "list")
    body = Reply(resp.status, resp.data, {}).json() or {}
    return [i for i in body.get("items") or [] if isinstance(i, dict)]


# --- submit ----------------------------------------------------------------------------


def _apply(session: Session, ref: Ref, manifest: Manifest, *, dry_run: bool,
           force: bool = False) -> tuple[int, Manifest]:
    """Server-side apply; a create answers 201, which is read from the raw body."""
    query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
    if force:
        query.append(("force", "true"))
    if dry_run:
        query.append(("dryRun", "All"))
    resp = session.call("PATCH", ref.resource.item(ref.namespace, ref.name), query,
                        json.dumps(manifest), APPLY_TYPE, write=not dry_run)
    if resp.status not in (200, 201):
        if resp.status == 404:
            _require_served(session, ref)
        raise refusal(resp, ref, "create", manifest)
    body = Reply(resp.status, resp.data, {}).json()
    if not isinstance(body, dict):
        raise ClusterError(f"{ref}: the API server's answer is not an object", file="cluster")
    return resp.status, body


def _create(session: Session, ref: Ref, manifest: Manifest) -> Manifest:
    """Create by apply; a write with unknown outcome is read back, never blindly repeated."""
    policy = session.target.retry
    for attempt in range(1, policy.attempts + 1):
        try:
            return _apply(session, ref, manifest, dry_run=False)[1]
        except _Uncertain as exc:
            log.debug("%s: %s; reading back before any retry", ref, exc)
            live = get_object(session, ref)
            if live is not None:
                if managed_by_us(live) and same_render(manifest, live):
                    return live
                raise ClusterError(f"{ref}: appeared with other contents while runai-spec was "
                                   "creating it", file="cluster",
                                   hint="check it with `runai-spec status` before submitting again"
                                   ) from None
            if attempt == policy.attempts:
                raise ClusterError(f"{ref}: {exc}; gave up after {attempt} attempt(s)",
                                   file="cluster", hint="try again later") from None
            session.target.sleep(min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1)))
    raise AssertionError("unreachable")


def submit_manifests(manifests: Iterable[Manifest], target: Target, *, dry_run: bool = False,
                     replace: bool = False) -> SubmitResult:
    """Send a render with server-side apply: idempotent, never touching foreign objects.

    Every object is checked before anything is written (and, when there are several,
    dry-run applied), so a refusal writes nothing. Names are fixed and apply is keyed by
    name, so a retried create can never make a second object.
    """
    items = [(ref_of(m), m) for m in manifests]
    with Session(target) as session:
        plans: list[tuple[Ref, Manifest, Manifest | None, str]] = []
        for ref, manifest in items:
            live = get_object(session, ref)
            if live is None:
                plans.append((ref, manifest, None, "create"))
                continue
            if not managed_by_us(live):
                raise ClusterError(f"{ref}: exists and was not created by runai-spec; not touched",
                                   file="cluster", hint="choose another `name` in the profile, "
                                   "or ask its owner to delete it")
            if same_render(manifest, live):
                plans.append((ref, manifest, live, "unchanged"))
                continue
            if not replace:
                old = ((live.get("metadata") or {}).get("annotations") or {}).get(
                    PROFILE_SHA_ANNOTATION, "?")
                raise ClusterError(f"{ref}: exists with a different render (live profile sha256 "
                                   f"{str(old)[:12]})", file="cluster",
                                   hint="submit with --replace to delete it and create this one "
                                   "(its pods and logs go: save them with `runai-spec logs`)")
            plans.append((ref, manifest, live, "replace"))
        writes = [p for p in plans if p[3] != "unchanged"]
        if len(writes) > 1 and not dry_run:
            # Let the server validate every object before the first is stored, so that an
            # invalid job does not leave its config map behind.
            for ref, manifest, _, action in writes:
                _apply(session, ref, manifest, dry_run=True, force=action == "replace")
        outcomes = []
        for ref, manifest, live, action in plans:
            if action == "unchanged":
                assert live is not None
                outcomes.append(ObjectOutcome(str(ref), "unchanged", strip_server_fields(live)))
            elif dry_run:
                _, stored = _apply(session, ref, manifest, dry_run=True, force=action == "replace")
                outcomes.append(ObjectOutcome(str(ref), f"would {action}", strip_server_fields(stored)))
            else:
                if action == "replace":
                    assert live is not None
                    _delete(session, ref, live)
                    _wait_deleted(session, ref, live)
                stored = _create(session, ref, manifest)
                outcomes.append(ObjectOutcome(str(ref), "created" if action == "create"
                                              else "replaced", strip_server_fields(stored)))
    return SubmitResult(tuple(outcomes), dry_run)


def live_objects_all(renders: Iterable[Iterable[Manifest]], target: Target
                     ) -> list[tuple[LiveObject, ...]]:
    """live_objects for several renders (one per profile) over one session."""
    with Session(target) as session:
        return [_live_objects(session, manifests) for manifests in renders]


def _live_objects(session: Session, manifests: Iterable[Manifest]) -> tuple[LiveObject, ...]:
    out = []
    for manifest in manifests:
        ref = ref_of(manifest)
        live = get_object(session, ref)
        # force: the preview of taking the fields over; dryRun=All: nothing is stored
        _, applied = _apply(session, ref, manifest, dry_run=True, force=True)
        out.append(LiveObject(str(ref), strip_server_fields(live) if live else None,
                              strip_server_fields(applied)))
    return tuple(out)


# --- delete ----------------------------------------------------------------------------


def _delete(session: Session, ref: Ref, live: Manifest) -> None:
    uid = (live.get("metadata") or {}).get("uid")
    options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                               "propagationPolicy": "Background"}
    if uid:  # delete exactly the object that was checked, not a newcomer of the same name
        options["preconditions"] = {"uid": uid}
    try:
        resp = session.call("DELETE", ref.resource.item(ref.namespace, ref.name),
                            body=json.dumps(options), write=True)
    except _Uncertain:
        again = get_object(session, ref)
        if again is None or (again.get("metadata") or {}).get("uid") != uid or \
                (again.get("metadata") or {}).get("deletionTimestamp"):
            return
        raise ClusterError(f"{ref}: the delete request got no answer and the object is still "
                           "there", file="cluster", hint="run delete again") from None
    if resp.status == 404:
        return
    if resp.status not in (200, 202):
        raise refusal(resp, ref, "delete")


def _wait_deleted(session: Session, ref: Ref, live: Manifest) -> None:
    uid = (live.get("metadata") or {}).get("uid")
    deadline = time.monotonic() + session.target.wait_deleted
    while True:
        again = get_object(session, ref)
        if again is None or (again.get("metadata") or {}).get("uid") != uid:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"{ref}: still being deleted after {session.target.wait_deleted:g} s",
                               file="cluster", hint="wait for its pods to stop, then submit again")
        session.target.sleep(1.0)


def delete_job(refs: Iterable[Ref], target: Target, *, missing_ok: bool = False) -> DeleteResult:
    """Delete runai-spec's objects (checked first); anything else is refused untouched.

    missing_ok: objects already gone are skipped, as long as one of them is there (a smoke
    test whose job was deleted by name still has its ConfigMap to clean up)."""
    refs = list(refs)
    with Session(target) as session:
        found = []
        missing = []
        for ref in refs:
            live = get_object(session, ref)
            if live is None:
                missing.append(ref)
                continue
            if not managed_by_us(live):
                raise ClusterError(f"{ref}: was not created by runai-spec; not touched",
                                   file="cluster", hint="delete it with the tool that created it")
            found.append((ref, live))
        if missing and not (missing_ok and found):
            raise ClusterError(f"{', '.join(map(str, missing))}: not found", file="cluster",
                               hint="check the name and the project; nothing was deleted")
        for ref, live in found:
            _delete(session, ref, live)
    return DeleteResult(tuple(str(r) for r, _ in found), tuple(str(r) for r in missing))


def job_ref(name: str, namespace: str) -> Ref:
    return Ref(PYTORCHJOB, namespace, name)


# --- status ----------------------------------------------------------------------------


_PLAIN_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)quota"), "over the project's GPU quota: it waits until the project has "
     "enough quota free (or ask for more quota)"),
    (re.compile(r"(?i)node.?pool|node affinity|node selector|didn't match"),
     "no node of the requested node pool can take it: the pool is full or matches no node"),
    (re.compile(r"(?i)insufficient nvidia\.com/gpu"), "not enough free GPUs on any node"),
    (re.compile(r"(?i)insufficient ([\w/-]+(?:\.[\w/-]+)*)"), "not enough free {0} on any node"),
    (re.compile(r"(?i)taint"), "the nodes carry taints the pod does not tolerate"),
    (re.compile(r"(?i)persistentvolumeclaim|unbound"),
     "a volume claim is missing or not bound: check the profile's checkpoint and data claims"),
    (re.compile(r"(?i)unschedulable|failedscheduling"), "the scheduler cannot place it"),
)
_WAITING = {
    "ImagePullBackOff": "the image cannot be pulled: check the image and registry access",
    "ErrImagePull": "the image cannot be pulled: check the image and registry access",
    "CrashLoopBackOff": "the container keeps crashing: `runai-spec logs NAME --previous` shows why",
    "CreateContainerConfigError": "the container cannot be configured (a missing secret or "
    "config map?)",
}


def explain(reason: str, message: str) -> str:
    """A scheduler event or pod condition in plain words."""
    text = f"{reason} {message}"
    for pattern, words in _PLAIN_REASONS:
        match = pattern.search(text)
        if match:
            return words.format(*match.groups()) + f" ({clean(message, 160)})"
    return clean(f"{reason}: {message}", 200)


def _phase(job: Manifest) -> tuple[str, str | None]:
    conditions = [c for c in (job.get("status") or {}).get("conditions") or []
                  if isinstance(c, dict) and c.get("status") == "True"]
    if not conditions:
        return "Pending", "the training operator has not reported a status yet"
    last = conditions[-1]
    return str(last.get("type")), (clean(last["message"]) if last.get("message") else None)


def _pod_state(pod: Manifest) -> tuple[str, int]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    mine = next((s for s in statuses if s.get("name") == CONTAINER), statuses[0] if statuses else {})
    state = mine.get("state") or {}
    restarts = int(mine.get("restartCount") or 0)
    if "running" in state:
        return "running", restarts
    if "waiting" in state:
        return f"waiting: {state['waiting'].get('reason', '?')}", restarts
    if "terminated" in state:
        t = state["terminated"]
        return f"terminated: exit {t.get('exitCode')} ({t.get('reason', '?')})", restarts
    return "not started", restarts


def _pods(session: Session, name: str, namespace: str) -> list[Manifest]:
    pods = _list(session, PODS, namespace, [("labelSelector", f"{JOB_NAME_LABEL}={name}")])
    def order(pod: Manifest) -> tuple[int, int, str]:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        role = str(labels.get(REPLICA_TYPE_LABEL, "")).lower()
        index = str(labels.get(REPLICA_INDEX_LABEL, "0"))
        return (0 if role == "master" else 1, int(index) if index.isdigit() else 0,
                str(pod["metadata"].get("name")))
    return sorted(pods, key=order)


def _events(session: Session, namespace: str, name: str) -> list[Manifest]:
    events = _list(session, EVENTS, namespace, [("fieldSelector", f"involvedObject.name={name}")])
    return sorted((e for e in events if e.get("type") == "Warning"),
                  key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def job_status(name: str, namespace: str, target: Target) -> StatusResult:
    """The PyTorchJob's phase, each pod's state and, when pending, why."""
    ref = job_ref(name, namespace)
    with Session(target) as session:
        job = get_object(session, ref)
        if job is None:
            raise ClusterError(f"{ref}: not found", file="cluster",
                               hint="check the name and the project; `kubectl get pytorchjobs -n "
                               f"{namespace}` lists what is there")
        phase, message = _phase(job)
        pods = []
        reasons: list[str] = []
        for pod in _pods(session, name, namespace):
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            pod_phase = str((pod.get("status") or {}).get("phase") or "Pending")
            state, restarts = _pod_state(pod)
            why = None
            if pod_phase == "Pending":
                why = _pending_reason(session, pod)
            index = str(labels.get(REPLICA_INDEX_LABEL, "0"))
            pods.append(PodState(str(meta.get("name")), str(labels.get(REPLICA_TYPE_LABEL, "?")),
                                 int(index) if index.isdigit() else 0, pod_phase, state, restarts,
                                 (pod.get("spec") or {}).get("nodeName"), why))
            if why:
                reasons.append(f"{meta.get('name')}: {why}")
        if not pods or phase in ("Pending", "Created"):
            reasons += [explain(str(e.get("reason", "")), str(e.get("message", "")))
                        for e in _events(session, namespace, name)[-3:]]
    return StatusResult(name, namespace, phase, message, tuple(pods), tuple(dict.fromkeys(reasons)))


def _pending_reason(session: Session, pod: Manifest) -> str | None:
    state, _ = _pod_state(pod)
    waiting = state.removeprefix("waiting: ")
    if waiting in _WAITING:
        return _WAITING[waiting]
    events = _events(session, str(pod["metadata"].get("namespace")), str(pod["metadata"]["name"]))
    if events:
        last = events[-1]
        return explain(str(last.get("reason", "")), str(last.get("message", "")))
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return explain(str(cond.get("reason", "")), str(cond.get("message", "")))
    return None


# --- logs ------------------------------------------------------------------------------


def save_logs(name: str, namespace: str, out_dir: Path, target: Target, *,
              previous: bool = False) -> LogsResult:
    """Every rank's (pod's) log in its own file, streamed to disk so the logs outlive the pods."""
    saved: list[SavedLog] = []
    skipped: list[tuple[str, str]] = []
    with Session(target) as session:
        pods = _pods(session, name, namespace)
        if not pods:
            if get_object(session, job_ref(name, namespace)) is None:
                raise ClusterError(f"{job_ref(name, namespace)}: not found", file="cluster",
                                   hint="check the name and the project")
            raise ClusterError(f"{job_ref(name, namespace)}: has no pods (yet, or any more)",
                               file="cluster", hint="`runai-spec status` shows why")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the folder: {exc.strerror}", file=str(out_dir)) from None
        for pod in pods:
            pod_name = str(pod["metadata"]["name"])
            ref = Ref(PODS, namespace, pod_name)
            query = [("container", CONTAINER)] + ([("previous", "true")] if previous else [])
            resp = session.call("GET", f"{PODS.item(namespace, pod_name)}/log", query, stream=True)
            if resp.status != 200:
                if resp.status in (400, 404):  # not started yet, or no previous container
                    skipped.append((pod_name, clean(_message(resp), 200)))
                    continue
                raise refusal(resp, ref, "read the log of")
            path = out_dir / f"{pod_name}{'.previous' if previous else ''}.log"
            saved.append(SavedLog(pod_name, path, _stream_to(resp, path)))
    return LogsResult(tuple(saved), tuple(skipped))


def _message(resp: Any) -> str:
    body = Reply(resp.status, resp.data or b"", {}).json()
    return str(body.get("message")) if isinstance(body, dict) else f"HTTP {resp.status}"


def _stream_to(resp: Any, path: Path) -> int:
    import urllib3

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    size = 0
    try:
        with tmp.open("wb") as fh:
            for chunk in resp.response.stream(1 << 16):
                fh.write(chunk)
                size += len(chunk)
        tmp.replace(path)
    except urllib3.exceptions.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        raise ClusterError(f"pods/{path.stem}: the log stream broke: {_reason(exc)}", file="cluster",
                           hint="run logs again") from None
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write: {exc.strerror}", file=str(path)) from None
    finally:
        resp.response.release_conn()
    return size
