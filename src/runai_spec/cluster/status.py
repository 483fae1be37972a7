"""status: the job's phase, each pod's state and, when pending, why in plain words."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import ClusterError
from ..facts import mpi
from ..facts.kubeflow import CONTAINER
from ..render.manifests import Manifest
from .objects import get_object, job_pods, list_objects, pod_role, replica_index
from .refs import EVENTS, PYTORCHJOB, Resource, job_ref
from .session import Session, Target, clean, session_for


@dataclass(frozen=True)
class PodState:
    name: str
    role: str
    index: int
    phase: str
    state: str  # running, waiting: <reason>, terminated: exit <code> (<reason>)
    restarts: int | None  # None: the back-end reports none (Run:ai's pods endpoint)
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
    # what --watch does with the phase: Running/Succeeded/Failed settle, "" waits; None: the
    # phase itself says (the Kubernetes path); Run:ai's come from facts.runai_api.PHASES
    settles: str | None = None
    queue: QueueTime | None = None  # None: the back-end does not say when the job started


@dataclass(frozen=True)
class QueueTime:
    """How long the job waited for its pods to be placed, apart from how long they ran: the
    operator's status.startTime (set while the pods are Pending, and where its
    activeDeadlineSeconds counts from) to the last pod's PodScheduled condition."""

    seconds: float
    waiting: int  # pods not placed yet: the queue time is so far


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        out = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return out if out.tzinfo is not None else out.replace(tzinfo=UTC)


def queue_time(job: Manifest, pods: list[Manifest], now: datetime) -> QueueTime | None:
    """The job's queue time (QueueTime); None without a start time or pods to judge."""
    start = _time(_dict(job.get("status")).get("startTime"))
    if start is None or not pods:
        return None
    placed: list[datetime] = []
    for pod in pods:
        conds = _dicts(_dict(pod.get("status")).get("conditions"))
        at = next(
            (
                _time(c.get("lastTransitionTime"))
                for c in conds
                if c.get("type") == "PodScheduled" and c.get("status") == "True"
            ),
            None,
        )
        if at is not None:
            placed.append(at)
    waiting = len(pods) - len(placed)
    end = now if waiting else max(placed)
    return QueueTime(max(0.0, (end - start).total_seconds()), waiting)


_PLAIN_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"(?i)quota"),
        "over the project's GPU quota: it waits until the project has "
        "enough quota free (or ask for more quota)",
    ),
    (
        re.compile(r"(?i)node.?pool|node affinity|node selector|didn't match"),
        "no node of the requested node pool can take it: the pool is full or matches no node",
    ),
    (re.compile(r"(?i)insufficient nvidia\.com/gpu"), "not enough free GPUs on any node"),
    (re.compile(r"(?i)insufficient ([\w/-]+(?:\.[\w/-]+)*)"), "not enough free {0} on any node"),
    (re.compile(r"(?i)taint"), "the nodes carry taints the pod does not tolerate"),
    (
        re.compile(r"(?i)persistentvolumeclaim|unbound"),
        "a volume claim is missing or not bound: check the profile's checkpoint and data claims",
    ),
    (re.compile(r"(?i)unschedulable|failedscheduling"), "the scheduler cannot place it"),
)
_WAITING = {
    "ImagePullBackOff": "the image cannot be pulled: check the image and registry access",
    "ErrImagePull": "the image cannot be pulled: check the image and registry access",
    "CrashLoopBackOff": "the container keeps crashing: `runai-spec logs NAME --previous` shows why",
    "CreateContainerConfigError": "the container cannot be configured (a missing secret or config map?)",
}


def explain(reason: str, message: str) -> str:
    """A scheduler event or pod condition in plain words."""
    text = f"{reason} {message}"
    for pattern, words in _PLAIN_REASONS:
        match = pattern.search(text)
        if match:
            return words.format(*match.groups()) + f" ({clean(message, 160)})"
    return clean(f"{reason}: {message}", 200)


# The server's status parts are read leniently (objects.checked vouches only for metadata):
# a field of the wrong type reads as absent, never as a traceback.
def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _phase(job: Manifest) -> tuple[str, str | None]:
    """The job's phase from its conditions that hold: the training operator's last one; an
    MPIJob's the first of facts.mpi.PHASES (mpi-operator leaves Running True beside Succeeded
    and Failed, so its last condition need not be its phase)."""
    conditions = [c for c in _dicts(_dict(job.get("status")).get("conditions")) if c.get("status") == "True"]
    if job.get("kind") == mpi.KIND:
        ranked = sorted(
            (c for c in conditions if c.get("type") in mpi.PHASES), key=lambda c: mpi.PHASES.index(c["type"])
        )
        conditions = ranked[:1] or conditions[-1:]
    if not conditions:
        operator = "mpi-operator" if job.get("kind") == mpi.KIND else "the training operator"
        return "Pending", f"{operator} has not reported a status yet"
    last = conditions[-1]
    return clean(last.get("type"), 40), (clean(last["message"]) if last.get("message") else None)


def _pod_state(pod: Manifest) -> tuple[str, int]:
    statuses = _dicts(_dict(pod.get("status")).get("containerStatuses"))
    mine = next((s for s in statuses if s.get("name") == CONTAINER), statuses[0] if statuses else {})
    state = _dict(mine.get("state"))
    count = mine.get("restartCount")
    restarts = count if type(count) is int else 0  # a server's "many" is not a crash of ours
    if "running" in state:
        return "running", restarts
    if "waiting" in state:
        return f"waiting: {clean(_dict(state['waiting']).get('reason', '?'), 80)}", restarts
    if "terminated" in state:
        t = _dict(state["terminated"])
        return (
            f"terminated: exit {clean(t.get('exitCode'), 20)} ({clean(t.get('reason', '?'), 80)})"
        ), restarts
    return "not started", restarts


def pod_restarts(name: str, namespace: str, target: Target | Session) -> dict[str, int]:
    """The job's pods' restart counts as the kubelet reports them (the training container's
    restartCount), by pod name; a pod that reports none is left out, never counted 0."""
    out: dict[str, int] = {}
    with session_for(target) as session:
        for pod in job_pods(session, name, namespace):
            statuses = _dicts(_dict(pod.get("status")).get("containerStatuses"))
            mine = next((s for s in statuses if s.get("name") == CONTAINER), {})
            count = mine.get("restartCount")
            if type(count) is int:
                out[clean(_dict(pod.get("metadata")).get("name"), 120)] = count
    return out


def _events(session: Session, namespace: str, name: str) -> list[Manifest]:
    events = list_objects(session, EVENTS, namespace, [("fieldSelector", f"involvedObject.name={name}")])
    return sorted(
        (e for e in events if e.get("type") == "Warning"),
        key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
    )


def job_status(
    name: str, namespace: str, target: Target | Session, resource: Resource = PYTORCHJOB
) -> StatusResult:
    """The job's (a PyTorchJob's unless RESOURCE says) phase, each pod's state and, when
    pending, why."""
    ref = job_ref(name, namespace, resource)
    with session_for(target) as session:
        job = get_object(session, ref)
        if job is None:
            raise ClusterError(
                f"{ref}: not found",
                file="cluster",
                hint=f"check the name and the project; `kubectl get {resource.plural} -n "
                f"{namespace}` lists what is there",
            )
        phase, message = _phase(job)
        pods = []
        reasons: list[str] = []
        live = list(job_pods(session, name, namespace))
        queue = queue_time(job, live, datetime.now(UTC))
        for pod in live:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            pod_phase = clean(_dict(pod.get("status")).get("phase") or "Pending", 40)
            state, restarts = _pod_state(pod)
            why = None
            if pod_phase == "Pending":
                why = _pending_reason(session, pod)
            node = _dict(pod.get("spec")).get("nodeName")
            # every server-provided name is one clean line: no terminal escapes reach status
            pods.append(
                PodState(
                    clean(meta.get("name"), 120),
                    clean(pod_role(labels) or "?", 40),
                    replica_index(labels),
                    clean(pod_phase, 40),
                    state,
                    restarts,
                    clean(node, 120) if node else None,
                    why,
                )
            )
            if why:
                reasons.append(f"{clean(meta.get('name'), 120)}: {why}")
        if not pods or phase in ("Pending", "Created"):
            reasons += [
                explain(str(e.get("reason", "")), str(e.get("message", "")))
                for e in _events(session, namespace, name)[-3:]
            ]
    return StatusResult(
        name, namespace, phase, message, tuple(pods), tuple(dict.fromkeys(reasons)), queue=queue
    )


def _pending_reason(session: Session, pod: Manifest) -> str | None:
    state, _ = _pod_state(pod)
    waiting = state.removeprefix("waiting: ")
    if waiting in _WAITING:
        return _WAITING[waiting]
    events = _events(session, str(pod["metadata"].get("namespace")), str(pod["metadata"]["name"]))
    if events:
        last = events[-1]
        return explain(str(last.get("reason", "")), str(last.get("message", "")))
    for cond in _dicts(_dict(pod.get("status")).get("conditions")):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return explain(str(cond.get("reason", "")), str(cond.get("message", "")))
    return None
