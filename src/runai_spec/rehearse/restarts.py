"""The restart: kill one pod after the first checkpoint, restart the job as the kubelet and the
operator would, and check the resume."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..checklist import PreflightSettings
from ..errors import InputError
from ..launcher import has_flag, split_command
from .checks import CheckResult, aggregate, exit_status
from .job import container_of, replicas_of
from .pods import Attempt, PodOutcome, PodPlan, free_port, run_attempt

RESTART_OWN_SCRIPT = ("--restart-after-checkpoint needs the preflight's checkpoint; it does "
                      "not combine with --own-script")


def rehearse_restart(job: Mapping[str, Any], plans: Sequence[PodPlan], world: int,
                      settings: PreflightSettings, timeout_s: float, skip: Sequence[str],
                      hold_dir: Path) -> tuple[list[CheckResult], list[PodOutcome]]:
    """Kill the last pod right after the first checkpoint, let the others fail as they would,
    restart every pod as the operator would, and check the resume.

    In the cluster the killed pod's peers find out at their next collective and their
    torchrun exits non-zero (a fixed-size job has no torchrun restarts); under `OnFailure`
    each failed pod's container is restarted with the same command and environment. The
    pods come back at different moments there; here they all start again once every pod of
    the first run has ended, which is where the cluster settles."""
    live = [p for p in plans if p.name not in skip]
    victim = live[-1].name if live else None
    # NCCL may only notice a dead peer at its collective timeout: give the survivors that long
    settle_s = settings.collective_timeout_s + 30.0
    first = run_attempt(plans, 0, timeout_s, skip=skip, victim=victim, hold_dir=hold_dir,
                         world=world, settle_s=settle_s)
    if first.killed is None:
        checks = aggregate(first.lines, world, first.outcomes, timeout_s, False, attempt=0)
        return checks + [_no_kill(first, world, victim)], list(first.outcomes)
    before, after = _split_at_hold(first.lines)
    # the first run's checks up to the kill; what the kill cut short is the restart's story
    shown = [c for c in aggregate(before, world, first.outcomes, timeout_s, False, attempt=0)
             if c.check != "pods" and c.status != "not run"]
    # a fresh port: the first run's store port may still be in TIME_WAIT here
    second = run_attempt(_with_port(plans, free_port()), 1, timeout_s, skip=skip)
    checks = shown + aggregate(second.lines, world, second.outcomes, timeout_s, False,
                               attempt=1)
    replica_types = {p.name: p.replica_type for p in plans}
    checks.append(_restart_check(job, replica_types, first, before, after, second, world,
                                 settle_s))
    return checks, [*first.outcomes, *second.outcomes]


def _split_at_hold(lines: Sequence[Mapping[str, Any]]
                   ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Each rank's records before it held at the first checkpoint, and those after."""
    before: list[Mapping[str, Any]] = []
    after: list[Mapping[str, Any]] = []
    held: set[Any] = set()
    for rec in lines:
        if rec.get("event") == "holding":
            held.add(rec.get("rank"))
        elif rec.get("rank") in held:
            after.append(rec)
        else:
            before.append(rec)
    return before, after


def _with_port(plans: Sequence[PodPlan], port: int) -> list[PodPlan]:
    """The same pods on a fresh port."""
    out = []
    for p in plans:
        env = dict(p.env)
        for key in ("MASTER_PORT", "PET_MASTER_PORT"):
            if key in env:
                env[key] = str(port)
        if "PET_RDZV_ENDPOINT" in env:
            env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port}"
        out.append(PodPlan(p.name, p.replica_type, p.index, p.rank, p.argv, env, p.cwd,
                           p.log_dir))
    return out


def restart_settings(settings: PreflightSettings) -> PreflightSettings:
    """A first checkpoint early, and steps enough after it for a second one: the restarted
    run then trains, writes, reloads and reports metrics like the first."""
    every = min(settings.checkpoint_every, 2)
    steps = max(settings.steps, 2 * every)
    return PreflightSettings(**{**settings.__dict__, "steps": steps, "checkpoint_every": every})


def _ranks(items: Iterable[int]) -> str:
    words = [str(i) for i in sorted(items)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _no_kill(first: Attempt, world: int, victim: str | None) -> CheckResult:
    held = sorted(first.held)
    if victim is None:
        why = "no pod was started"
    elif not held:
        why = f"no rank reached its first checkpoint, so {victim} was not killed"
    elif len(held) < world:
        missing = [r for r in range(world) if r not in first.held]
        why = (f"rank(s) {_ranks(missing)} never reached the first checkpoint (rank(s) "
               f"{_ranks(held)} did), so {victim} was not killed")
    else:
        why = f"{victim} ended before it could be killed"
    return CheckResult("restart", "fail", f"{why}: the restart was not exercised",
                       details={"held": {str(r): s for r, s in first.held.items()}})


def operator_verdict(job: Mapping[str, Any], replica_types: Mapping[str, str],
                      failed: Sequence[PodOutcome]) -> tuple[str | None, str]:
    """(why the operator would not restart these failed pods, or None; what it would do)."""
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    # the operator's defaulting webhook sets OnFailure where the manifest says nothing
    policy = {o.name: str((replicas.get(replica_types.get(o.name, "")) or {}).get(
        "restartPolicy") or "OnFailure") for o in failed}
    never = [o.name for o in failed if policy[o.name] == "Never"]
    if never:
        return (f"restartPolicy Never on {', '.join(never)}: the operator marks the job Failed "
                "instead of restarting it"), "no restart"
    # ExitCode: exit codes up to 127 are permanent, from 128 (signals) retryable
    permanent = [f"{o.name} (exit {exit_status(o.exit_code)})" for o in failed
                 if policy[o.name] == "ExitCode" and (exit_status(o.exit_code) or 0) < 128]
    if permanent:
        return (f"restartPolicy ExitCode treats {', '.join(permanent)} as a permanent error: "
                "the operator marks the job Failed instead of restarting it"), "no restart"
    counted = [o for o in failed if policy[o.name] in ("OnFailure", "Always")]
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    used = len(counted)
    what = ", ".join(sorted({policy[o.name] for o in failed}))
    note = f"{what} restarts {'the pod' if len(failed) == 1 else f'all {len(failed)} pods'}"
    if limit is None:
        return None, note
    note += f" ({used} restart(s), backoffLimit {limit})"
    if (limit == 0 and used > 0) or (limit > 0 and used >= limit):
        return (f"{used} container restart(s) reach the backoffLimit of {limit}: the operator "
                "marks the job Failed after losing one pod"), note
    return None, note


# What this rehearsal cannot reproduce (issue 11): the kubelet restarts a failed container in
# place, at its own moment, while the other pods may still run (training-operator v1.9
# pkg/core/pod.go copies OnFailure to the pod). torchrun's static rendezvous
# (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py, torch 2.13) never admits a
# node again, so a restarted worker can join the still-running master's old store and fail
# again; one fault can use the whole backoffLimit (kubeflow/trainer#2000). Measured here with
# a kubelet model on CPU (gloo, 2 pods x 2 processes, backoffLimit 3): worker-0 killed while
# rank 0 was busy past the first back-off used 3 restarts and the job was marked Failed.
STATIC_RENDEZVOUS_RISK = (
    "the job uses torchrun's static rendezvous, which never re-admits a restarted pod: in the "
    "cluster the kubelet restarts {victim} in place while the other pods may still hold the "
    "old store, so one node fault can use the whole backoffLimit and fail the job (measured "
    "with a kubelet model on CPU: 3 restarts of backoffLimit 3); whether it recovers depends "
    "on timing. After a node fault resubmit the job, which resumes from the checkpoint")
STATIC_RENDEZVOUS = (STATIC_RENDEZVOUS_RISK + ". This rehearsal restarts every pod together, "
                     "which the cluster never does, so its resume proves the checkpoint only")


def static_rendezvous(job: Mapping[str, Any]) -> bool:
    """A job of several pods whose torchrun finds its peers by the static rendezvous (no
    --rdzv-backend, no elasticPolicy): the operator's PET_MASTER_ADDR/PORT only."""
    spec = job.get("spec") or {}
    replicas = replicas_of(job)
    if spec.get("elasticPolicy") or sum(count for _, count, _ in replicas) < 2:
        return False
    rtype, _, replica = replicas[0]
    try:
        launcher = split_command(container_of(replica, rtype).get("command") or [])
    except InputError:
        return False
    return launcher.kind == "torchrun" and not has_flag(
        launcher.head, "--rdzv-backend", "--rdzv_backend", "--standalone")


def _restart_check(job: Mapping[str, Any], replica_types: Mapping[str, str], first: Attempt,
                   before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]],
                   second: Attempt, world: int, settle_s: float) -> CheckResult:
    victim = first.killed or ""
    step = min(first.held.values())
    victim_ranks = sorted({int(r["rank"]) for r in before
                           if r.get("_pod") == victim and "rank" in r})
    problems: list[str] = []

    # the survivors: their torchrun must give up on its own once a peer is gone
    survivors = [o for o in first.outcomes if o.name != victim
                 and not (o.exit_code is None and not o.timed_out)]
    reasons = {o.name: next((f"rank {r['rank']}: {r['check']}: {r.get('message', '')}"
                             for r in after if r.get("_pod") == o.name
                             and r.get("status") == "fail"), None) for o in survivors}
    hung = [o.name for o in survivors if o.timed_out]
    clean = [o.name for o in survivors if not o.timed_out and o.exit_code == 0]
    if hung:
        problems.append(f"{', '.join(hung)} still ran {settle_s:g} s after {victim} died (a "
                        "hang: in the cluster it holds its GPUs until a timeout fires)")
    if clean:
        problems.append(f"{', '.join(clean)} exited 0 although {victim} was gone")
    gave_up = [o for o in survivors if not o.timed_out and o.exit_code != 0]
    codes = sorted({str(exit_status(o.exit_code)) for o in gave_up})
    peers = (f"{', '.join(o.name for o in gave_up)} then exited {'/'.join(codes)} on "
             f"{'its' if len(gave_up) == 1 else 'their'} own" if gave_up
             else "no other pod was running")

    failed = [o for o in first.outcomes if o.exit_code not in (0, None) or o.killed]
    refusal, operator = operator_verdict(job, replica_types, failed)
    if refusal:
        problems.append(refusal)
    if static_rendezvous(job):
        problems.append(STATIC_RENDEZVOUS.format(victim=victim))

    # the resume: every rank, from the checkpoint written before the kill, with its weights
    saved = next((r for r in before if r.get("check") == "checkpoint"
                  and r.get("status") in ("pass", "skip")
                  and r.get("rank") == 0), None)
    digest = saved.get("digest") if saved else None
    resumes = {int(r["rank"]): r for r in second.lines if r.get("check") == "resume"}
    resumed = {r: rec for r, rec in resumes.items() if rec.get("status") == "pass"}
    fresh = sorted(r for r, rec in resumes.items() if rec.get("status") == "skip")
    broken = sorted(r for r, rec in resumes.items() if rec.get("status") == "fail")
    silent = [r for r in range(world) if r not in resumes]
    wrong_step = sorted(r for r, rec in resumed.items()
                        if int(rec.get("resumed_from", -1)) != step)
    wrong_weights = sorted(r for r, rec in resumed.items()
                           if r not in wrong_step and digest and rec.get("digest") != digest)
    lead = f"the restarted job did not resume from the checkpoint of step {step}"
    if fresh:
        problems.append(f"{lead}: rank(s) {_ranks(fresh)} started over at step 1 "
                        f"({resumes[fresh[0]].get('message', '')})")
    if broken:
        problems.append(f"{lead}: rank(s) {_ranks(broken)} could not load it "
                        f"({resumes[broken[0]].get('message', '')})")
    if wrong_step:
        found = sorted({int(resumed[r].get("resumed_from", -1)) for r in wrong_step})
        problems.append(f"{lead}: rank(s) {_ranks(wrong_step)} resumed from step(s) "
                        f"{_ranks(found)}")
    if wrong_weights:
        problems.append(f"rank(s) {_ranks(wrong_weights)} resumed other weights than those "
                        f"saved at step {step}")
    if silent:
        problems.append(f"rank(s) {_ranks(silent)} of the restarted job never reported a "
                        "resume")

    details = {
        "killed": victim, "killed_ranks": victim_ranks, "first_checkpoint_step": step,
        "survivors": {o.name: {"exit_code": exit_status(o.exit_code),
                               "timed_out": o.timed_out, "first_failure": reasons[o.name]}
                      for o in survivors},
        "operator": operator,
        "resumed_from": {str(r): rec.get("resumed_from") for r, rec in sorted(resumes.items())},
        "saved_digest": digest,
        "resumed_digests": sorted({str(rec.get("digest")) for rec in resumed.values()}),
    }
    head = (f"killed {victim} (rank(s) {_ranks(victim_ranks) if victim_ranks else '?'}) right "
            f"after the checkpoint of step {step}")
    if problems:
        return CheckResult("restart", "fail", f"{head}; " + "; ".join(problems),
                           tuple(sorted(resumes)), tuple(sorted(set(fresh + broken + silent
                                                                    + wrong_step
                                                                    + wrong_weights))),
                           details)
    return CheckResult("restart", "pass", f"{head}; {peers}; {operator}; all {world} ranks "
                       f"resumed the step-{step} weights and went on at step {step + 1}",
                       tuple(sorted(resumed)), (), details)
