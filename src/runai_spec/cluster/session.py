"""The transport: one API client per command from the kubeconfig, bounded retries, redaction."""

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

from .. import __version__
from ..errors import ClusterError, InputError

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


def json_body(resp: Any) -> Any:
    """A read response's body as JSON, or None when it is not JSON."""
    try:
        return json.loads(resp.data or b"")
    except ValueError:
        return None


class Uncertain(Exception):
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
            raise _Transport(f"cannot connect to {self.host}: {reason_of(exc)}", sent=False) from None
        except urllib3.exceptions.HTTPError as exc:
            raise _Transport(f"no answer from {self.host}: {reason_of(exc)}", sent=True) from None
        except OSError as exc:
            raise _Transport(f"cannot reach {self.host}: {exc.strerror or type(exc).__name__}",
                             sent=True) from None
        log.debug("%s %s -> %s (%.3f s)", method, path, resp.status, time.monotonic() - started)
        return resp

    def call(self, method: str, path: str, query: Iterable[tuple[str, str]] = (),
             body: str | None = None, content_type: str = "application/json",
             write: bool = False, stream: bool = False) -> Any:
        """Send with bounded retries on 429/503 and on requests that never left.

        A write whose outcome is unknown raises Uncertain: the caller reads back first.
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
                    raise Uncertain(exc.what) from None
                failure: str = exc.what
                retry_after = None
                if not exc.sent and failure.endswith("connection refused"):  # nothing listens
                    raise ClusterError(f"{failure}", file="cluster", hint="check the kubeconfig "
                                       "context (`kubectl config current-context`) and that the "
                                       "cluster is up") from None
            else:
                if resp.status in (429, 503) or (resp.status >= 500 and not write):
                    failure = f"the API server is busy or failing (HTTP {resp.status})"
                    retry_after = _retry_after(resp.headers)
                elif resp.status >= 500:
                    raise Uncertain(f"HTTP {resp.status}")
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
            raise InputError(f"context {target.context!r} not in the kubeconfig", file=str(path),
                             field="--context",
                             hint=f"contexts: {', '.join(map(str, names)) or 'none'}")
        config.load_kube_config(config_file=str(path), context=target.context,
                                client_configuration=cfg, persist_config=False)
    except (ClusterError, InputError):
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

