"""The kubelet and the training operator as a pure state machine, driven by events.

No processes, no clock of its own: the caller reports what happened (a container exited, the
scheduler preempted the job, time passed) and gets back what the cluster would do (restart a
container in place, recreate a pod, stop every pod, mark the job Failed or Succeeded).

Modelled on training-operator v1.9.0 (v1.7.0 and v1.8.0 behave the same here):
- `pkg/core/pod.go` `SetRestartPolicy`: `ExitCode` becomes pod `restartPolicy: Never`; the
  other policies are copied to the pod, so `OnFailure`/`Always` mean the kubelet restarts
  the failed container in place (same pod, same name, other pods untouched).
- `pkg/util/train/train_util.go` `IsRetryableExitCode`: exit code >= 128 is retryable.
- `pkg/controller.v1/common/pod.go` `ReconcilePods`: a failed `ExitCode` pod with a
  retryable code is deleted and recreated (a new pod: restartCount 0); a permanent code, or
  any failure under `Never`, fails the job.
- `pkg/core/job.go` `PastBackoffLimit`: container restartCounts summed over the job's pods
  (OnFailure/Always/ExitCode replicas); `backoffLimit: 0` fails on any restart, otherwise
  `sum >= backoffLimit` fails the job; `common/job.go` then deletes every pod.
- `pkg/controller.v1/pytorch/pytorchjob_controller.go` `UpdateJobStatus`: with a Master the
  job succeeds when the Master does; Worker-only when every worker did, or with an
  elasticPolicy as soon as one worker did.
- Preemption deletes every pod; `ReconcilePods` recreates the missing ones (new pods,
  restartCount 0: a preemption uses none of `backoffLimit`). So does KAI's eviction of one
  pod of an elastic job above its minimum, and its eviction of a stale gang (facts/kai.py):
  a deleted pod is created anew, never counted as a failure.
- A pod lost with no room for its replacement (node gone; the new pod stays Pending) leaves
  the gang below KAI's minMember: after the staleness grace period KAI evicts every pod of
  the gang (stalegangeviction.go), and the operator recreates them all. The rehearsal scales
  that grace period by the same factor as the kubelet's back-off (`backoff_scale`).
Kubelet (`pkg/kubelet/kubelet.go`): crash-loop back-off BACKOFF_BASE_S, doubling, capped at
BACKOFF_CAP_S (`MaxContainerBackOff`); restartCount increments when the container is started
again. The back-off is client-go's `util/flowcontrol/backoff.go` keyed by pod and container:
`Next` starts again from BACKOFF_BASE_S when the failure comes more than BACKOFF_RESET_AFTER_S
after the last one (`hasExpired`); a new pod object has a key of its own. Those numbers are
written here once; docs and help texts refer to these names or format them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .kai import KAI_VERSION, evicted_in_pass, is_stale, min_member, staleness_grace_s
from .kubeflow import MASTER, OPERATOR_VERSION, OPERATOR_VERSIONS, REPLICA_TYPES, short_pod_name

DEFAULT_POLICY = "OnFailure"  # pytorch_defaults.go: PyTorchJobDefaultRestartPolicy
DEFAULT_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds
BACKOFF_BASE_S = 10.0  # kubelet backOffPeriod: the first restart's wait
BACKOFF_CAP_S = 300.0  # kubelet MaxContainerBackOff: the doubling stops here
# client-go flowcontrol hasExpired: 2 x maxDuration (ten minutes) since the last failure
BACKOFF_RESET_AFTER_S = 2 * BACKOFF_CAP_S
RETRYABLE_FROM = 128


def past_active_deadline(active_deadline_s: int | None, start_time: float | None, now: float) -> bool:
    """`pkg/core/job.go` PastActiveDeadline (v1.7.0-v1.9.x): runPolicy.activeDeadlineSeconds
    counted from the job's status.startTime, which the operator sets at its first reconcile,
    while the pods may still be Pending: queue time counts. None for either: never past."""
    if active_deadline_s is None or start_time is None:
        return False
    return now - start_time >= active_deadline_s


def kubelet_backoff(restart: int, scale: float = 1.0) -> float:
    """The kubelet's wait before the `restart`-th restart of one container (1-based)."""
    return float(min(BACKOFF_BASE_S * 2 ** (max(restart, 1) - 1), BACKOFF_CAP_S)) * scale


@dataclass(frozen=True)
class Action:
    """What the cluster does now: `restart` a container in place, `recreate` a pod (new pod
    object), `delete` one pod (SIGTERM, grace, SIGKILL), `delete-all` (preemption, a stale
    gang's eviction: SIGTERM, grace, SIGKILL; recreated after), `stop-all` (the job ended:
    every pod goes), with the reason in words."""

    kind: str
    pod: str | None = None
    why: str = ""


@dataclass
class PodModel:
    name: str
    policy: str
    restart_count: int = 0  # this pod object's container restarts (kubelet)
    phase: str = "Running"  # Running | BackOff | Pending (not scheduled) | Succeeded | Failed
    restart_at: float | None = None
    restarts: int = 0  # container restarts over every pod object of this name
    backoff_step: int = 0  # the kubelet's back-off entry: the n-th doubling in a row
    last_failure_at: float | None = None  # when that entry was last updated


@dataclass
class JobModel:
    """One PyTorchJob as the operator and the kubelet see it."""

    pods: dict[str, PodModel]
    backoff_limit: int | None
    has_master: bool
    elastic: bool
    backoff_scale: float = 1.0
    version: str = OPERATOR_VERSION
    min_member: int = 1  # KAI's minMember of the job's pod group (kai.min_member)
    stale_grace_unscaled_s: float = 60.0  # kai.staleness_grace_s for the site's KAI version
    stale_since: float | None = None  # when the gang fell below min_member
    phase: str = "Running"  # Running | Succeeded | Failed
    reason: str = ""
    log: list[tuple[float, str]] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        job: Mapping[str, Any],
        *,
        backoff_scale: float = 1.0,
        version: str = OPERATOR_VERSION,
        kai_version: str = KAI_VERSION,
    ) -> JobModel:
        """The model of a rendered PyTorchJob: its pods, restart policies and backoffLimit."""
        if version not in OPERATOR_VERSIONS:
            raise ValueError(f"training-operator {version!r}: modelled are {', '.join(OPERATOR_VERSIONS)}")
        spec = job.get("spec") or {}
        replicas = spec.get("pytorchReplicaSpecs") or {}
        pods: dict[str, PodModel] = {}
        for rtype in REPLICA_TYPES:
            rspec = replicas.get(rtype)
            if rspec is None:
                continue
            policy = str(rspec.get("restartPolicy") or DEFAULT_POLICY)
            for i in range(int(rspec.get("replicas", 1))):
                name = short_pod_name(rtype, i)
                pods[name] = PodModel(name, policy)
        limit = (spec.get("runPolicy") or {}).get("backoffLimit")
        return cls(
            pods,
            None if limit is None else int(limit),
            MASTER in replicas,
            spec.get("elasticPolicy") is not None,
            backoff_scale,
            version,
            min_member(job, kai_version),
            staleness_grace_s(job, kai_version),
        )

    @property
    def restarts_used(self) -> int:
        """Container restarts summed over the pods, as PastBackoffLimit counts them."""
        return sum(p.restart_count for p in self.pods.values())

    def _note(self, now: float, text: str) -> None:
        self.log.append((now, text))

    def _fail(self, now: float, why: str) -> list[Action]:
        self.phase, self.reason = "Failed", why
        self._note(now, f"job Failed: {why}")
        return [Action("stop-all", why=why)]

    def exited(self, name: str, code: int, now: float) -> list[Action]:
        """The pod's container exited with `code` (Kubernetes' code: 128 + signal)."""
        if self.phase != "Running":
            return []
        pod = self.pods[name]
        if code == 0:
            pod.phase = "Succeeded"
            self._note(now, f"{name}: container exited 0")
            return self._succeeded(now)
        self._note(now, f"{name}: container exited {code}")
        if pod.policy in ("OnFailure", "Always"):
            pod.phase = "BackOff"
            stable = BACKOFF_RESET_AFTER_S * self.backoff_scale
            if pod.last_failure_at is not None and now - pod.last_failure_at > stable:
                pod.backoff_step = 0  # hasExpired: the back-off starts over
                self._note(
                    now,
                    f"{name}: more than {stable:g} s since its last failure: the "
                    "kubelet's back-off starts again from the beginning",
                )
            pod.backoff_step += 1
            pod.last_failure_at = now
            wait = kubelet_backoff(pod.backoff_step, self.backoff_scale)
            pod.restart_at = now + wait
            self._note(now, f"{name}: CrashLoopBackOff {wait:g} s")
            return []
        if pod.policy == "ExitCode" and code >= RETRYABLE_FROM:
            pod.restart_count = pod.backoff_step = 0  # a new pod object
            pod.last_failure_at = None
            self._note(now, f"{name}: exit {code} is retryable: the operator recreates the pod")
            return [Action("recreate", name, f"exit {code} is retryable (>= 128)")]
        pod.phase = "Failed"
        if pod.policy == "ExitCode":
            return self._fail(
                now,
                f"{name} exited {code}, a permanent error for "
                "restartPolicy ExitCode (retryable only from 128)",
            )
        return self._fail(now, f"{name} exited {code} under restartPolicy Never")

    def due(self, now: float) -> list[Action]:
        """Back-offs that have run out: the kubelet restarts those containers in place; the
        operator then counts the restarts against backoffLimit."""
        if self.phase != "Running":
            return []
        out: list[Action] = []
        for pod in self.pods.values():
            if pod.phase == "BackOff" and pod.restart_at is not None and now >= pod.restart_at:
                pod.phase, pod.restart_at = "Running", None
                pod.restart_count += 1
                pod.restarts += 1
                self._note(
                    now,
                    f"{pod.name}: kubelet restarts the container in place "
                    f"(restartCount {pod.restart_count}; job {self.restarts_used}"
                    f"/{self.backoff_limit})",
                )
                out.append(Action("restart", pod.name, "kubelet back-off over"))
        if self.stale_since is not None and now >= self.stale_since + self.stale_grace_s:
            return out + self._stale_evicted(now)
        limit = self.backoff_limit
        used = self.restarts_used
        if out and limit is not None and ((limit == 0 and used > 0) or 0 < limit <= used):
            return self._fail(now, f"{used} container restart(s) reach backoffLimit {limit}")
        return out

    def next_due(self) -> float | None:
        times = [p.restart_at for p in self.pods.values() if p.restart_at is not None]
        if self.stale_since is not None:
            times.append(self.stale_since + self.stale_grace_s)
        return min(times) if times else None

    @property
    def stale_grace_s(self) -> float:
        """KAI's staleness grace period for this job (the annotation where the site's KAI
        honours it, else its default), scaled like the kubelet's back-off."""
        return self.stale_grace_unscaled_s * self.backoff_scale

    @property
    def active(self) -> int:
        """Pods KAI counts as active: scheduled and not ended (a Pending one is not)."""
        return sum(p.phase in ("Running", "BackOff") for p in self.pods.values())

    def _renew(self, pod: PodModel) -> None:
        pod.phase, pod.restart_at, pod.restart_count = "Running", None, 0
        pod.backoff_step, pod.last_failure_at = 0, None  # a new pod object, a new back-off

    def evicted(self, name: str | Sequence[str], now: float) -> list[Action]:
        """One scheduling pass of KAI evicts NAME (one pod, or k >= 1 pods) of the job: each
        is deleted and the operator creates it anew (no failure, no restart counted), while the
        job stays at or above its minMember (kai.evicted_in_pass); past that the gang goes
        whole: that is `preempted`."""
        names = [name] if isinstance(name, str) else list(name)
        if self.phase != "Running" or not names:
            return []
        if (
            evicted_in_pass(self.active, self.min_member, len(names)) != len(names)
            or len(names) >= self.active
        ):
            return self.preempted(now)
        out: list[Action] = []
        for one in names:
            self._renew(self.pods[one])
            self._note(now, f"{one}: evicted by the scheduler; the operator creates it anew")
            out += [Action("delete", one, "eviction"), Action("recreate", one, "eviction")]
        return out

    def lost(self, name: str, now: float) -> list[Action]:
        """POD is gone (its node lost) and its replacement stays Pending (no room): the gang
        below its minMember is stale, and evicted whole after the grace period (`due`)."""
        if self.phase != "Running":
            return []
        pod = self.pods[name]
        pod.phase, pod.restart_at = "Pending", None
        self._note(now, f"{name}: lost; its replacement waits Pending for room")
        succeeded = any(p.phase == "Succeeded" for p in self.pods.values())
        if self.stale_since is None and not succeeded and is_stale(self.active, self.min_member):
            self.stale_since = now
            self._note(
                now,
                f"the gang has {self.active} of its minimum {self.min_member} pods: stale, "
                f"evicted whole after {self.stale_grace_s:g} s",
            )
        return [Action("delete", name, "lost")]

    def _stale_evicted(self, now: float) -> list[Action]:
        self.stale_since = None
        self._note(now, "stale gang evicted: every pod deleted, the operator recreates them")
        for pod in self.pods.values():
            self._renew(pod)
        return [
            Action("delete-all", why="stale-gang eviction"),
            *(Action("recreate", name, "stale-gang eviction") for name in self.pods),
        ]

    def preempted(self, now: float) -> list[Action]:
        """The scheduler deletes every pod; the operator recreates them all, as new pods."""
        if self.phase != "Running":
            return []
        self.stale_since = None
        for pod in self.pods.values():
            self._renew(pod)
        self._note(now, "preempted: every pod deleted, the operator recreates them")
        return [
            Action("delete-all", why="preemption"),
            *(Action("recreate", name, "preemption") for name in self.pods),
        ]

    def _succeeded(self, now: float) -> list[Action]:
        pods = list(self.pods.values())
        if self.has_master:
            master = self.pods.get(short_pod_name(MASTER, 0))
            done = master is not None and master.phase == "Succeeded"
        elif self.elastic:
            done = any(p.phase == "Succeeded" for p in pods)
        else:
            done = all(p.phase == "Succeeded" for p in pods)
        if not done:
            return []
        self.phase, self.reason = "Succeeded", "succeeded"
        self._note(now, "job Succeeded")
        return [Action("stop-all", why="job Succeeded (cleanPodPolicy)")]


def drive(
    model: JobModel, events: Sequence[tuple[float, str, str | None, int]]
) -> list[tuple[float, Action]]:
    """Feed (time, "exit"|"preempt"|"evict"|"lose"|"tick", pod, code) events in order; every
    action taken, with its time. Back-offs and staleness that run out between events are
    served at their due time."""
    out: list[tuple[float, Action]] = []
    for now, kind, pod, code in sorted(events, key=lambda e: e[0]):
        while (due := model.next_due()) is not None and due <= now:
            out += [(due, a) for a in model.due(due)]
        if kind == "exit" and pod is not None:
            out += [(now, a) for a in model.exited(pod, code, now)]
        elif kind == "preempt":
            out += [(now, a) for a in model.preempted(now)]
        elif kind == "evict" and pod is not None:
            out += [(now, a) for a in model.evicted(pod, now)]
        elif kind == "lose" and pod is not None:
            out += [(now, a) for a in model.lost(pod, now)]
        else:
            out += [(now, a) for a in model.due(now)]
    return out
