"""Faults on demand under the operator model: pods killed, restarted, recreated or deleted.

Only a container restarts in place after the kubelet's back-off (same pod, same env, same port);
a preemption deletes every pod, and the job's end stops them all, as `JobModel` says."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..facts.operator import DEFAULT_GRACE_S, Action, JobModel
from .argv import PodPlan
from .checks import CheckResult
from .faults import Fault
from .processes import Pod, PodOutcome, Ticker, held
from .restarts import STATIC_RENDEZVOUS_RISK, static_rendezvous
from .script_checks import read_audit
from .script_records import first_checkpoint, sigterm_saves, stuck, stuck_text
from .script_saves import mid_save
from .spec import RehearsalSpec


def _delete_all(pods: Sequence[Pod]) -> dict[str, str]:
    """Pods deleted (a preemption): SIGTERM to each container's main process at once, then
    SIGKILL to whatever still runs after that pod's terminationGracePeriodSeconds (default
    30 s). How each pod ended, in words."""
    trees = {p.plan.name: p.term() for p in pods}
    start = time.monotonic()
    ended: dict[str, str] = {}
    while len(ended) < len(pods):
        for p in pods:
            name = p.plan.name
            if name in ended:
                continue
            grace = p.plan.grace_s if p.plan.grace_s is not None else DEFAULT_GRACE_S
            code = p.proc.poll()
            if code is not None:
                ended[name] = (
                    f"exited {128 - code if code < 0 else code} "
                    f"{time.monotonic() - start:.1f} s after SIGTERM"
                )
            elif time.monotonic() - start >= grace:
                ended[name] = f"SIGKILL after the grace period of {grace:g} s"
                p.kill()
        time.sleep(0.05)
    for p in pods:
        p.reap(trees[p.plan.name])  # the container's other processes go with it
    return ended


@dataclass
class Fired:
    """A fault that fired: when, the step saved before it, and what the cluster did after."""

    fault: Fault
    at: float
    saved: int
    restarted: set[str] = field(default_factory=set)  # pods restarted in place
    recreated: set[str] = field(default_factory=set)  # pods recreated
    ended: dict[str, str] = field(default_factory=dict)  # how each deleted pod ended


def job_model(job: Mapping[str, Any], spec: RehearsalSpec) -> JobModel:
    """The kubelet/operator/KAI model of JOB for the site the spec names: its training-operator
    release's restarts, its KAI release's gang rules, the back-off at the spec's scale."""
    return JobModel.of(
        job, backoff_scale=spec.backoff_scale, version=spec.operator_version, kai_version=spec.kai_version
    )


class FaultRun:
    """The pods of one fault rehearsal, as the kubelet/operator model drives them.

    `audit_dir`: the pods run the researcher's own script (`--own-script`), whose first
    checkpoint is the audit layer's first save record (the script cannot be held there: the
    fault lands right after it), and whose resume the `resume` row judges from the same
    records. `spec.settings.checkpoint_on_sigterm`: the profile says its script saves on
    SIGTERM; a preemption then fails where a rank did not save within the grace period."""

    def __init__(
        self,
        job: Mapping[str, Any],
        plans: Sequence[PodPlan],
        world: int,
        spec: RehearsalSpec,
        hold_dir: Path,
        audit_dir: Path | None,
    ) -> None:
        self.job, self.plans, self.world, self.spec = job, plans, world, spec
        self.hold_dir, self.audit_dir = hold_dir, audit_dir
        self.model = job_model(job, spec)
        self.by_name = {p.name: p for p in plans}
        self.attempts = {p.name: 0 for p in plans}
        self.pods: dict[str, Pod] = {p.name: Pod(p, 0) for p in plans}
        self.done: list[Pod] = []
        self.fired: list[Fired] = []
        self.seen_exit: set[int] = set()
        self.start = time.monotonic()
        self.wall_start = time.time()  # the audit records' clock
        self.ended_at = 0.0
        self.stuck, self.stuck_next = "", 0.0

    def apply(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if a.kind in ("restart", "recreate") and a.pod is not None:
                self.attempts[a.pod] += 1
                old = self.pods[a.pod]
                if old.proc.poll() is None:
                    old.stop()
                self.seen_exit.add(id(old))
                self.done.append(old)
                self.pods[a.pod] = Pod(self.by_name[a.pod], self.attempts[a.pod])
                for f in self.fired:
                    (f.restarted if a.kind == "restart" else f.recreated).add(a.pod)
            elif a.kind == "delete-all":
                ended = _delete_all(list(self.pods.values()))
                self.seen_exit.update(id(p) for p in self.pods.values())
                for pod, how in ended.items():  # a lost pod keeps its own story
                    self.fired[-1].ended.setdefault(pod, how)
            elif a.kind == "delete" and a.pod is not None:  # one pod: evicted, or lost
                lost = {a.pod: "lost (SIGKILL: its node went away)"} if a.why == "lost" else None
                self.fired[-1].ended.update(lost or _delete_all([self.pods[a.pod]]))
                self.seen_exit.add(id(self.pods[a.pod]))
            elif a.kind == "stop-all":
                for p in self.pods.values():
                    if p.proc.poll() is None:
                        p.stop()

    def fire(self, pending: list[Fault], now: float) -> None:
        """Each pending fault whose moment has come: at its second, or at the first
        checkpoint (every rank holding there; with its own script, the first save)."""
        for f in list(pending):
            saves = (
                held(self.hold_dir)
                if self.audit_dir is None
                else first_saves(self.audit_dir, audit_key(self.plans), self.world)
            )
            ready = (
                (bool(saves) if self.audit_dir is not None else len(saves) >= self.world)
                if f.at is None
                else now >= f.at
            )
            if not ready:
                continue
            saved = min(saves.values()) if saves else 0
            if f.kind == "preempt":
                pending.remove(f)
                self.fired.append(Fired(f, now, saved))
                # SIGTERM reaches the ranks where they hold: a script that saves on SIGTERM
                # saves that step; then the release, so that the new pods do not hold
                actions = self.model.preempted(now)
                self.apply(actions[:1])
                (self.hold_dir / "release").touch()
                self.apply(actions[1:])
            elif f.pod is not None and self.pods[f.pod].proc.poll() is None:
                pending.remove(f)
                self.fired.append(Fired(f, now, saved))
                if f.kind == "evict":  # SIGTERM where it holds, then the others go on
                    actions = self.model.evicted(f.pod, now)
                    self.apply(actions[:1])
                    (self.hold_dir / "release").touch()
                    self.apply(actions[1:])
                    continue
                self.pods[f.pod].kill()
                (self.hold_dir / "release").touch()
                if f.kind == "lose":  # gone, its replacement Pending: the model decides
                    self.apply(self.model.lost(f.pod, now))

    def follow(self, faults: Sequence[Fault]) -> list[Fault]:
        """Run the pods, inject the faults, follow the model until the job ends or the
        timeout; the faults that never fired."""
        pending = list(faults)
        deadline = self.start + self.spec.timeout_s
        ticker = Ticker(self.spec.progress, len(self.plans), self.spec.timeout_s)
        model = self.model
        try:
            while time.monotonic() < deadline and model.phase == "Running":
                self.fire(pending, time.monotonic() - self.start)
                for name, p in list(self.pods.items()):
                    code = p.proc.poll()
                    if code is not None and id(p) not in self.seen_exit:
                        self.seen_exit.add(id(p))
                        # Kubernetes reports a signal as 128 + signal
                        self.apply(
                            model.exited(
                                name, 128 - code if code < 0 else code, time.monotonic() - self.start
                            )
                        )
                self.apply(model.due(time.monotonic() - self.start))
                if self._stuck():
                    break
                ticker.tick(list(self.pods.values()))
                time.sleep(0.05)
        finally:
            (self.hold_dir / "release").touch()
            for p in self.pods.values():
                if p.proc.poll() is None:
                    p.timed_out = model.phase == "Running"
                    p.stop()
        self.ended_at = time.monotonic() - self.start
        return pending

    def _sigterm_saves(self, f: Fired, lines: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
        """(ranks that saved on SIGTERM, ranks that should have): the preflight's own records
        of every rank; for the own script, the whole checkpoints whose save began after the
        SIGTERM (script_records.sigterm_saves), of which one (rank 0's, or a sharded save's)
        is the job's."""
        if self.audit_dir is None:
            saves = sorted(
                {int(r["rank"]) for r in lines if r.get("event") == "sigterm-checkpoint" and r.get("saved")}
            )
            return saves, sorted(set(range(self.world)) - set(saves))
        found = sigterm_saves(read_audit(self.audit_dir, audit_key(self.plans)), self.wall_start + f.at)
        saves = sorted({int(c["rank"]) for c in found})
        return saves, [] if saves else list(range(self.world))

    def _saves_on_sigterm(self) -> bool:
        """The profile says its script saves on SIGTERM: the preflight is told so in its
        settings; the own script is the profile's, whose plan says it (checkpoint.on_sigterm)."""
        plan = self.spec.plan
        own = self.audit_dir is not None and plan is not None and plan.checkpoint_on_sigterm
        return self.spec.settings.checkpoint_on_sigterm or own

    def _stuck(self) -> bool:
        """A rank of the own script alive after its own destroy_process_group (the audit
        layer's `stuck`): the job cannot complete; the shutdown row names it, and recovery is
        not judged. Reads the audit folder at most once a second."""
        now = time.monotonic()
        if self.audit_dir is None or now < self.stuck_next:
            return bool(self.stuck)
        self.stuck_next = now + 1.0
        self.stuck = stuck_text(stuck(read_audit(self.audit_dir, audit_key(self.plans))))
        return bool(self.stuck)

    def verdict(self, f: Fired, resumed: set[int], wrong: list[str]) -> tuple[str, bool]:
        """What the fault did to the job, in words, and whether the layout survived it."""
        model, world = self.model, self.world
        if self.stuck:
            return (
                f"recovery not judged: {self.stuck}, so the job cannot complete (see the shutdown row)",
                False,
            )
        if model.phase == "Failed":
            return f"the operator would mark the job Failed: {model.reason}", False
        if model.phase == "Succeeded" and (set(range(world)) - resumed or wrong):
            return "the job ended, but not every rank resumed the saved step", False
        if model.phase == "Succeeded" and static_rendezvous(self.job) and f.fault.kind == "kill":
            # recovered this time; in the cluster the same fault can use the whole budget
            return "recovered here, but " + STATIC_RENDEZVOUS_RISK.format(
                victim=f.fault.pod or "a pod"
            ), False
        if model.phase == "Succeeded":
            return f"recovered (the job succeeded {self.ended_at - f.at:.1f} s after it)", True
        return f"still running at --timeout {self.spec.timeout_s:g} s", False

    def row(self, f: Fired, lines: Sequence[Mapping[str, Any]]) -> CheckResult:
        """The fault's row: what the cluster did, the restarts used, the verdict, the resume."""
        model, world, scale = self.model, self.world, self.spec.backoff_scale
        resumed, wrong = _resumes(lines, f.saved) if self.audit_dir is None else (set(range(world)), [])
        verdict, ok = self.verdict(f, resumed, wrong)
        story = (
            f"ranks {', '.join(map(str, sorted(resumed)))} resumed the saved step {f.saved}"
            if resumed
            else f"no rank resumed the saved step {f.saved}"
        )
        if self.audit_dir is not None:
            story = (
                mid_save(read_audit(self.audit_dir, audit_key(self.plans)), self.wall_start + f.at)
                + "the resume row checks what your script loaded after it"
            )
        if wrong:
            story += "; " + "; ".join(wrong)
        moved = f"pods restarted in place: {', '.join(sorted(f.restarted)) or 'none'}"
        if f.fault.kind == "preempt" or f.recreated:
            who = "every pod" if len(f.ended) == len(self.plans) else ", ".join(f.ended) or "no pod"
            moved = (
                f"{who} deleted ({'; '.join(f'{k}: {v}' for k, v in f.ended.items())}), "
                f"pods recreated: {', '.join(sorted(f.recreated)) or 'none'}; " + moved
            )
        agents = agent_restarts(lines)
        if agents:
            moved += "; torchrun's max restarts spent: " + ", ".join(
                f"{pod} {n}" for pod, n in agents.items()
            )
        saves, unsaved = self._sigterm_saves(f, lines)
        if f.fault.kind == "preempt":
            moved += (
                "; on SIGTERM rank(s) " + ", ".join(map(str, saves)) + " saved their last "
                "step within the grace period"
                if saves
                else "; no rank saved on SIGTERM"
            )
            if self._saves_on_sigterm() and unsaved and ok:
                verdict, ok = (
                    (
                        f"rank(s) {', '.join(map(str, unsaved))} did not save on "
                        "SIGTERM within the grace period, as the profile says its "
                        "script does"
                    ),
                    False,
                )
        limit = "none" if model.backoff_limit is None else str(model.backoff_limit)
        msg = (
            f"{f.fault.label}: {moved}; restarts used {model.restarts_used}/{limit} (back-off "
            f"scale {scale:g}); {verdict}; {story}"
        )
        return CheckResult(
            "fault",
            "skip" if self.stuck else "pass" if ok else "fail",
            msg,
            details={
                "phase": model.phase,
                "reason": model.reason,
                "restarts_used": model.restarts_used,
                "backoff_limit": model.backoff_limit,
                "restarted": sorted(f.restarted),
                "recreated": sorted(f.recreated),
                "deleted": dict(f.ended),
                "agent_restarts": agents,
                "sigterm_saves": saves,
                "saved_step": f.saved,
                "resumed_ranks": sorted(resumed),
                "fault_at_s": round(f.at, 1),
                "ended_at_s": round(self.ended_at, 1),
                "backoff_scale": scale,
            },
        )


def rehearse_faults(
    job: Mapping[str, Any],
    plans: Sequence[PodPlan],
    world: int,
    faults: Sequence[Fault],
    spec: RehearsalSpec,
    hold_dir: Path,
    audit_dir: Path | None = None,
) -> tuple[list[CheckResult], list[PodOutcome], list[dict[str, Any]]]:
    """Run the pods, inject `faults`, follow the model until the job ends or the spec's
    timeout (FaultRun): a row per fault, how each pod ended, the ranks' records."""
    run = FaultRun(job, plans, world, spec, hold_dir, audit_dir)
    pending = run.follow(faults)
    every = [*run.done, *run.pods.values()]
    outcomes = [p.finish() for p in every]
    lines = [r for p in every for r in p.lines()]
    checks = [run.row(f, lines) for f in run.fired]
    for f in pending:
        checks.append(
            CheckResult("fault", "fail", f"{f.label}: never fired (the job ended or --timeout passed first)")
        )
    return checks, outcomes, lines


def agent_restarts(lines: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """{pod: the --max-restarts torchrun spent in the pod's last container}: the k of its
    attempt_<k> log folders, which torch numbers max_restarts - remaining restarts (a
    restart for a failed worker spends one; one for a pod joining reuses the folder)."""
    last: dict[str, tuple[int, int]] = {}
    for r in lines:
        start, pod = r.get("_start"), r.get("_pod")
        if isinstance(start, tuple) and isinstance(pod, str):
            last[pod] = max(last.get(pod, start), start)
    return {pod: k for pod, (_, k) in sorted(last.items()) if k}


def audit_key(plans: Sequence[PodPlan]) -> str:
    """The key this rehearsal's audit layer signs its records with ("" without one)."""
    from .filesystem import AUDIT_KEY_ENV

    return next((p.env[AUDIT_KEY_ENV] for p in plans if AUDIT_KEY_ENV in p.env), "")


def first_saves(audit_dir: Path, key: str, world: int) -> dict[int, int]:
    """{rank: step} once the first start of the script has a whole checkpoint that every rank
    writing it is past (script_records.first_checkpoint); {} before."""
    return first_checkpoint(read_audit(audit_dir, key), world, now=time.time())


def _resumes(lines: Sequence[Mapping[str, Any]], saved: int) -> tuple[set[int], list[str]]:
    """The ranks that resumed from the step saved before the fault (or a later one), and what
    was wrong with the others' resumes: an older step, or other weights than those saved."""
    # a checkpoint row that skips (the profile's format cannot be written here, e.g. DCP
    # without numpy) still saved and reloaded a copy of that step: its weights count too
    digests = {
        int(r["saved_step"]): r.get("digest")
        for r in lines
        if r.get("check") == "checkpoint"
        and r.get("status") in ("pass", "skip")
        and r.get("saved_step") is not None
    }
    digests.update(
        {
            int(r["step"]): r.get("digest")
            for r in lines
            if r.get("event") == "sigterm-checkpoint" and r.get("saved")
        }
    )
    resumed: set[int] = set()
    older: set[int] = set()
    other: set[int] = set()
    for r in lines:
        if r.get("check") != "resume" or r.get("status") != "pass":
            continue
        rank, step = int(r["rank"]), int(r.get("resumed_from", -1))
        if step < saved:
            older.add(rank)
        elif digests.get(step) not in (None, r.get("digest")):
            other.add(rank)
        else:
            resumed.add(rank)
    wrong = []
    if older - resumed:
        wrong.append(f"rank(s) {', '.join(map(str, sorted(older - resumed)))} resumed an older step")
    if other:
        wrong.append(f"rank(s) {', '.join(map(str, sorted(other)))} resumed other weights than those saved")
    return resumed - other, wrong


def final_round(lines: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of the round the job ended with: from each pod, those of its last start of
    the workers (its last container, torchrun's last restart of its workers in it). By pod,
    not by rank: a new rendezvous round may give a pod other ranks than it had (an elastic
    job renumbers its nodes), so a rank's last records can come from a round that a fault cut
    short in another pod. Those rounds fail on purpose; the fault rows tell their story."""
    last: dict[Any, Any] = {}
    for r in lines:
        if "_start" in r:
            pod = r.get("_pod")
            last[pod] = max(last.get(pod, r["_start"]), r["_start"])
    return [r for r in lines if "_start" not in r or r["_start"] == last[r.get("_pod")]]
