"""Failure semantics: what each kind of fault does to a job of a plan, in the cluster."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..facts.kai import STALENESS_GRACE_DEFAULT_S
from ..facts.kubeflow import MASTER, RDZV_BACKEND, WORKER, pod_name, short_pod_name
from ..facts.operator import BACKOFF_BASE_S, BACKOFF_CAP_S
from ..facts.torchrun import (
    SHUTDOWN_DEFAULT_S,
    SHUTDOWN_TIMEOUT_ENV,
    SIGTERM_BEFORE_RENDEZVOUS,
    shutdown_timeout_s,
)
from .launcher import launcher_named
from .plan import Plan


@dataclass(frozen=True)
class FaultOutcome:
    """What one kind of fault does to a job of this plan, in the cluster."""

    fault: str
    outcome: str
    restarts: int | None  # container restarts it uses against backoffLimit (None: all of them)
    recovers: bool


@dataclass(frozen=True)
class FailureSemantics:
    """The plan's failure semantics, as `plan` shows them (RESULTS.md measured each row)."""

    choices: tuple[tuple[str, str], ...]  # (what, value) in the order plan shows them
    faults: tuple[FaultOutcome, ...]
    tolerated: int | None  # worst-case faults the backoffLimit absorbs (None: no limit)
    resubmit: str  # the commands that resume the job from its checkpoint
    survives: tuple[tuple[str, str], ...] = ()  # (fault, how many of it the job survives)


# What the shipped presets are sized to survive, in the worst case (each fault on the pod
# whose loss costs most): container faults of any pod, and (elastic jobs) KAI's evictions of
# one pod. `sized` turns it into each preset's backoffLimit and torchrun's maxRestarts, and
# `tolerance` reads it back from a preset's numbers for `plan` and docs/faults.md.
SITE_FAULTS = 2
SITE_EVICTIONS = 8


@dataclass(frozen=True)
class Tolerance:
    """How many of each fault a job survives, worst case (None: any number)."""

    faults: int | None  # container faults (any pod, the store host's included)
    evictions: int | None  # KAI's evictions of one pod (elastic jobs; 0 for a fixed gang)


def sized(
    pods: int, elastic: bool, faults: int = SITE_FAULTS, evictions: int = SITE_EVICTIONS
) -> tuple[int, int]:
    """(backoffLimit, torchrun maxRestarts) for a c10d job of PODS pods to survive FAULTS
    container faults and (elastic) EVICTIONS one-pod evictions, in any order.

    backoffLimit: the worst container fault, on the c10d store's host, restarts every pod's
    container once (PODS restarts) and the operator fails the job when the sum reaches the
    limit, so FAULTS x PODS + 1. maxRestarts: a fault or eviction of another pod costs every
    surviving torchrun agent one restart of its ranks (a pod joining costs none); the store
    host's agent survives every such fault, and once it has none left it ends the rendezvous
    for all, so FAULTS + EVICTIONS."""
    return faults * pods + 1, faults + (evictions if elastic else 0)


def tolerance(
    pods: int, elastic: bool, backoff_limit: int | None, max_restarts: int | None, *, c10d: bool = True
) -> Tolerance:
    """`sized` read back: what a job of these numbers survives (max_restarts None: no
    torchrun agent restarts ranks across pods, a one-pod layout). Preemptions and stale-gang
    evictions recreate every pod and use neither budget."""
    if not c10d:
        return Tolerance(0, 0)  # the static rendezvous: one fault can use the whole budget
    per_fault = pods if max_restarts is not None else 1
    faults = (
        None if backoff_limit is None else max((backoff_limit - 1) // per_fault, 0) if backoff_limit else 0
    )
    if max_restarts is None or faults is None:  # no backoffLimit: the operator never gives up
        return Tolerance(faults, None if elastic and faults is None else 0)
    faults = min(faults, max_restarts)
    return Tolerance(faults, max_restarts - faults if elastic else 0)


def _max_restarts(plan: Plan) -> int | None:
    """torchrun's maxRestarts of a multi-node c10d job (None: no rendezvous across pods)."""
    r = plan.rendezvous
    if r is None or r.backend != RDZV_BACKEND or not launcher_named(plan.launcher_name).restarts_ranks:
        return None
    if r.max_restarts is not None:
        return r.max_restarts
    return plan.elastic.max_restarts if plan.elastic else 0


def tolerance_of(plan: Plan) -> Tolerance:
    """`tolerance` of PLAN's preset numbers."""
    r = plan.rendezvous
    return tolerance(
        plan.pods,
        plan.elastic is not None,
        _backoff_limit(plan),
        _max_restarts(plan),
        c10d=r is None or r.backend == RDZV_BACKEND,
    )


def _count(n: int | None) -> str:
    return "any number" if n is None else str(n)


def survives(plan: Plan) -> tuple[tuple[str, str], ...]:
    """(fault, how many of it PLAN's job survives), worst case, as `plan` and docs/faults.md
    print them: from `tolerance_of`, the function the shipped presets are sized by."""
    t = tolerance_of(plan)
    if plan.restart_policy in ("Never", "ExitCode"):
        faults = "0 (fails fast)" if plan.pods > 1 or plan.restart_policy == "Never" else "any signal"
        return (("container faults", faults), ("preemptions", "any number"))
    out = [("container faults (any pod)", _count(t.faults))]
    if plan.elastic is not None:
        out.append(
            (
                "evictions of one pod, besides those faults",
                f"{_count(t.evictions)} (torchrun's maxRestarts, {_max_restarts(plan)}, less the faults)",
            )
        )
    out.append(("preemptions" + (" and stale-gang evictions" if plan.pods > 1 else ""), "any number"))
    return tuple(out)


def _backoff_limit(plan: Plan) -> int | None:
    value = dict(plan.run_policy).get("backoffLimit")
    return value if isinstance(value, int) else None


def sigterm_window(plan: Plan) -> str:
    """How long the ranks of PLAN have to save between SIGTERM and SIGKILL, in words: the
    grace period for python (one GPU); for torchrun (PID 1 of its pod) its shutdown timeout,
    which the render sets to the grace period less a margin and torch reads from 2.12 only
    (launcher.shutdown_window); and the other window, torch's fixed 30 s when torchrun
    restarts its ranks after a peer's failure."""
    grace = plan.termination_grace_period_seconds
    launcher = launcher_named(plan.launcher_name)
    if not launcher.forwards_sigterm:
        return (
            f"the script, PID 1 of its container, has {grace} s, then SIGKILL; PID 1 has no "
            "default action for SIGTERM, so a script without a handler keeps running, and "
            "holds its GPU, until that SIGKILL"
        )
    window = launcher.shutdown_window(plan.torch_version, grace)
    timeout = shutdown_timeout_s(grace)
    old = min(SHUTDOWN_DEFAULT_S, grace)
    margin = (
        f"the {grace} s grace period less {grace - timeout} s, so that torchrun's SIGKILL of "
        "its ranks (and its log of which rank overran) comes before the kubelet's"
    )
    restarts = (
        f"; when torchrun restarts its ranks after a peer's failure it gives them torch's "
        f"fixed {SHUTDOWN_DEFAULT_S} s instead, whatever {SHUTDOWN_TIMEOUT_ENV} says"
    )
    if window is None:
        return (
            f"torchrun forwards it to the ranks and gives them {timeout} s on torch 2.12 and "
            f"later ({SHUTDOWN_TIMEOUT_ENV}: {margin}), {old} s on older torch, then SIGKILL "
            f"(torch_version in the profile says which){restarts}"
        )
    if window == timeout:
        return (
            f"torchrun forwards it to the ranks and gives them {timeout} s ({margin}; torch "
            f"{plan.torch_version} reads {SHUTDOWN_TIMEOUT_ENV}), then SIGKILL{restarts}"
        )
    return (
        f"torchrun forwards it to the ranks and SIGKILLs them {window} s later: torch "
        f"{plan.torch_version} has no setting for it (2.12 and later read "
        f"{SHUTDOWN_TIMEOUT_ENV}); the rest of the {grace} s grace period only holds the "
        f"GPUs{restarts}"
    )


def save_time(plan: Plan) -> str:
    """sigterm_window in a few words: `290 s`, `30 s (torch 2.11)`, `290 s on torch >= 2.12,
    30 s before`."""
    grace = plan.termination_grace_period_seconds
    launcher = launcher_named(plan.launcher_name)
    if not launcher.forwards_sigterm:
        return f"{grace} s (if the script handles SIGTERM)"
    window = launcher.shutdown_window(plan.torch_version, grace)
    timeout = shutdown_timeout_s(grace)
    if window is None:
        return f"{timeout} s on torch >= 2.12, {min(SHUTDOWN_DEFAULT_S, grace)} s before"
    return f"{window} s" + ("" if window == timeout else f" (torch {plan.torch_version})")


def _choices(plan: Plan) -> tuple[tuple[str, str], ...]:
    """The failure-semantics choices of PLAN, in the order `plan` shows them."""
    limit = _backoff_limit(plan)
    r = plan.rendezvous
    choices: list[tuple[str, str]] = [
        ("restart policy", plan.restart_policy),
        ("backoffLimit", "none (the operator never gives up)" if limit is None else str(limit)),
    ]
    if r is not None:
        where = (
            f"{r.endpoint} (the Master's service)"
            if r.endpoint
            else f"{short_pod_name(WORKER, 0)}'s service (the operator's PET_RDZV_ENDPOINT)"
        )
        choices.append(
            (
                "rendezvous",
                "static (bare torchrun)"
                if r.backend == "static"
                else f"{r.backend} at {where}, id {r.rdzv_id}",
            )
        )
        if r.backend == RDZV_BACKEND:
            restarts = (
                r.max_restarts
                if r.max_restarts is not None
                else plan.elastic.max_restarts
                if plan.elastic
                else 0
            )
            choices += [
                ("torchrun max restarts", str(restarts)),
                ("rendezvous join / read timeout", f"{r.join_timeout_s} s / {r.read_timeout_s} s"),
            ]
            if plan.elastic is not None:
                choices.append(
                    (
                        "rendezvous last call",
                        f"{r.last_call_timeout_s} s" if r.last_call_timeout_s else "torch's default (30 s)",
                    )
                )
    grace = plan.termination_grace_period_seconds
    choices.append(("termination grace period", f"{grace} s (SIGTERM, then SIGKILL)"))
    choices.append(("time to save on SIGTERM", sigterm_window(plan)))
    return tuple(choices)


# the kubelet's back-off between restarts of a container in place, in words
IN_PLACE = (
    "the kubelet restarts that container in place after its back-off "
    f"({BACKOFF_BASE_S:g} s, doubling up to {BACKOFF_CAP_S:g} s)"
)


def _faults_in_place(plan: Plan, preempt: FaultOutcome) -> tuple[tuple[FaultOutcome, ...], int | None]:
    """Faults of a job whose containers restart in place (OnFailure/Always), and the
    restarts the worst of them uses (None: it can use the whole backoffLimit)."""
    r = plan.rendezvous
    if r is None:
        return (
            FaultOutcome(
                "the pod's container fails", f"{IN_PLACE}; the job resumes from its last checkpoint", 1, True
            ),
            preempt,
        ), 1
    if r.backend == "static":
        return (
            FaultOutcome(
                "any pod's container fails",
                f"{IN_PLACE}, but torchrun's static rendezvous never re-admits it: a restarted pod "
                "can meet the others' old store and fail again, so one fault can use the whole "
                "backoffLimit, and whether the job recovers depends on timing (measured: "
                "docs/fault-experiments/RESULTS.md)",
                None,
                False,
            ),
            preempt,
        ), None
    host = pod_name(plan.name, MASTER if plan.elastic is None else WORKER, 0)
    join = f"torchrun on the other pods waits up to {r.join_timeout_s} s for it to rejoin"
    others = FaultOutcome(
        "a worker's container fails" if plan.elastic is None else "another worker's container fails",
        f"{IN_PLACE}; {join}, then every rank resumes from the last checkpoint",
        1,
        True,
    )
    store = FaultOutcome(
        f"{host} fails (it hosts the c10d store)",
        f"{IN_PLACE}; torchrun on the other pods loses the store and exits, so the kubelet "
        "restarts every pod's container once; the job resumes from the last checkpoint",
        plan.pods,
        True,
    )
    return (store, others, preempt), plan.pods


def _scheduler_faults(plan: Plan) -> tuple[FaultOutcome, ...]:
    """KAI-Scheduler's own evictions (facts/kai.py): one pod of an elastic job above its
    minimum; a gang below its minimum, evicted whole once stale."""
    if plan.pods < 2:
        return ()
    out = []
    restarts = _max_restarts(plan)
    if plan.elastic is not None:
        out.append(
            FaultOutcome(
                "the scheduler evicts pods (the job runs above its minimum; one pass may take "
                "several, down to the minimum)",
                f"each pod gets SIGTERM and {save_time(plan)} to checkpoint; the operator "
                "creates it anew (no restart counted); torchrun on every other pod restarts its "
                f"ranks (one of its maxRestarts, {restarts}, per departure that comes apart; at "
                "least one per pass) and they go on with the pods left, from the last "
                "checkpoint; the new pods join when they are scheduled",
                0,
                True,
            )
        )
    if plan.rendezvous is not None:
        out.append(
            FaultOutcome(
                "a pod is deleted or preempted while it waits in its first rendezvous",
                f"{SIGTERM_BEFORE_RENDEZVOUS} ({plan.termination_grace_period_seconds} s here), "
                "idle: nothing trained yet, nothing lost but that GPU time; the operator "
                "creates the pod anew (no restart counted)",
                0,
                True,
            )
        )
    minimum = plan.elastic.min_pods if plan.elastic is not None else plan.pods
    out.append(
        FaultOutcome(
            "a pod is lost and no room is left for its replacement"
            + (f" (the job at its minimum, {minimum} pods)" if plan.elastic is not None else ""),
            f"below its minimum of {minimum} pods the gang is stale: KAI evicts every pod "
            f"{STALENESS_GRACE_DEFAULT_S:g} s later (its default staleness grace period), the "
            "operator creates them anew, and the job resumes from its last checkpoint once KAI "
            "schedules the gang whole",
            0,
            True,
        )
    )
    return tuple(out)


def _semantics(
    plan: Plan,
    choices: tuple[tuple[str, str], ...],
    faults: tuple[FaultOutcome, ...],
    tolerated: int | None,
    resubmit: str,
) -> FailureSemantics:
    return FailureSemantics(choices, faults + _scheduler_faults(plan), tolerated, resubmit, survives(plan))


def failure_semantics(plan: Plan, profile_path: str = "PROFILE") -> FailureSemantics:
    """Each failure-semantics choice of PLAN and, per fault, what it does: the kubelet
    restarts a failed container in place (OnFailure/Always), the operator sums the restarts
    against backoffLimit and fails the job when they reach it (training-operator v1.9
    pkg/core/job.go PastBackoffLimit); a preemption deletes every pod and the operator
    creates them anew, which costs no restart."""
    choices = _choices(plan)
    resubmit = (
        f"runai-spec delete {plan.name} --project {plan.project} --yes && "
        f"runai-spec submit {shlex.quote(profile_path)}"
    )
    preempt = FaultOutcome(
        "preemption, or the scheduler evicts the whole gang",
        f"every pod gets SIGTERM and {save_time(plan)} to checkpoint, then SIGKILL; the "
        "operator creates the pods anew and the job resumes from its last checkpoint",
        0,
        True,
    )
    faults: tuple[FaultOutcome, ...]
    if plan.restart_policy == "ExitCode" and plan.pods == 1:
        faults = (
            FaultOutcome(
                "the pod's container fails",
                "a signal (exit 128 and up: OOM kill, node loss) makes the operator recreate the "
                "pod, which resumes from its last checkpoint; an error exit (1-127) fails the job "
                "at once and stops it (fail fast)",
                0,
                True,
            ),
            preempt,
        )
        return _semantics(plan, choices, faults, 0, resubmit)
    if plan.restart_policy in ("Never", "ExitCode"):
        # ExitCode recreates a pod killed by a signal, but its peers then exit 1 (torchrun's
        # ChildFailedError), a permanent code: the job fails one recreation later.
        how = (
            "the operator marks the job Failed at once and stops every pod"
            if plan.restart_policy == "Never"
            else "the operator recreates a pod killed by a signal, but its peers then exit 1, "
            "a permanent error: the job is marked Failed and every pod stopped"
        )
        faults = (FaultOutcome("a pod's container fails", f"fails fast: {how}", None, False), preempt)
        return _semantics(plan, choices, faults, 0, resubmit)
    faults, worst = _faults_in_place(plan, preempt)
    if worst is None:
        return _semantics(plan, choices, faults, 0, resubmit)
    # the operator fails the job when the summed restarts reach backoffLimit (0: at once), and
    # a torchrun agent out of maxRestarts ends the rendezvous for all (tolerance)
    return _semantics(plan, choices, faults, tolerance_of(plan).faults, resubmit)
