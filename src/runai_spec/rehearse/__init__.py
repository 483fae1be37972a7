"""Rehearse a rendered PyTorchJob on this machine: one local process per pod, operator env."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..facts.kubeflow import OPERATOR_VERSION
from ..facts.torchrun import Launcher, set_nproc, split_command
from ..pipeline.checklist import (
    PREFLIGHT_LINE,
    PreflightSettings,
    parse_lines,
    preflight_settings,
    preflight_source,
)
from .checks import (
    CHECK_ORDER,
    CheckResult,
    RehearseResult,
    aggregate,
    command_note,
    netns_note,
    network_note,
    pid1_note,
    result_dict,
)
from .faults import faults_of
from .job import DEFAULT_PORT, PORT_NAME, find_job, nproc_of, operator_env, replicas_of
from .logs_folder import check_logs_dir, make_logs_dir
from .network import auto_on_gpu, plan_network, pod_network, resolve_mode
from .pods import (
    MULTICAST_OFF,
    PodOutcome,
    PodPlan,
    Progress,
    free_port,
    plan_pods,
    probe_gpus,
    run_attempt,
    write_plan,
)
from .restarts import operator_verdict, restart_settings
from .runner import audit_key, final_round, rehearse_faults
from .script_checks import ScriptRun, foreign_records, foreign_row, read_audit, script_checks

__all__ = [
    "CHECK_ORDER", "DEFAULT_PORT", "DEFAULT_TIMEOUT_S", "MULTICAST_OFF", "OWN_SCRIPT_SETTLE_S",
    "PORT_NAME", "PREFLIGHT_LINE",
    "CheckResult", "Launcher",
    "PodOutcome", "PodPlan", "PreflightSettings", "Progress", "RehearseResult", "free_port",
    "operator_verdict", "aggregate", "check_timeout", "find_job", "operator_env",
    "parse_lines", "plan_pods", "preflight_settings", "preflight_source",
    "probe_gpus", "rehearse_manifests", "result_dict", "set_nproc",
    "split_command",
]

DEFAULT_TIMEOUT_S = 300.0
# --own-script: once a pod crashed the verdict is in; its peers get this long to end on their own
OWN_SCRIPT_SETTLE_S = 10.0


def check_timeout(timeout_s: float) -> None:
    """How long the pods may run: a positive, finite number of seconds."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"{timeout_s:g} is not a positive number of seconds", field="--timeout",
                         hint=f"how long the pods may run, e.g. --timeout 60 (default "
                              f"{DEFAULT_TIMEOUT_S:g})")


def own_script_checks(plans: Sequence[PodPlan], root: Path, world: int,
                      manifests: Sequence[Mapping[str, Any]], settings: PreflightSettings,
                      gpus: int, outcomes: Sequence[PodOutcome], *, restarted: bool
                      ) -> list[CheckResult]:
    """The guide's checklist on the script, from the audit layer's records of every rank, after
    a row saying how the pods' file systems were set up."""
    job = find_job(manifests)
    plan_world = len(plans) * max(1, nproc_of(job))
    checkpoint_dir = next((p.checkpoint_dir for p in plans if p.checkpoint_dir),
                          settings.checkpoint_dir or "/checkpoints")
    note = plans[0].filesystem_note if plans else None
    run = ScriptRun(world=world, plan_world=plan_world, checkpoint_dir=checkpoint_dir, gpus=gpus,
                    restarted=restarted, timed_out=any(o.timed_out for o in outcomes))
    key = audit_key(plans)
    rows = script_checks(read_audit(root / "audit", key), run, settings)
    forged = foreign_row(foreign_records(root / "audit", key))
    mounted = bool(note) and "NOT mounted" not in str(note)
    head = CheckResult("filesystem", "pass" if mounted else "skip", str(note or ""))
    return [head, *rows, *([forged] if forged else [])]


def rehearse_manifests(
    manifests: Sequence[Mapping[str, Any]],
    *,
    settings: PreflightSettings | None = None,
    procs_per_pod: int | None = None,
    own_script: bool = False,
    restart_after_checkpoint: bool = False,
    logs_dir: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str = "auto",
    python: str = sys.executable,
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
    pod_env: Mapping[str, Mapping[str, str]] | None = None,
    skip_pods: Sequence[str] = (),
    kills: Sequence[str] = (),
    preempt: str | None = None,
    backoff_scale: float = 1.0,
    progress: Progress | None = None,
    network: str = "loopback",
    operator_version: str = OPERATOR_VERSION,
) -> RehearseResult:
    """Run the job's topology here and collect the preflight's checks.

    The pods run until they exit or `timeout_s` passes; then they are stopped. The preflight
    still running then has failed; the profile's own script (`own_script`) is healthy.
    `env`, `pod_env` (by short pod name, e.g. `worker-0`) and `skip_pods` exist to break the
    setup on purpose: CI uses them to prove each check fails when it should.
    `kills` (`POD[@checkpoint|@SECONDS]`) and `preempt` (`""`, `"@checkpoint"`, `"@SECONDS"`)
    run the job under the kubelet/operator model; `restart_after_checkpoint` is a kill of the
    pod whose loss is hardest for the layout (`faults.hardest_pod`) at the first checkpoint.
    `progress`, if given, gets a one-line status about once a second while the pods run.
    `network`: `netns` (a network namespace, address and hostname per pod; network.py),
    `loopback` (every pod on 127.0.0.1, the default here), or `auto` (netns where this
    machine allows it, the CLI's default).
    `operator_version`: the training-operator release the site declares (site.yaml), whose
    env each pod gets (kubeflow.operator_env) and whose restarts the fault model follows.
    """
    settings = settings or PreflightSettings()
    check_timeout(timeout_s)
    job = find_job(manifests)
    faults = faults_of(job, kills, preempt, restart_after_checkpoint)
    mode = resolve_mode(network)  # netns where it cannot be: bad input, nothing started
    if not (math.isfinite(backoff_scale) and backoff_scale >= 0):
        raise InputError(f"{backoff_scale:g} is not a non-negative number", field="--backoff-scale",
                         hint="e.g. --backoff-scale 0.1 (the kubelet's 10 s back-off becomes 1 s)")
    check_logs_dir(logs_dir)  # a file, or a link planted there: bad input, nothing started
    gpus = probe_gpus(python)  # first: no torch is bad input, and nothing is written
    if device == "cpu":
        gpus = 0
    root = make_logs_dir(logs_dir)
    if device == "cuda" and not gpus:
        raise InputError("--device cuda: torch sees no GPU here")
    backend = "nccl" if gpus else "gloo"
    mode, auto_why = auto_on_gpu(network, mode, gpus)
    if not gpus and settings.min_busbw_gbps is not None:
        # gloo over loopback says nothing about the cluster's fabric: measure, do not judge
        settings = PreflightSettings(**{**settings.__dict__, "min_busbw_gbps": None})
    hold_dir = root / "restart" if faults else None
    if faults:
        settings = restart_settings(settings)
    netplan = (plan_network(str(job["metadata"]["name"]),
                            [f"{t.lower()}-{i}" for t, n, _ in replicas_of(job) for i in range(n)])
               if mode == "netns" else None)
    plans, world = plan_pods(
        manifests, settings=settings, root=root, procs_per_pod=procs_per_pod,
        own_script=own_script, gpus=gpus, python=python, workdir=workdir, env=env,
        pod_env=pod_env, hold_dir=hold_dir, network=netplan, operator_version=operator_version)
    write_plan(root, plans, world, backend)
    shutil.rmtree(root / "checkpoints", ignore_errors=True)

    # removed again on the way out, also on error; network.log: when each name resolved
    with pod_network(netplan, root / "network.log"):
        if faults:
            assert hold_dir is not None
            shutil.rmtree(hold_dir, ignore_errors=True)
            hold_dir.mkdir(parents=True)
            fault_checks, outcomes, lines = rehearse_faults(
                job, plans, world, faults, timeout_s, backoff_scale, hold_dir,
                sigterm_save=settings.checkpoint_on_sigterm, operator_version=operator_version,
                audit_dir=root / "audit" if own_script else None, progress=progress)
            if own_script:
                checks = own_script_checks(plans, root, world, manifests, settings, gpus, outcomes,
                                           restarted=True) + fault_checks
            else:
                # the preflight's checks as the job ended; what a fault cut short is in the rows
                checks = [c for c in aggregate(final_round(lines), world, outcomes, timeout_s,
                                               False) if c.check != "pods"] + fault_checks
        else:
            run = run_attempt(plans, 0, timeout_s, skip=skip_pods,
                               after_crash_s=OWN_SCRIPT_SETTLE_S if own_script else None,
                               progress=progress)
            checks = aggregate(run.lines, world, run.outcomes, timeout_s, own_script)
            if own_script:
                checks = own_script_checks(plans, root, world, manifests, settings, gpus,
                                           run.outcomes, restarted=False) + checks
            outcomes = run.outcomes
    notes = ([netns_note(plans, netplan)] if netplan is not None
             else [network_note(plans, str(job["metadata"]["name"]))] if len(plans) > 1 else [])
    if auto_why and notes:
        notes[0] = dataclasses.replace(notes[0], message=f"{notes[0].message}; {auto_why}")
    notes += [n for n in [command_note(plans)] if n is not None] + [pid1_note(plans)]
    checks = notes + checks
    ok = all(c.ok for c in checks if c.status != "not run")
    result = RehearseResult(ok, tuple(checks), tuple(outcomes), root, world, backend, own_script)
    (root / "result.json").write_text(json.dumps(result_dict(result), indent=2) + "\n")
    return result

