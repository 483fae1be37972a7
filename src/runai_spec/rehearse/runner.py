"""Faults on demand under the operator model: kill pods, restart only their containers in place
after the kubelet's back-off (same pod, same env, same port), recreate, delete every pod on a
preemption, or stop every pod when the job ends, as `JobModel` says."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..facts.kubeflow import OPERATOR_VERSION
from ..facts.operator import DEFAULT_GRACE_S, Action, JobModel
from .checks import CheckResult
from .faults import Fault
from .pods import PodOutcome, PodPlan, Progress, _held, _Pod, _Ticker
from .restarts import STATIC_RENDEZVOUS_RISK, static_rendezvous


def _delete_all(pods: Sequence[_Pod]) -> dict[str, str]:
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
                ended[name] = (f"exited {128 - code if code < 0 else code} "
                               f"{time.monotonic() - start:.1f} s after SIGTERM")
            elif time.monotonic() - start >= grace:
                ended[name] = f"SIGKILL after the grace period of {grace:g} s"
                p.kill()
        time.sleep(0.05)
    for p in pods:
        p.reap(trees[p.plan.name])  # the container's other processes go with it
    return ended


def rehearse_faults(job: Mapping[str, Any], plans: Sequence[PodPlan], world: int,
                    faults: Sequence[Fault], timeout_s: float, backoff_scale: float,
                    hold_dir: Path, sigterm_save: bool = False, audit_dir: Path | None = None,
                    progress: Progress | None = None, operator_version: str = OPERATOR_VERSION
                    ) -> tuple[list[CheckResult], list[PodOutcome], list[dict[str, Any]]]:
    """Run the pods, inject `faults`, follow the model until the job ends or `timeout_s`.
    `sigterm_save`: the profile says its script saves on SIGTERM; a preemption then fails
    where a rank did not save within the grace period. `audit_dir`: the pods run the
    researcher's own script (`--own-script`), whose first checkpoint is the audit layer's
    first save record (the script cannot be held there: the fault lands right after it), and
    whose resume the `resume` row judges from the same records."""
    model = JobModel.of(job, backoff_scale=backoff_scale, version=operator_version)
    by_name = {p.name: p for p in plans}
    attempts = {p.name: 0 for p in plans}
    pods: dict[str, _Pod] = {p.name: _Pod(p, 0) for p in plans}
    done: list[_Pod] = []
    pending = list(faults)
    # per fault fired: the pods restarted in place, the pods recreated, when, the saved step
    fired: list[tuple[Fault, set[str], set[str], float, int, dict[str, str]]] = []
    start = time.monotonic()
    deadline = start + timeout_s
    seen_exit: set[int] = set()
    ticker = _Ticker(progress, len(plans), timeout_s)

    def apply(actions: Sequence[Action]) -> None:
        for a in actions:
            if a.kind in ("restart", "recreate") and a.pod is not None:
                attempts[a.pod] += 1
                old = pods[a.pod]
                if old.proc.poll() is None:
                    old.stop()
                seen_exit.add(id(old))
                done.append(old)
                pods[a.pod] = _Pod(by_name[a.pod], attempts[a.pod])
                for _, restarted, recreated, *_rest in fired:
                    (restarted if a.kind == "restart" else recreated).add(a.pod)
            elif a.kind == "delete-all":
                ended = _delete_all(list(pods.values()))
                seen_exit.update(id(p) for p in pods.values())
                fired[-1][5].update(ended)
            elif a.kind == "stop-all":
                for p in pods.values():
                    if p.proc.poll() is None:
                        p.stop()

    try:
        while time.monotonic() < deadline and model.phase == "Running":
            now = time.monotonic() - start
            for f in list(pending):
                held = (_held(hold_dir) if audit_dir is None
                        else first_saves(audit_dir, audit_key(plans)))
                ready = ((bool(held) if audit_dir is not None else len(held) >= world)
                         if f.at is None else now >= f.at)
                if not ready:
                    continue
                saved = min(held.values()) if held else 0
                if f.kind == "preempt":
                    pending.remove(f)
                    fired.append((f, set(), set(), now, saved, {}))
                    # SIGTERM reaches the ranks where they hold: a script that saves on SIGTERM
                    # saves that step; then the release, so that the new pods do not hold
                    actions = model.preempted(now)
                    apply(actions[:1])
                    (hold_dir / "release").touch()
                    apply(actions[1:])
                elif f.pod is not None and pods[f.pod].proc.poll() is None:
                    pods[f.pod].kill()
                    (hold_dir / "release").touch()
                    pending.remove(f)
                    fired.append((f, set(), set(), now, saved, {}))
            for name, p in list(pods.items()):
                code = p.proc.poll()
                if code is not None and id(p) not in seen_exit:
                    seen_exit.add(id(p))
                    # Kubernetes reports a signal as 128 + signal
                    apply(model.exited(name, 128 - code if code < 0 else code,
                                       time.monotonic() - start))
            apply(model.due(time.monotonic() - start))
            ticker.tick(list(pods.values()))
            time.sleep(0.05)
    finally:
        (hold_dir / "release").touch()
        for p in pods.values():
            if p.proc.poll() is None:
                p.timed_out = model.phase == "Running"
                p.stop()
    ended_at = time.monotonic() - start
    every = [*done, *pods.values()]
    outcomes = [p.finish() for p in every]
    lines = [r for p in every for r in p.lines()]
    limit = "none" if model.backoff_limit is None else str(model.backoff_limit)
    checks = []
    for f, restarted, recreated, at, saved, ended in fired:
        resumed, wrong = _resumes(lines, saved) if audit_dir is None else (set(range(world)), [])
        if model.phase == "Failed":
            verdict, ok = f"the operator would mark the job Failed: {model.reason}", False
        elif model.phase == "Succeeded" and (set(range(world)) - resumed or wrong):
            verdict, ok = "the job ended, but not every rank resumed the saved step", False
        elif model.phase == "Succeeded" and static_rendezvous(job) and f.kind == "kill":
            # recovered this time; in the cluster the same fault can use the whole budget
            verdict, ok = "recovered here, but " + STATIC_RENDEZVOUS_RISK.format(
                victim=f.pod or "a pod"), False
        elif model.phase == "Succeeded":
            verdict, ok = f"recovered (the job succeeded {ended_at - at:.1f} s after it)", True
        else:
            verdict, ok = f"still running at --timeout {timeout_s:g} s", False
        story = (f"ranks {', '.join(map(str, sorted(resumed)))} resumed the saved step {saved}"
                 if resumed else f"no rank resumed the saved step {saved}")
        if audit_dir is not None:
            story = "the resume row checks what your script loaded after it"
        if wrong:
            story += "; " + "; ".join(wrong)
        moved = f"pods restarted in place: {', '.join(sorted(restarted)) or 'none'}"
        if f.kind == "preempt" or recreated:
            moved = (f"every pod deleted ({'; '.join(f'{k}: {v}' for k, v in ended.items())}), "
                     f"pods recreated: {', '.join(sorted(recreated)) or 'none'}; " + moved)
        saves = sorted({int(r["rank"]) for r in lines if r.get("event") == "sigterm-checkpoint"
                        and r.get("saved")})
        if f.kind == "preempt":
            moved += ("; on SIGTERM rank(s) " + ", ".join(map(str, saves)) + " saved their last "
                      "step within the grace period" if saves else "; no rank saved on SIGTERM")
            unsaved = sorted(set(range(world)) - set(saves))
            if sigterm_save and unsaved and ok:
                verdict, ok = (f"rank(s) {', '.join(map(str, unsaved))} did not save on "
                               "SIGTERM within the grace period, as the profile says its "
                               "script does"), False
        msg = (f"{f.label}: {moved}; restarts used {model.restarts_used}/{limit} (back-off "
               f"scale {backoff_scale:g}); {verdict}; {story}")
        checks.append(CheckResult("fault", "pass" if ok else "fail", msg,
                                  details={"phase": model.phase, "reason": model.reason,
                                           "restarts_used": model.restarts_used,
                                           "backoff_limit": model.backoff_limit,
                                           "restarted": sorted(restarted),
                                           "recreated": sorted(recreated),
                                           "deleted": dict(ended),
                                           "sigterm_saves": saves,
                                           "saved_step": saved,
                                           "resumed_ranks": sorted(resumed),
                                           "fault_at_s": round(at, 1),
                                           "ended_at_s": round(ended_at, 1),
                                           "backoff_scale": backoff_scale}))
    for f in pending:
        checks.append(CheckResult("fault", "fail", f"{f.label}: never fired (the job ended or "
                                  "--timeout passed first)"))
    return checks, outcomes, lines


def audit_key(plans: Sequence[PodPlan]) -> str:
    """The key this rehearsal's audit layer signs its records with ("" without one)."""
    from .filesystem import AUDIT_KEY_ENV

    return next((p.env[AUDIT_KEY_ENV] for p in plans if AUDIT_KEY_ENV in p.env), "")


def first_saves(audit_dir: Path, key: str) -> dict[int, int]:
    """{rank: step} of the checkpoints the first start of each rank's script saved, from the
    audit layer's records (step 0 where the checkpoint says none)."""
    from .script_checks import read_audit

    out: dict[int, int] = {}
    for r in read_audit(audit_dir, key):
        if r.get("event") == "save" and not r.get("failed") and r.get("rank") is not None \
                and not r.get("attempt") and not r.get("restart"):
            out.setdefault(int(r["rank"]), int(r.get("step") or 0))
    return out


def _resumes(lines: Sequence[Mapping[str, Any]], saved: int) -> tuple[set[int], list[str]]:
    """The ranks that resumed from the step saved before the fault (or a later one), and what
    was wrong with the others' resumes: an older step, or other weights than those saved."""
    # a checkpoint row that skips (the profile's format cannot be written here, e.g. DCP
    # without numpy) still saved and reloaded a copy of that step: its weights count too
    digests = {int(r["saved_step"]): r.get("digest") for r in lines
               if r.get("check") == "checkpoint" and r.get("status") in ("pass", "skip")
               and r.get("saved_step") is not None}
    digests.update({int(r["step"]): r.get("digest") for r in lines
                    if r.get("event") == "sigterm-checkpoint" and r.get("saved")})
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
        wrong.append(f"rank(s) {', '.join(map(str, sorted(older - resumed)))} resumed an older "
                     "step")
    if other:
        wrong.append(f"rank(s) {', '.join(map(str, sorted(other)))} resumed other weights than "
                     "those saved")
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
