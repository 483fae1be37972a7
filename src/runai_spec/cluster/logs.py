"""logs: every rank's (pod's) log streamed to its own file, so the logs outlive the pods."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import ClusterError, InputError
from ..facts.kubeflow import CONTAINER
from ..facts.torchrun import RANK_LINE
from ..files import ReplacedFiles
from .objects import get_object, job_pods
from .refs import PODS, PYTORCHJOB, Ref, Resource, job_ref
from .refusals import refusal
from .session import Session, Target, clean, json_body, reason_of, session_for


@dataclass(frozen=True)
class SavedLog:
    pod: str
    path: Path
    size: int
    ranks: tuple[int, ...] = ()  # the ranks split into <out>/<pod>/rank-<k>.log


@dataclass(frozen=True)
class LogsResult:
    saved: tuple[SavedLog, ...]
    skipped: tuple[tuple[str, str], ...]  # (pod, why)


def save_logs(
    name: str,
    namespace: str,
    out_dir: Path,
    target: Target | Session,
    *,
    previous: bool = False,
    resource: Resource = PYTORCHJOB,
) -> LogsResult:
    """Every rank's (pod's) log in its own file, streamed to disk so the logs outlive the pods."""
    saved: list[SavedLog] = []
    skipped: list[tuple[str, str]] = []
    with session_for(target) as session:
        pods = job_pods(session, name, namespace)
        if not pods:
            if get_object(session, job_ref(name, namespace, resource)) is None:
                raise ClusterError(
                    f"{job_ref(name, namespace, resource)}: not found",
                    file="cluster",
                    hint="check the name and the project",
                )
            raise ClusterError(
                f"{job_ref(name, namespace, resource)}: has no pods (yet, or any more)",
                file="cluster",
                hint="`runai-spec status` shows why",
            )
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the folder: {exc.strerror}", file=str(out_dir)) from None
        for pod in pods:
            pod_name = _safe_name(str(pod["metadata"]["name"]))
            ref = Ref(PODS, namespace, pod_name)
            query = [("container", CONTAINER)] + ([("previous", "true")] if previous else [])
            resp = session.call("GET", f"{PODS.item(namespace, pod_name)}/log", query, stream=True)
            if resp.status != 200:
                if resp.status in (400, 404):  # not started yet, or no previous container
                    skipped.append((pod_name, clean(_message(resp), 200)))
                    continue
                raise refusal(resp, ref, "read the log of")
            suffix = ".previous" if previous else ""
            path = out_dir / f"{pod_name}{suffix}.log"
            size = _stream_to(resp, path)
            saved.append(SavedLog(pod_name, path, size, split_ranks(path, out_dir / pod_name, suffix)))
    return LogsResult(tuple(saved), tuple(skipped))


# A pod name is a DNS-1123 subdomain; anything else from the server (`../x`, `/etc/x`) must
# never become a path outside --out.
_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _safe_name(name: str) -> str:
    if not _POD_NAME.match(name) or ".." in name:
        raise ClusterError(
            f"the server named a pod {clean(name, 80)!r}, which is not a pod name; no log was written for it",
            file="cluster",
            hint="report this to your AI Engineers: the API server's answer is not what Kubernetes sends",
        )
    return name


MAX_RANK_FILES = 256  # per pod: more distinct prefixes than any pod has processes stay in the pod log


def split_ranks(log: Path, folder: Path, suffix: str = "") -> tuple[int, ...]:
    """Each `[rank<k>]:` line of a pod log (torchrun --tee with the rendered
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) into `folder/rank-<k><suffix>.log`, prefix taken
    off; the agent's own lines stay in the pod log only. Returns the ranks found.
    Never through a link planted in --out (issue 23): the folder is opened as itself (a link
    at its name is refused) and each rank file is a new file renamed over its name, so a link
    or a hard link already there is replaced, never written through."""
    files: dict[int, IO[bytes]] = {}  # rank -> its file, renamed into place at the end
    out: ReplacedFiles | None = None  # the folder, opened at the first rank line
    dir_fd: int | None = None
    try:
        rank_line = re.compile(RANK_LINE)
        with log.open("rb") as src:
            for raw in src:
                match = rank_line.match(raw)  # bytes: each line keeps its text exactly
                if match is None:
                    continue
                rank = int(match.group(1))
                if rank not in files:
                    if len(files) >= MAX_RANK_FILES:
                        continue
                    if out is None:
                        dir_fd = _open_folder(folder)
                        out = ReplacedFiles(folder, dir_fd)
                    files[rank] = out.open(f"rank-{rank}{suffix}.log")
                files[rank].write(match.group(2))
        if out is not None:
            out.commit()
    except OSError as exc:
        what = (
            "is a link or not a folder; no rank log is written through it"
            if exc.errno in (errno.ELOOP, errno.ENOTDIR)
            else f"cannot split the log per rank: {exc.strerror}"
        )
        raise InputError(what, file=str(folder), hint="remove it, or choose another --out folder") from None
    finally:
        if out is not None:
            out.discard()  # what a failure left; nothing after commit
        if dir_fd is not None:
            os.close(dir_fd)
    return tuple(sorted(files))


def _open_folder(folder: Path) -> int:
    """folder, made if missing, opened as itself: a link placed at its name is refused."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir()
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _message(resp: Any) -> str:
    body = json_body(resp)
    return str(body.get("message")) if isinstance(body, dict) else f"HTTP {resp.status}"


def _stream_to(resp: Any, path: Path) -> int:
    import urllib3

    size = 0
    try:
        with ReplacedFiles(path.parent) as out:
            handle = out.open(path.name)
            for chunk in resp.response.stream(1 << 16):
                handle.write(chunk)
                size += len(chunk)
    except urllib3.exceptions.HTTPError as exc:
        raise ClusterError(
            f"pods/{path.stem}: the log stream broke: {reason_of(exc)}", file="cluster", hint="run logs again"
        ) from None
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=str(path)) from None
    finally:
        resp.response.release_conn()
    return size


def print_logs(
    name: str,
    namespace: str,
    target: Target | Session,
    sink: Any,
    *,
    previous: bool = False,
    pod: str | None = None,
    tail: int | None = None,
    resource: Resource = PYTORCHJOB,
) -> list[str]:
    """`logs --out -`: each rank's log (or one --pod's) written to sink (binary), each after a
    `==> pod <==` line as `tail` does for several files; returns the pods that were skipped.
    When every pod was skipped (all Pending: no log yet) it is the cluster error `--out DIR`
    gives, after the skipped pods' lines (`on_skipped`)."""
    skipped: list[str] = []
    printed = 0
    with session_for(target) as session:
        pods = [_safe_name(str(p["metadata"]["name"])) for p in job_pods(session, name, namespace)]
        if pod is not None:
            if pod not in pods:
                raise InputError(
                    f"{pod!r} is not a pod of {job_ref(name, namespace, resource)}",
                    field="--pod",
                    hint=f"its pods: {', '.join(pods) or 'none yet'}",
                )
            pods = [pod]
        if not pods:
            raise ClusterError(
                f"{job_ref(name, namespace, resource)}: has no pods (yet, or any more)",
                file="cluster",
                hint="`runai-spec status` shows why",
            )
        for pod_name in pods:
            query = (
                [("container", CONTAINER)]
                + ([("previous", "true")] if previous else [])
                + ([("tailLines", str(tail))] if tail is not None else [])
            )
            resp = session.call("GET", f"{PODS.item(namespace, pod_name)}/log", query, stream=True)
            if resp.status in (400, 404):
                skipped.append(f"{pod_name}: {clean(_message(resp), 200)}")
                continue
            if resp.status != 200:
                raise refusal(resp, Ref(PODS, namespace, pod_name), "read the log of")
            if len(pods) > 1:
                sink.write(f"==> {pod_name} <==\n".encode())
            try:
                for chunk in resp.response.stream(1 << 16):
                    sink.write(chunk)
            finally:
                resp.response.release_conn()
            sink.flush()
            printed += 1
    if not printed:
        raise NoLogs(job_ref(name, namespace, resource), skipped)
    return skipped


class NoLogs(ClusterError):
    """No pod had a log (all Pending, or no previous container): exit 3 with --out - as with
    --out DIR; `skipped` says why for each pod."""

    def __init__(self, ref: Ref, skipped: list[str]) -> None:
        super().__init__(
            f"{ref}: no pod had a log to print",
            file="cluster",
            hint="`runai-spec status` shows the pods' states",
        )
        self.skipped = skipped


_ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class FollowResult:
    ended: bool  # every pod had ended (Succeeded or Failed) and its whole log was printed
    waited: float
    pods: int  # how many pods it followed in its last poll (0: the job has none yet)
    skipped: tuple[str, ...]
    pending: int = 0  # how many of those were Pending in the last poll


@dataclass(frozen=True)
class Follow:
    """How `logs --follow` polls: every interval seconds (sleep waits) until timeout; one pod
    (None: every pod), and only the last tail lines of each log at first."""

    interval: float
    timeout: float
    sleep: Callable[[float], None]
    pod: str | None = None
    tail: int | None = None


def follow_logs(
    name: str,
    namespace: str,
    target: Target | Session,
    sink: Any,
    follow: Follow,
    resource: Resource = PYTORCHJOB,
) -> FollowResult:
    """`logs --out - --follow`: print each pod's log, then every --interval only what each log
    gained since, until every pod has ended (its last lines printed) or timeout seconds passed.
    Polls (the whole log each time, printing what lies past what was printed) rather than holding
    one follow=true stream open: a quiet training log would trip the client's read timeout.
    A log that got shorter (the container restarted) is printed again from its start. A job
    that is not there is an error at once; one without pods yet is polled for them."""
    printed: dict[str, int] = {}
    last_header: str | None = None
    skipped: dict[str, str] = {}
    waited = 0.0
    while True:
        with session_for(target) as session:
            pods = job_pods(session, name, namespace)
            if not pods and waited == 0 and get_object(session, job_ref(name, namespace, resource)) is None:
                raise ClusterError(
                    f"{job_ref(name, namespace, resource)}: not found",
                    file="cluster",
                    hint="check the name and the project",
                )
            phases = {
                _safe_name(str(p["metadata"]["name"])): str((p.get("status") or {}).get("phase") or "Pending")
                for p in pods
            }
            if follow.pod is not None:
                if follow.pod not in phases:
                    raise InputError(
                        f"{follow.pod!r} is not a pod of {job_ref(name, namespace, resource)}",
                        field="--pod",
                        hint=f"its pods: {', '.join(phases) or 'none yet'}",
                    )
                phases = {follow.pod: phases[follow.pod]}
            for pod_name in phases:
                resp = session.call(
                    "GET", f"{PODS.item(namespace, pod_name)}/log", [("container", CONTAINER)], stream=True
                )
                if resp.status in (400, 404):  # not started yet: it may start later
                    skipped[pod_name] = clean(_message(resp), 200)
                    continue
                if resp.status != 200:
                    raise refusal(resp, Ref(PODS, namespace, pod_name), "read the log of")
                skipped.pop(pod_name, None)
                try:
                    text = b"".join(resp.response.stream(1 << 16))
                finally:
                    resp.response.release_conn()
                start = printed.get(pod_name)
                if start is None:
                    start = _tail_start(text, follow.tail) if follow.tail is not None else 0
                elif len(text) < start:
                    start = 0
                new = text[start:]
                printed[pod_name] = len(text)
                if not new:
                    continue
                if len(phases) > 1 and last_header != pod_name:
                    sink.write(f"==> {pod_name} <==\n".encode())
                    last_header = pod_name
                sink.write(new)
                sink.flush()
        if phases and all(phase in _ENDED for phase in phases.values()):
            return FollowResult(True, waited, len(phases), tuple(f"{p}: {w}" for p, w in skipped.items()))
        if waited + follow.interval > follow.timeout:
            return FollowResult(
                False,
                waited,
                len(phases),
                tuple(f"{p}: {w}" for p, w in skipped.items()),
                sum(1 for phase in phases.values() if phase == "Pending"),
            )
        follow.sleep(follow.interval)
        waited += follow.interval


def _tail_start(text: bytes, lines: int) -> int:
    """Where the last `lines` lines of text begin."""
    if lines == 0:
        return len(text)
    end = len(text) - 1 if text.endswith(b"\n") else len(text)
    pos = end
    for _ in range(lines):
        pos = text.rfind(b"\n", 0, pos)
        if pos < 0:
            return 0
    return pos + 1
