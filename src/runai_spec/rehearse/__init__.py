"""Rehearse a rendered PyTorchJob on this machine: one local process per pod, operator env."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..facts.kubeflow import short_pod_name
from ..facts.torchrun import Launcher, set_nproc, split_command
from ..pipeline.checklist import (
    PREFLIGHT_LINE,
    PreflightSettings,
    parse_lines,
    preflight_settings,
    preflight_source,
)
from ..plan.launcher.mpi import MPIJOB
from .argv import CHECKPOINTS_HERE, MULTICAST_OFF, PodPlan, free_port, plan_pods, probe_gpus, write_plan
from .bottleneck import bottleneck_row
from .checks import (
    CHECK_ORDER,
    CheckResult,
    RehearseResult,
    aggregate,
    command_note,
    cpu_bandwidth,
    netns_note,
    network_note,
    pid1_note,
    result_dict,
)
from .faults import Fault, faults_of
from .filesystem import pvc_paths
from .job import (
    DEFAULT_PORT,
    PORT_NAME,
    checkpoint_mount,
    container_of,
    find_job,
    nproc_of,
    operator_env,
    plan_world_size,
    replicas_of,
)
from .logs_folder import check_logs_dir, make_logs_dir
from .mpi_run import rehearse_mpijob
from .network import NETWORK_DIR, NetPlan, auto_on_gpu, plan_network, pod_network, resolve_mode
from .processes import PodOutcome, run_attempt
from .restarts import operator_verdict, restart_settings
from .runner import audit_key, final_round, rehearse_faults
from .script_checks import foreign_records, foreign_row, read_audit, script_checks
from .script_records import ScriptRun
from .spec import (
    DEFAULT_TIMEOUT_S,
    Progress,
    RehearsalSpec,
    check_backoff_scale,
    check_timeout,
)
from .teardown import TeardownWatch, crash_named

__all__ = [
    "CHECK_ORDER",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_S",
    "MULTICAST_OFF",
    "OWN_SCRIPT_SETTLE_S",
    "PORT_NAME",
    "PREFLIGHT_LINE",
    "CheckResult",
    "Launcher",
    "PodOutcome",
    "PodPlan",
    "PreflightSettings",
    "Progress",
    "RehearsalSpec",
    "RehearseResult",
    "free_port",
    "operator_verdict",
    "aggregate",
    "check_timeout",
    "cpu_bandwidth",
    "find_job",
    "operator_env",
    "parse_lines",
    "plan_pods",
    "preflight_settings",
    "preflight_source",
    "probe_gpus",
    "rehearse_manifests",
    "result_dict",
    "set_nproc",
    "split_command",
]

# --own-script: once a pod crashed the verdict is in; its peers get this long to end on their own
OWN_SCRIPT_SETTLE_S = 10.0


@dataclass(frozen=True)
class Setup:
    """A rehearsal as this machine runs it: the spec with the settings the GPUs and the faults
    call for, the job, its faults, the logs' folder and the network."""

    spec: RehearsalSpec
    job: Mapping[str, Any]
    faults: tuple[Fault, ...]
    root: Path
    gpus: int
    hold_dir: Path | None
    netplan: NetPlan | None
    auto_why: str | None  # why --network auto chose loopback, else None

    @property
    def backend(self) -> str:
        return "nccl" if self.gpus else "gloo"


def set_up(manifests: Sequence[Mapping[str, Any]], spec: RehearsalSpec) -> Setup:
    """Bad input refused before anything is written; then the logs' folder made and the
    settings adjusted to what runs here."""
    check_timeout(spec.timeout_s)
    if spec.procs_per_pod is not None and spec.procs_per_pod < 1:  # before the logs' folder is made
        raise InputError("--procs-per-pod must be at least 1", field="--procs-per-pod")
    job = find_job(manifests, spec.plan.workload if spec.plan is not None else None)
    faults = faults_of(job, spec.kills, spec.preempt, spec.restart_after_checkpoint, spec.scheduler_faults)
    mode = resolve_mode(spec.network)  # netns where it cannot be: bad input, nothing started
    check_backoff_scale(spec.backoff_scale)
    check_logs_dir(spec.logs_dir)  # a file, or a link planted there: bad input, nothing started
    gpus = probe_gpus(spec.python)  # first: no torch is bad input, and nothing is written
    if spec.device == "cpu":
        gpus = 0
    root = make_logs_dir(spec.logs_dir)
    if spec.device == "cuda" and not gpus:
        raise InputError("--device cuda: torch sees no GPU here")
    mode, auto_why = auto_on_gpu(spec.network, mode, gpus)
    settings = spec.settings
    if not gpus and settings.min_busbw_gbps is not None:
        # gloo over loopback says nothing about the cluster's fabric: measure, do not judge
        settings = PreflightSettings(**{**settings.__dict__, "min_busbw_gbps": None})
    if faults:
        settings = restart_settings(settings)
    netplan = (
        plan_network(
            str(job["metadata"]["name"]),
            [short_pod_name(t, i) for t, n, _ in replicas_of(job) for i in range(n)],
            folder=root / NETWORK_DIR,
        )
        if mode == "netns"
        else None
    )
    return Setup(
        dataclasses.replace(spec, settings=settings),
        job,
        tuple(faults),
        root,
        gpus,
        root / "restart" if faults else None,
        netplan,
        auto_why,
    )


def _pvc_paths(job: Mapping[str, Any]) -> tuple[str, ...]:
    """The PVC mount paths of the job's first replica type (every pod mounts the same)."""
    replicas = replicas_of(job)
    if not replicas:
        return ()
    rtype, _, replica = replicas[0]
    return pvc_paths(((replica.get("template") or {}).get("spec") or {}), container_of(replica, rtype))


def own_script_checks(
    setup: Setup, plans: Sequence[PodPlan], world: int, outcomes: Sequence[PodOutcome], *, restarted: bool
) -> list[CheckResult]:
    """The guide's checklist on the script, from the audit layer's records of every rank, after
    a row saying how the pods' file systems were set up."""
    settings, root = setup.spec.settings, setup.root
    # the checkpoint volume's path as the script sees it; a job without one: where the
    # preflight keeps its checkpoints here (argv.py)
    checkpoint_dir = (
        checkpoint_mount(setup.job, setup.spec.plan)
        or settings.checkpoint_dir
        or str(root / CHECKPOINTS_HERE)
    )
    note = plans[0].filesystem_note if plans else None
    run = ScriptRun(
        world=world,
        plan_world=plan_world_size(setup.job),
        checkpoint_dir=checkpoint_dir,
        gpus=setup.gpus,
        restarted=restarted,
        timed_out=any(o.timed_out for o in outcomes),
        volumes=_pvc_paths(setup.job),
        crash=crash_named([o.log for o in outcomes]),
        checkpoint_format=settings.checkpoint_format,
        second_network=setup.spec.plan is not None and setup.spec.plan.attaches_network,
    )
    key = audit_key(plans)
    records = read_audit(root / "audit", key)
    rows = [*script_checks(records, run, settings), bottleneck_row(records, setup.gpus)]
    forged = foreign_row(foreign_records(root / "audit", key))
    mounted = bool(note) and "NOT mounted" not in str(note)
    head = CheckResult("filesystem", "pass" if mounted else "skip", str(note or ""))
    return [head, *rows, *([forged] if forged else [])]


def run_with_faults(
    setup: Setup, plans: Sequence[PodPlan], world: int
) -> tuple[list[CheckResult], list[PodOutcome]]:
    """The pods under the kubelet/operator model, with the faults injected."""
    spec, hold_dir = setup.spec, setup.hold_dir
    assert hold_dir is not None
    shutil.rmtree(hold_dir, ignore_errors=True)
    hold_dir.mkdir(parents=True)
    fault_checks, outcomes, lines = rehearse_faults(
        setup.job,
        plans,
        world,
        setup.faults,
        spec,
        hold_dir,
        audit_dir=setup.root / "audit" if spec.own_script else None,
    )
    if spec.own_script:
        checks = own_script_checks(setup, plans, world, outcomes, restarted=True) + fault_checks
    else:
        # the preflight's checks as the job ended; what a fault cut short is in the rows
        checks = [
            c
            for c in aggregate(final_round(lines), world, outcomes, spec.timeout_s, False)
            if c.check != "pods"
        ] + fault_checks
    return checks, outcomes


def run_once(
    setup: Setup, plans: Sequence[PodPlan], world: int
) -> tuple[list[CheckResult], list[PodOutcome]]:
    """The pods started once, until they exit or the timeout passes."""
    spec = setup.spec
    run = run_attempt(
        plans,
        0,
        spec.timeout_s,
        skip=spec.skip_pods,
        after_crash_s=OWN_SCRIPT_SETTLE_S if spec.own_script else None,
        progress=spec.progress,
        watch=TeardownWatch(
            setup.root / "audit", audit_key(plans), world, [p.log_dir / "pod.log" for p in plans]
        )
        if spec.own_script
        else None,
    )
    checks = aggregate(run.lines, world, run.outcomes, spec.timeout_s, spec.own_script)
    if spec.own_script:
        checks = own_script_checks(setup, plans, world, run.outcomes, restarted=False) + checks
    return checks, run.outcomes


def notes(setup: Setup, plans: Sequence[PodPlan]) -> list[CheckResult]:
    """The rows that say how the pods were set up: network, command, PID 1."""
    name = str(setup.job["metadata"]["name"])
    launcher = setup.spec.plan.launcher_name if setup.spec.plan is not None else None
    out = (
        [netns_note(plans, setup.netplan, launcher)]
        if setup.netplan is not None
        else [network_note(plans, name, launcher)]
        if len(plans) > 1
        else []
    )
    if setup.auto_why and out:
        out[0] = dataclasses.replace(out[0], message=f"{out[0].message}; {setup.auto_why}")
    declared = nproc_of(setup.job)
    asked = setup.spec.procs_per_pod
    if asked is not None and declared and asked > declared:
        out.append(
            CheckResult(
                "procs-per-pod",
                "note",
                f"--procs-per-pod {asked} is more than the {declared} process(es) per pod the job "
                "runs (one per GPU of its preset): this rehearsal starts ranks the cluster never would",
            )
        )
    return out + [n for n in [command_note(plans, launcher)] if n is not None] + [pid1_note(plans)]


def rehearse_manifests(manifests: Sequence[Mapping[str, Any]], spec: RehearsalSpec) -> RehearseResult:
    """Run the job's topology here and collect the preflight's checks (RehearsalSpec says
    what is asked); an MPIJob's plan: its mpirun here (mpi_run.py)."""
    if spec.plan is not None and spec.plan.workload == MPIJOB:
        return rehearse_mpijob(find_job(manifests, MPIJOB), spec)
    setup = set_up(manifests, spec)
    root = setup.root
    # removed again on the way out, also on error; network.log: when each name resolved. First:
    # a pod joins its namespace through the pid of the process that holds it
    with pod_network(setup.netplan, root / "network.log") as net:
        plans, world = plan_pods(
            manifests,
            setup.spec,
            root=setup.root,
            gpus=setup.gpus,
            hold_dir=setup.hold_dir,
            network=net.plan if net else None,
        )
        write_plan(root, plans, world, setup.backend)
        shutil.rmtree(root / CHECKPOINTS_HERE, ignore_errors=True)
        run = run_with_faults if setup.faults else run_once
        checks, outcomes = run(setup, plans, world)
    checks = cpu_bandwidth(notes(setup, plans) + checks, spec.settings.min_busbw_gbps, setup.gpus)
    ok = all(c.ok for c in checks if c.status != "not run")
    result = RehearseResult(ok, tuple(checks), tuple(outcomes), root, world, setup.backend, spec.own_script)
    (root / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result
