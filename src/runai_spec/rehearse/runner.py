"""Faults on demand under the operator model: kill pods, restart only their containers in place
after the kubelet's back-off (same pod, same env, same port), recreate, or stop every pod when
the job ends, as `JobModel` says."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .checks import CheckResult
from .faults import Fault
from .operator import Action, JobModel
from .pods import PodOutcome, PodPlan, _held, _Pod
from .restarts import STATIC_RENDEZVOUS_RISK, static_rendezvous


def rehearse_faults(job: Mapping[str, Any], plans: Sequence[PodPlan], world: int,
                    faults: Sequence[Fault], timeout_s: float, backoff_scale: float,
                    hold_dir: Path) -> tuple[list[CheckResult], list[PodOutcome], list[
                        dict[str, Any]]]:
    """Run the pods, inject `faults`, follow the model until the job ends or `timeout_s`."""
    model = JobModel.of(job, backoff_scale=backoff_scale)
    by_name = {p.name: p for p in plans}
    attempts = {p.name: 0 for p in plans}
    pods: dict[str, _Pod] = {p.name: _Pod(p, 0) for p in plans}
    done: list[_Pod] = []
    pending = list(faults)
    fired: list[tuple[Fault, set[str]]] = []
    start = time.monotonic()
    deadline = start + timeout_s
    seen_exit: set[int] = set()

    def apply(actions: Sequence[Action]) -> None:
        for a in actions:
            if a.kind in ("restart", "recreate") and a.pod is not None:
                attempts[a.pod] += 1
                old = pods[a.pod]
                if old.proc.poll() is None:
                    old.stop()
                done.append(old)
                pods[a.pod] = _Pod(by_name[a.pod], attempts[a.pod])
                for _, names in fired:
                    names.add(a.pod)
            elif a.kind in ("stop-all", "delete-all"):
                for p in pods.values():
                    if p.proc.poll() is None:
                        p.stop()

    try:
        while time.monotonic() < deadline and model.phase == "Running":
            now = time.monotonic() - start
            for f in list(pending):
                ready = (len(_held(hold_dir)) >= world if f.at is None else now >= f.at)
                if ready and f.pod is not None and pods[f.pod].proc.poll() is None:
                    pods[f.pod].kill()
                    (hold_dir / "release").touch()
                    pending.remove(f)
                    fired.append((f, set()))
            for name, p in list(pods.items()):
                code = p.proc.poll()
                if code is not None and id(p) not in seen_exit:
                    seen_exit.add(id(p))
                    # Kubernetes reports a signal as 128 + signal
                    apply(model.exited(name, 128 - code if code < 0 else code,
                                       time.monotonic() - start))
            apply(model.due(time.monotonic() - start))
            time.sleep(0.05)
    finally:
        (hold_dir / "release").touch()
        for p in pods.values():
            if p.proc.poll() is None:
                p.timed_out = model.phase == "Running"
                p.stop()
    every = [*done, *pods.values()]
    outcomes = [p.finish() for p in every]
    lines = [r for p in every for r in p.lines()]
    limit = "none" if model.backoff_limit is None else str(model.backoff_limit)
    resumes = {int(r["rank"]) for r in lines
               if r.get("check") == "resume" and r.get("status") == "pass"}
    checks = []
    for f, restarted in fired:
        if model.phase == "Failed":
            verdict, ok = f"the operator would mark the job Failed: {model.reason}", False
        elif model.phase == "Succeeded" and set(range(world)) - resumes:
            verdict, ok = "the job ended, but not every rank resumed the saved step", False
        elif model.phase == "Succeeded" and static_rendezvous(job):
            # recovered this time; in the cluster the same fault can use the whole budget
            verdict, ok = "recovered here, but " + STATIC_RENDEZVOUS_RISK.format(
                victim=f.pod or "a pod"), False
        elif model.phase == "Succeeded":
            verdict, ok = "recovered", True
        else:
            verdict, ok = f"still running at --timeout {timeout_s:g} s", False
        resumed = (f"ranks {', '.join(map(str, sorted(resumes)))} resumed the saved step"
                   if resumes else "no rank resumed the saved step")
        msg = (f"{f.label}: pods restarted: {', '.join(sorted(restarted)) or 'none'}; restarts "
               f"used {model.restarts_used}/{limit} (back-off scale {backoff_scale:g}); "
               f"{verdict}; {resumed}")
        checks.append(CheckResult("fault", "pass" if ok else "fail", msg,
                                  details={"phase": model.phase, "reason": model.reason,
                                           "restarts_used": model.restarts_used,
                                           "backoff_limit": model.backoff_limit,
                                           "restarted": sorted(restarted),
                                           "resumed_ranks": sorted(resumes),
                                           "backoff_scale": backoff_scale}))
    for f in pending:
        checks.append(CheckResult("fault", "fail", f"{f.label}: never fired (the job ended or "
                                  "--timeout passed first)"))
    return checks, outcomes, lines
