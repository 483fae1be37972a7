"""`runai-spec rehearse` of an MPIJob: its launcher's mpirun run here, with a PyTorchJob's checks.

mpirun over rehearse/mpi.py's hostfile, with the preflight checklist (or, --own-script, the
profile's program) as the ranks' program, and the launcher Job's back-off after a lost rank."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..facts import mpi
from ..pipeline.checklist import PreflightSettings, parse_lines, preflight_source
from ..pipeline.smoke import CHECKPOINT_SUBDIR
from ..plan.launcher.mpi import FORWARD_FLAG, program_launcher
from ..plan.volumes import CHECKPOINT
from .argv import CHECKPOINTS_HERE, install_audit_layer
from .bottleneck import bottleneck_row
from .checks import CheckResult, RehearseResult, aggregate, cpu_bandwidth, result_dict
from .faults import AT_CHECKPOINT
from .filesystem import AUDIT_ENV, AUDIT_KEY_ENV
from .logs_folder import check_logs_dir, make_logs_dir
from .mpi import ATTEMPT_MARK, JobParts, Kill, MpiRehearsal, job_parts, rehearse_mpi
from .processes import PodOutcome
from .restarts import restart_settings
from .runner import first_saves
from .script_checks import foreign_records, foreign_row, read_audit, script_checks
from .script_records import ScriptRun
from .spec import RehearsalSpec, check_timeout

ATTEMPT_ENV = "RUNAI_SPEC_ATTEMPT"  # which start of the script a record is from (the audit layer)
HOLD_DIR = "restart"  # where the preflight's ranks wait after the first checkpoint (a fault run)


def refuse_unmodelled(spec: RehearsalSpec) -> None:
    """What the MPI rehearsal does not model, refused before anything is written, with why."""
    why = {
        "--preempt": (spec.preempt is not None, "a preemption of an MPIJob"),
        "--evict": (bool(spec.evicts), "KAI's eviction of one pod (an evicted worker fails an MPIJob)"),
        "--stale-gang": (bool(spec.stale_gang), "a stale gang's eviction"),
        "--scaling": (bool(spec.scaling), "the scaling measurement"),
        "--network": (spec.network == "netns", "network namespaces per pod"),
    }
    for option, (asked, what) in why.items():
        if asked:
            raise InputError(
                f"the MPIJob rehearsal does not model {what}",
                field=option,
                hint="an MPIJob is rehearsed on loopback with --kill POD@checkpoint or "
                "--restart-after-checkpoint (docs/mpi.md)",
            )


def pod_names(parts: JobParts) -> list[str]:
    """The pods in the hostfile's order (the launcher first where it is a worker), by the short
    names --kill takes."""
    return (["launcher"] if parts.launcher_as_worker else []) + [f"worker-{i}" for i in range(parts.workers)]


def kill_target(spec: RehearsalSpec, parts: JobParts, slots: int) -> tuple[int, str] | None:
    """(the MPI rank to kill, when: `checkpoint` or seconds) for --kill POD[@WHEN] or
    --restart-after-checkpoint (the first worker: a lost worker rank ends mpirun; the launcher's
    own loss is its Job's restart alike). The pod's first rank stands for the pod."""
    pods = pod_names(parts)
    asked = list(spec.kills) or (
        ["worker-0@checkpoint" if parts.workers else f"{pods[0]}@checkpoint"]
        if spec.restart_after_checkpoint
        else []
    )
    if not asked:
        return None
    if len(asked) > 1:
        raise InputError(
            "the MPIJob rehearsal kills one pod (MPI ends the job at the first lost rank)", field="--kill"
        )
    pod, _, when = asked[0].partition("@")
    if pod not in pods:
        raise InputError(f"no pod {pod!r} in this MPIJob", field="--kill", hint=f"one of {', '.join(pods)}")
    when = when or AT_CHECKPOINT
    if when != AT_CHECKPOINT:
        try:
            float(when)
        except ValueError:
            raise InputError(
                f"--kill {asked[0]}: after @ give checkpoint or SECONDS", field="--kill"
            ) from None
    return pods.index(pod) * slots, when


def scaled_job(job: Mapping[str, Any], slots: int, argv: Sequence[str]) -> dict[str, Any]:
    """JOB with SLOTS per pod (--procs-per-pod) and ARGV as its launcher's command."""
    out = copy.deepcopy(dict(job))
    out["spec"]["slotsPerWorker"] = slots
    (container,) = out["spec"]["mpiReplicaSpecs"][mpi.LAUNCHER]["template"]["spec"]["containers"]
    container["command"] = list(argv)
    return out


def with_world(argv: Sequence[str], world: int) -> list[str]:
    """The launcher's mpirun with `-np WORLD`."""
    out = list(argv)
    out[out.index(mpi.NP_FLAG) + 1] = str(world)
    return out


def rehearse_mpijob(job: Mapping[str, Any], spec: RehearsalSpec) -> RehearseResult:
    """Rehearse the MPIJob JOB as SPEC asks (the CLI's options that apply to it)."""
    check_timeout(spec.timeout_s)
    refuse_unmodelled(spec)
    if spec.plan is None:
        raise InputError("the MPIJob rehearsal needs the workload's plan (rehearse a profile)")
    if spec.procs_per_pod is not None and spec.procs_per_pod < 1:
        raise InputError("--procs-per-pod must be at least 1", field="--procs-per-pod")
    parts = job_parts(job)
    slots = spec.procs_per_pod or parts.slots
    pods = len(pod_names(parts))
    world = slots * pods
    target = kill_target(spec, parts, slots)
    check_logs_dir(spec.logs_dir)
    root = make_logs_dir(spec.logs_dir)
    settings = restart_settings(spec.settings) if target else spec.settings
    # gloo over loopback says nothing of the cluster's fabric: measured, not judged (a row says so)
    settings = dataclasses.replace(settings, min_busbw_gbps=None)
    hold = root / HOLD_DIR
    plan = spec.plan
    audit = AuditSetup.make(root) if spec.own_script else None
    if audit is not None:
        argv = audit.forwarded([*plan.launcher, *plan.entrypoint, *spec.script_args])
    else:
        script = root / "preflight" / "preflight.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(preflight_source(), encoding="utf-8")
        mount = plan.mount_of(CHECKPOINT)
        argv = [
            *program_launcher(plan.launcher),
            str(script),
            *settings.args(
                world_size=world,
                checkpoint_dir=f"{mount}/{CHECKPOINT_SUBDIR}" if mount else str(root / CHECKPOINTS_HERE),
                metrics_file=str(root / "metrics.jsonl"),
                hold_dir=str(hold) if target and target[1] == AT_CHECKPOINT else None,
                plan_world_size=plan.world_size,
            ),
        ]
    runnable = scaled_job(job, slots, with_world(argv, world))
    done = rehearse_mpi(
        runnable,
        root,
        kill=_kill(target, hold, audit, world),
        cwd=spec.workdir or Path.cwd(),
        timeout=spec.timeout_s,
        extra_env=audit.env if audit is not None else None,
        attempt_env=ATTEMPT_ENV if audit is not None else None,
    )
    rows = _attempt_rows(done, world, spec, root, target)
    if audit is not None:
        rows = [*audit.rows(done, world, spec, settings, _checkpoint_here(parts, plan, root)), *rows]
    checks = [_setup_row(parts, slots, world, done), *cpu_bandwidth(rows, spec.settings.min_busbw_gbps, 0)]
    ok = all(c.ok for c in checks if c.status != "not run")
    outcomes = tuple(_outcome(a, i, root) for i, a in enumerate(done.attempts))
    result = RehearseResult(
        ok, tuple(checks), outcomes, root, world, "gloo", spec.own_script, root / "launcher.log"
    )
    (root / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result


def _kill(target: tuple[int, str] | None, hold: Path, audit: AuditSetup | None, world: int) -> Kill | None:
    """The kill TARGET asks for, and when: SECONDS in; after the first checkpoint, the
    preflight's rank holding there, or (--own-script) the first whole checkpoint in the audit
    layer's records, as for a PyTorchJob (runner.first_saves)."""
    if target is None:
        return None
    rank, when = target
    started = time.monotonic()
    moment: Callable[[], bool]
    if when != AT_CHECKPOINT:
        moment = lambda: time.monotonic() - started >= float(when)  # noqa: E731
    elif audit is not None:
        moment = lambda: bool(first_saves(audit.root / "audit", audit.key, world))  # noqa: E731
    else:
        moment = (hold / f"holding.{rank}").exists
    return Kill(rank, moment, lambda: _release(hold))


def _outcome(attempt: Any, index: int, root: Path) -> PodOutcome:
    """The launcher pod of one attempt (mpirun's exit is the pod's)."""
    return PodOutcome(
        "launcher",
        0,
        attempt.exit_code,
        attempt.timed_out,
        attempt.killed_rank is not None,
        root / "launcher.log",
        index,
    )


def _setup_row(parts: JobParts, slots: int, world: int, done: MpiRehearsal) -> CheckResult:
    pods = pod_names(parts)
    return CheckResult(
        "network",
        "note",
        f"mpirun -np {world} over the operator's hostfile ({len(pods)} pods x {slots} slots: "
        f"{', '.join(pods)}); its rsh agent starts each pod's ranks on this machine with a clean "
        "env, as the pod's sshd would (only what -x forwards reaches them); ranks talk over "
        "loopback TCP, MASTER_ADDR 127.0.0.1",
        details={"hostfile": done.hostfile},
    )


def _attempt_rows(
    done: MpiRehearsal, world: int, spec: RehearsalSpec, root: Path, target: tuple[int, str] | None
) -> list[CheckResult]:
    """Each attempt's checks (the preflight's, or the pods' for --own-script), and the launcher
    Job's back-off between them."""
    texts = done.output.split(ATTEMPT_MARK)[1:]
    rows: list[CheckResult] = []
    several = len(done.attempts) > 1 or target is not None
    for i, (attempt, text) in enumerate(zip(done.attempts, texts, strict=False)):
        outcome = _outcome(attempt, i, root)
        lines = parse_lines(text)
        checks = aggregate(lines, world, [outcome], spec.timeout_s, spec.own_script, i if several else None)
        if attempt.killed_rank is not None:  # cut short on purpose: the kill is its one row
            checks = [
                CheckResult(
                    "pods",
                    "pass",
                    f"mpirun exited {attempt.exit_code} once rank {attempt.killed_rank} was "
                    f"SIGKILLed {_moment(target)}, as asked: see {outcome.log}",
                    attempt=i,
                )
            ]
        rows += checks
    if target is not None:
        rows.append(_backoff_row(done, target))
    return rows


def _backoff_row(done: MpiRehearsal, target: tuple[int, str]) -> CheckResult:
    """The launcher Job's back-off: the lost rank ended mpirun, and a new launcher pod ran it
    again (at most backoffLimit times)."""
    first = done.attempts[0]
    if first.killed_rank is None:
        return CheckResult(
            "restart", "fail", f"rank {target[0]} was never killed: the job ended before its moment came"
        )
    if len(done.attempts) < 2:
        return CheckResult(
            "restart",
            "fail",
            f"mpirun exited {first.exit_code} after rank {first.killed_rank} was killed; "
            "no launcher restart followed (backoffLimit 0?)",
        )
    last = done.attempts[-1]
    status = "pass" if last.exit_code == 0 else "fail"
    return CheckResult(
        "restart",
        status,
        f"rank {first.killed_rank} SIGKILLed {_moment(target)}: mpirun exited {first.exit_code} (MPI has no "
        f"re-rendezvous); the launcher Job's back-off ran it {len(done.attempts) - 1} more time(s) "
        f"(backoffLimit {done.backoff_limit}), the last exiting {last.exit_code}",
        details={"attempts": len(done.attempts), "backoff_limit": done.backoff_limit},
    )


def _moment(target: tuple[int, str] | None) -> str:
    when = target[1] if target else ""
    return "after the first checkpoint" if when == AT_CHECKPOINT else f"{when} s in"


def _release(hold: Path) -> None:
    """The preflight's ranks wait no more after the first checkpoint (the launcher's next pod)."""
    if hold.is_dir():
        (hold / "release").write_text("", encoding="utf-8")


@dataclass(frozen=True)
class AuditSetup:
    """--own-script: the audit layer on the ranks' path, its folder and this rehearsal's key,
    forwarded by mpirun with -x (a rank started through the agent sees only those)."""

    root: Path
    key: str

    @classmethod
    def make(cls, root: Path) -> AuditSetup:
        install_audit_layer(root)
        return cls(root, secrets.token_hex(32))

    @property
    def env(self) -> dict[str, str]:
        path = [str(self.root / "audit-layer"), *filter(None, [os.environ.get("PYTHONPATH")])]
        return {
            AUDIT_ENV: str(self.root / "audit"),
            AUDIT_KEY_ENV: self.key,
            "PYTHONPATH": os.pathsep.join(path),
        }

    def forwarded(self, argv: Sequence[str]) -> list[str]:
        """ARGV (mpirun -np N ...) with `-x NAME` for the audit layer's variables after -np N."""
        at = list(argv).index(mpi.NP_FLAG) + 2
        extra = [a for name in (*self.env, ATTEMPT_ENV) for a in (FORWARD_FLAG, name)]
        return [*argv[:at], *extra, *argv[at:]]

    def rows(
        self, done: MpiRehearsal, world: int, spec: RehearsalSpec, settings: PreflightSettings, here: str
    ) -> list[CheckResult]:
        """The guide's checklist on the script from every rank's records (as for a PyTorchJob)."""
        assert spec.plan is not None
        run = ScriptRun(
            world=world,
            plan_world=spec.plan.world_size,
            checkpoint_dir=here,
            gpus=0,
            restarted=len(done.attempts) > 1 or any(a.killed_rank is not None for a in done.attempts),
            timed_out=any(a.timed_out for a in done.attempts),
            checkpoint_format=settings.checkpoint_format,
            second_network=spec.plan.attaches_network,
        )
        records = read_audit(self.root / "audit", self.key)
        forged = foreign_row(foreign_records(self.root / "audit", self.key))
        return [
            *script_checks(records, run, settings),
            bottleneck_row(records, 0),
            *([forged] if forged else []),
        ]


def _checkpoint_here(parts: JobParts, plan: Any, root: Path) -> str:
    """The checkpoint volume's folder here, as the script sees it (rehearse_mpi's mount mapping)."""
    mount = plan.mount_of(CHECKPOINT)
    volume = parts.mounts.get(mount) if mount else None
    return str(root / "volumes" / volume) if volume else str(root / CHECKPOINTS_HERE)
