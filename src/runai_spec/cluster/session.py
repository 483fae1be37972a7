"""The transport: one API client per command from the kubeconfig, bounded retries, redaction."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .. import __version__
from ..errors import ClusterError, InputError
from ..secrets import mask_text

# The --debug lines say `runai_spec.cluster`, whichever module of the package logs them.
log = logging.getLogger("runai_spec.cluster")


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
    # one line per retried request (a server that accepts and never answers is otherwise
    # silent for every attempt's read timeout): the CLI prints it on stderr
    progress: Callable[[str], None] | None = None


def json_body(resp: Any) -> Any:
    """A read response's body as JSON, or None when it is not JSON."""
    try:
        return json.loads(resp.data or b"")
    except ValueError:
        return None


class Uncertain(Exception):
    """A write whose outcome is unknown (timed out, dropped, 5xx): read back before retrying."""


class Unreached(Exception):
    """A request with no HTTP answer: never sent (nothing listens, no connection), or sent and
    then cut off or timed out (its outcome unknown)."""

    def __init__(self, what: str, sent: bool) -> None:
        super().__init__(what)
        self.what = what
        self.sent = sent


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean(text: object, limit: int = 300) -> str:
    """One safe line of server or library text: no control characters, no credentials
    (secrets.mask_text, long base64-like runs included)."""
    line = mask_text(_CONTROL.sub(" ", str(text)).strip(), runs=True)
    return line if len(line) <= limit else line[: limit - 3] + "..."


class RedactFilter(logging.Filter):
    """Defence in depth for --debug: rewrite any record that could carry a credential."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = clean(record.getMessage(), 2000), ()
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


class LibraryLog(logging.Filter):
    """The kubernetes library logs through the root logger (`logging.error(str(e))`), whose
    handler prints to stderr raw: a failing exec credential plugin's stderr (which carried a
    secret) reached the terminal that way. While a Session lives, the root logger's own
    records are kept here instead, masked and without a plugin's output, and never printed
    (--debug shows them as masked debug lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []
        self._guard = logging.NullHandler()  # root has a handler: no basicConfig to stderr

    def filter(self, record: logging.LogRecord) -> bool:
        text = library_text(record.getMessage())
        if len(self.messages) < 100:
            self.messages.append(text)
        log.debug("kubernetes library: %s", text)
        return False

    def __enter__(self) -> LibraryLog:
        root = logging.getLogger()
        root.addFilter(self)
        root.addHandler(self._guard)
        return self

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeFilter(self)
        root.removeHandler(self._guard)

    def exec_failure(self) -> str | None:
        """What the exec credential plugin's failure said, if it failed."""
        return next((m for m in self.messages if m.startswith("exec:")), None)


_PLUGIN_EXIT = re.compile(r"^exec: process returned -?\d+")


def library_text(message: str) -> str:
    """One of the library's messages, safe to show: a failing plugin's own output (appended
    after its exit code) is dropped whole, as it can carry any secret in any shape."""
    plugin = _PLUGIN_EXIT.match(message)
    return plugin.group(0) if plugin else clean(message, 300)


class Session:
    """One API client and the retry rules; every request goes through `call`."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.library = LibraryLog().__enter__()
        try:
            self.api = _api_client(target, self.library)
        except BaseException:
            self.library.__exit__()
            raise
        self.host = clean(self.api.configuration.host, 200)  # a URL may carry user:password@

    def close(self) -> None:
        try:
            self.api.close()
        finally:
            self.library.__exit__()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]] = (),
        body: str | None = None,
        content_type: str = "application/json",
        stream: bool = False,
    ) -> Any:
        """One attempt. Returns the client's raw response; raises Unreached."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        started = time.monotonic()
        try:
            resp = self.api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=self.target.timeout
            )
            if not stream or resp.status >= 300:
                resp.read()
        except (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NewConnectionError) as exc:
            raise Unreached(f"cannot connect to {self.host}: {reason_of(exc)}", sent=False) from None
        except urllib3.exceptions.HTTPError as exc:
            reason = reason_of(exc)
            if reason == "timed out":
                reason = f"none within {self.target.timeout[1]:g} s (--request-timeout)"
            raise Unreached(f"no answer from {self.host}: {reason}", sent=True) from None
        except OSError as exc:
            raise Unreached(
                f"cannot reach {self.host}: {exc.strerror or type(exc).__name__}", sent=True
            ) from None
        except ApiException as exc:  # the client's wrapping of urllib3's SSLError (status 0)
            if exc.status == 0 and str(exc.reason).startswith("SSLError"):
                raise tls_failure(self.host, str(exc.reason)) from None
            raise
        log.debug("%s %s -> %s (%.3f s)", method, path, resp.status, time.monotonic() - started)
        return resp

    def call(
        self,
        method: str,
        path: str,
        query: Iterable[tuple[str, str]] = (),
        body: str | None = None,
        content_type: str = "application/json",
        write: bool = False,
        stream: bool = False,
    ) -> Any:
        """Send with bounded retries on 429/503 and on requests that never left.

        A write whose outcome is unknown raises Uncertain: the caller reads back first.
        """
        query = list(query)

        def attempt() -> tuple[int, Any, float | None]:
            resp = self.send(method, path, query, body, content_type, stream)
            return resp.status, resp, retry_after_of(resp.headers)

        return call_with_retries(
            attempt,
            Retry(self.target, "cluster", "the cluster's status", "the API server"),
            f"{method} {clean(path, 120)}",
            write=write,
            refused_hint=_REFUSED_HINT,
        )[1]


_REFUSED_HINT = "check the kubeconfig context (`kubectl config current-context`) and that the cluster is up"


class RetryTarget(Protocol):
    """What a retried request needs of its target: the policy, where to say so, how to wait."""

    @property
    def retry(self) -> RetryPolicy: ...
    @property
    def progress(self) -> Callable[[str], None] | None: ...
    @property
    def sleep(self) -> Callable[[float], None]: ...


@dataclass(frozen=True)
class Retry:
    """One API's retry context: its target, the error's file, and what to check when it persists."""

    target: RetryTarget
    file: str
    status_of: str
    server: str  # what answered: "the API server", "the Run:ai control plane"


A = TypeVar("A")


def call_with_retries(
    attempt: Callable[[], tuple[int, A, float | None]],
    retry: Retry,
    request: str,
    *,
    write: bool,
    refused_hint: str,
) -> tuple[int, A]:
    """The one retry loop of both back-ends' transports: ATTEMPT (status, answer, Retry-After)
    again on 429/503, on a read's 5xx and on a request that never left, a bounded number of
    times. Nothing listening is one error line at once; a write whose outcome is unknown (cut
    off, timed out, a 5xx) raises Uncertain, for the caller to read back before any retry."""
    waited, tries = 0.0, 0
    while True:
        tries += 1
        try:
            status, answer, retry_after = attempt()
        except Unreached as exc:
            if exc.sent and write:
                raise Uncertain(exc.what) from None
            if not exc.sent and exc.what.endswith("connection refused"):  # nothing listens
                raise ClusterError(exc.what, file=retry.file, hint=refused_hint) from None
            failure, retry_after = exc.what, None
        else:
            if status in (429, 503) or (status >= 500 and not write):
                failure = f"{retry.server} is busy or failing (HTTP {status})"
            elif status >= 500:
                raise Uncertain(f"HTTP {status}")
            else:
                return status, answer
        waited += pause_before_retry(retry, request, failure, tries, waited, retry_after)


def pause_before_retry(
    retry: Retry, request: str, failure: str, attempt: int, waited: float, retry_after: float | None
) -> float:
    """Wait before the next attempt of a request (the server's Retry-After, else doubling), and
    say so; return the time waited. Raises ClusterError once the attempts or the total are spent."""
    policy = retry.target.retry
    delay = min(
        policy.max_delay,
        retry_after if retry_after is not None else policy.base_delay * 2 ** (attempt - 1),
    )
    if attempt >= policy.attempts or waited + delay > policy.max_total:
        raise ClusterError(
            f"{failure}; gave up after {attempt} attempt(s)",
            file=retry.file,
            hint=f"try again later; check {retry.status_of} with your engineers if it persists",
        )
    log.debug("retrying in %.2f s (%s)", delay, failure)
    if retry.target.progress is not None:
        retry.target.progress(
            f"note: {request}: {failure}; retrying in {delay:g} s "
            f"(attempt {attempt + 1} of at most {policy.attempts})"
        )
    retry.target.sleep(delay)
    return delay


S = TypeVar("S", bound=contextlib.AbstractContextManager[Any])


@contextlib.contextmanager
def own_session(target: Any, kind: type[S], make: Callable[[Any], S]) -> Iterator[S]:
    """The command's own session (one client or token per command), left open for its next
    call; or, given a target, a session for this call alone."""
    if isinstance(target, kind):
        yield target
        return
    with make(target) as session:
        yield session


def session_for(target: Target | Session) -> contextlib.AbstractContextManager[Session]:
    """The command's own Kubernetes session, or one for this call alone (one kubeconfig load)."""
    return own_session(target, Session, Session)


def reason_of(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, BaseException) and reason is not exc:
        return reason_of(reason)
    text = type(reason).__name__ if not str(reason) else str(reason)
    if "timed out" in text.lower() or "timeout" in type(reason).__name__.lower():
        return "timed out"
    if "refused" in text.lower():
        return "connection refused"
    if "RemoteDisconnected" in text or "closed" in text.lower() or "ProtocolError" in text:
        return "connection closed by the server"
    return clean(re.sub(r"<[^>]*>", "", text), 120)


_SSL_DETAIL = re.compile(r"\[SSL(?:: (?P<code>[A-Z_]+))?\] (?P<what>[^()'\"]+)")


def tls_failure(host: str, reason: str) -> ClusterError:
    """A failed TLS handshake as one line: never retried (nothing was sent), never a traceback."""
    found = _SSL_DETAIL.search(reason)
    code = found.group("code") if found else None
    what = clean(found.group("what").strip() if found else reason.splitlines()[-1], 160)
    if code == "CERTIFICATE_VERIFY_FAILED":
        return ClusterError(
            f"cannot connect to {host}: the server's TLS certificate is not trusted ({what})",
            file="cluster",
            hint="the kubeconfig's certificate-authority(-data) must be the "
            "cluster's CA and the server address its name; ask your AI "
            "Engineers for a current kubeconfig",
        )
    if code in (
        "WRONG_VERSION_NUMBER",
        "RECORD_LAYER_FAILURE",
        "UNEXPECTED_EOF_WHILE_READING",
        "PACKET_LENGTH_TOO_LONG",
        "HTTP_REQUEST",
    ):
        return ClusterError(
            f"cannot connect to {host}: the TLS handshake failed ({what}): the "
            "server does not speak TLS there",
            file="cluster",
            hint="check the kubeconfig's server address (scheme and port): "
            "an https:// address on a plain-HTTP port fails like this",
        )
    return ClusterError(
        f"cannot connect to {host}: TLS failure ({what})",
        file="cluster",
        hint="check the kubeconfig's server address and certificate "
        "authority (`kubectl config view` hides secrets)",
    )


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    """A 429/503's Retry-After in seconds (never negative); None when absent or not a number."""
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _api_client(target: Target, library: LibraryLog) -> Any:
    """An ApiClient from the kubeconfig (or, in a pod without one, the service account); its
    debug output stays off (it prints the token)."""
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
            return _in_cluster(cfg)
    if not path.is_file():
        raise ClusterError(
            "no kubeconfig found", file=str(path), hint="pass --kubeconfig FILE or set KUBECONFIG"
        )
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=str(path))
        names = [c.get("name") for c in contexts or []]
        if target.context is not None and target.context not in names:
            raise InputError(
                f"context {target.context!r} not in the kubeconfig",
                file=str(path),
                field="--context",
                hint=f"contexts: {', '.join(map(str, names)) or 'none'}",
            )
        config.load_kube_config(
            config_file=str(path), context=target.context, client_configuration=cfg, persist_config=False
        )
    except (ClusterError, InputError):
        raise
    except Exception as exc:  # the loader raises many types; its text may quote the file
        raise ClusterError(
            f"cannot use the kubeconfig ({type(exc).__name__})",
            file=str(path),
            hint="check it with `kubectl config view` (which hides secrets)",
        ) from None
    plugin = library.exec_failure()
    if plugin is not None:  # the loader logs it and goes on without credentials
        raise ClusterError(
            f"the kubeconfig's exec credential plugin failed ({plugin})",
            file=str(path),
            hint="run its command yourself (or `kubectl get "
            "pods`) to log in again; runai-spec never shows the plugin's own "
            "output, which can carry secrets",
        )
    return _finish_client(cfg)


def _in_cluster(cfg: Any) -> Any:
    """Inside a pod (KUBERNETES_SERVICE_HOST set, no kubeconfig): its service account."""
    from kubernetes import config as kube_config

    config: Any = kube_config
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as exc:
        raise ClusterError(
            f"in-cluster configuration failed: {clean(exc, 160)}",
            file="cluster",
            hint="runai-spec runs in a pod (KUBERNETES_SERVICE_HOST "
            "is set) without a kubeconfig: mount the service-account token "
            "(automountServiceAccountToken) or pass --kubeconfig FILE",
        ) from None
    return _finish_client(cfg)


def _finish_client(cfg: Any) -> Any:
    from kubernetes import client

    cfg.debug = False
    cfg.retries = False  # runai-spec retries itself: reads back writes before any retry
    cfg.client_go_retries = False
    api = client.ApiClient(cfg)
    api.user_agent = f"runai-spec/{__version__}"
    return api
