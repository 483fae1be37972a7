"""Faults on demand: `--kill`, `--evict`, `--stale-gang POD[@checkpoint|@SECONDS]`, `--preempt`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..facts.kai import STALENESS_GRACE_DEFAULT_S, evicts_one, is_stale, min_member
from ..facts.kubeflow import MASTER, REPLICA_TYPES, WORKER, short_pod_name

AT_CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class Fault:
    """A kill of one pod's whole container (SIGKILL to the agent and its workers), KAI's
    eviction of one pod (`evict`: deleted, created anew), a pod lost with no room for its
    replacement (`lose`: the gang evicted whole once stale), or a preemption of the job; at
    the first checkpoint (every rank held right after it) or `at` seconds after the start."""

    kind: str  # "kill" | "evict" | "lose" | "preempt"
    pod: str | None
    at: float | None  # None: right after the first checkpoint

    @property
    def label(self) -> str:
        when = "after the first checkpoint" if self.at is None else f"at {self.at:g} s"
        what = {
            "kill": f"kill {self.pod}",
            "evict": f"eviction of {self.pod}",
            "lose": f"{self.pod} lost, no room for it (stale gang)",
        }
        return f"{what.get(self.kind, 'preemption')} {when}"


def pod_names(job: Mapping[str, Any]) -> list[str]:
    """The job's pods by short name (`master-0`, `worker-N`), as the operator numbers them."""
    replicas = (job.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    return [
        short_pod_name(rtype, i)
        for rtype in REPLICA_TYPES
        if replicas.get(rtype) is not None
        for i in range(int(replicas[rtype].get("replicas", 1)))
    ]


def _when(text: str, field: str) -> float | None:
    if text in ("", AT_CHECKPOINT):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(
            f"@{text} is neither @checkpoint nor a number of seconds",
            field=field,
            hint="e.g. @checkpoint (the default) or @30",
        )
    return value


def parse_kill(text: str, names: Iterable[str], kind: str = "kill") -> Fault:
    """`POD[@checkpoint|@SECONDS]`; POD is a short pod name of this job."""
    pod, _, when = text.partition("@")
    known = list(names)
    flag = OPTION[kind]
    if pod not in known:
        raise InputError(
            f"no pod {pod!r} in this job (its pods: {', '.join(known)})",
            field=flag,
            hint=f"e.g. {flag} {known[-1] if known else 'worker-0'}@checkpoint",
        )
    return Fault(kind, pod, _when(when, flag))


OPTION = {"kill": "--kill", "evict": "--evict", "lose": "--stale-gang"}


def check_scheduler_fault(job: Mapping[str, Any], fault: Fault) -> None:
    """KAI evicts one pod only of a job above its pod group's minimum (else the whole gang:
    --preempt); a lost pod makes a gang stale only where it leaves some pods, fewer than
    that minimum (facts/kai.py)."""
    pods, minimum = len(pod_names(job)), min_member(job)
    if fault.kind == "evict" and not evicts_one(pods, minimum):
        raise InputError(
            f"KAI-Scheduler evicts one pod only of a job above its minimum; this one runs "
            f"{pods} pod(s) with a minimum of {minimum}, so it is evicted whole",
            field="--evict",
            hint="that is a preemption: --preempt (one-pod evictions are for elastic jobs)",
        )
    if fault.kind == "lose" and not is_stale(pods - 1, minimum):
        why = (
            "no pod would be left to evict"
            if pods == 1
            else f"the other {pods - 1} pod(s) keep its minimum of {minimum}"
        )
        raise InputError(
            f"losing {fault.pod} does not make this gang stale: {why}",
            field="--stale-gang",
            hint=f"KAI evicts a gang below its minimum after {STALENESS_GRACE_DEFAULT_S:g} s; "
            "for an elastic job above it, --evict shows the one-pod departure",
        )


def parse_preempt(text: str) -> Fault:
    """`--preempt` alone, `--preempt@checkpoint` or `--preempt@SECONDS` (the part after @)."""
    return Fault("preempt", None, _when(text.lstrip("@"), "--preempt"))


def hardest_pod(job: Mapping[str, Any]) -> str:
    """The pod whose loss is hardest for the layout: master-0 (hosts the rendezvous store)
    with a Master; worker-0 (the c10d store host, PET_RDZV_ENDPOINT's default) for a
    Worker-only elastic job; the only pod of a single-pod layout."""
    names = pod_names(job)
    if not names:
        raise InputError("the PyTorchJob has no Master or Worker replicas", field="spec.pytorchReplicaSpecs")
    master0, worker0 = short_pod_name(MASTER, 0), short_pod_name(WORKER, 0)
    if master0 in names:
        return master0
    elastic = (job.get("spec") or {}).get("elasticPolicy") or {}
    host = str(elastic.get("rdzvHost") or "")
    name = (job.get("metadata") or {}).get("name", "")
    for pod in names:
        if host and host == f"{name}-{pod}":
            return pod
    return worker0 if worker0 in names else names[0]


def faults_of(
    job: Mapping[str, Any],
    kills: Iterable[str],
    preempt: str | None,
    restart_after_checkpoint: bool,
    scheduler: Iterable[tuple[str, str]] = (),
) -> list[Fault]:
    """The faults a rehearsal injects: each `--kill`, the `--preempt`, and for
    `--restart-after-checkpoint` one kill of `hardest_pod` right after the first checkpoint
    (so that its table is the --kill table); then the scheduler's (kind, text): each
    `--evict` ("evict") and `--stale-gang` ("lose")."""
    kills = list(kills)
    if restart_after_checkpoint and (kills or preempt is not None):
        raise InputError(
            "--restart-after-checkpoint is itself a --kill of the hardest pod; it "
            "does not combine with --kill or --preempt",
            field="--restart-after-checkpoint",
            hint=f"e.g. --kill {hardest_pod(job)}@checkpoint and your other faults",
        )
    if restart_after_checkpoint:
        kills = [f"{hardest_pod(job)}@{AT_CHECKPOINT}"]
    names = pod_names(job)
    out = [parse_kill(k, names) for k in kills]
    for kind, text in scheduler:
        out.append(parse_kill(text, names, kind))
        check_scheduler_fault(job, out[-1])
    if preempt is not None:
        out.append(parse_preempt(preempt))
    return out
