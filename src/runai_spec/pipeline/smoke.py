"""The in-cluster smoke test: the workload's plan as a short job of preflight.py in every pod.

preflight.py comes from a ConfigMap, and the job is rendered through templates/ like the real one."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InputError
from ..facts.kubeflow import (
    ANNOTATION_PREFIX,
    NAME_MAX,
    PREFLIGHT_SHA_ANNOTATION,
    RDZV_BACKEND,
    SMOKE_LABEL,
    SMOKE_MOUNT,
    name_room,
)
from ..facts.kubeflow import SMOKE_SUFFIX as SMOKE_SUFFIX
from ..plan.launcher import PYTORCHJOB, LaunchSetup, RendezvousPlan, launcher_named
from ..plan.launcher.mpi import MPIJOB, program_launcher
from ..plan.plan import Plan
from ..plan.volumes import CHECKPOINT
from ..render import render_smoke
from ..render.manifests import Manifest
from .checklist import PreflightSettings, preflight_settings, preflight_source

if TYPE_CHECKING:
    from .workload import Workload

SMOKE_NOTE = "preflight.py checklist in place of the training command"
SMOKE_VOLUME = "runai-spec-preflight"
# The smoke test's deadline counts from the pods' start: preflight.py bounds itself
# (--deadline, a watchdog from its start in the pod, after torchrun's rendezvous, which its
# join timeout bounds: MIN_JOIN_TIMEOUT_S). activeDeadlineSeconds cannot: it runs from the
# operator's status.startTime, set at its first reconcile while the pods are still Pending
# (training-operator v1.9 pkg/controller.v1/pytorch/pytorchjob_controller.go, pkg/core/job.go
# PastActiveDeadline), so it counts the queue too; a 30-minute job deadline failed a correct
# smoke test that queued longer as DeadlineExceeded without having run (issue 40 item 2). The
# job keeps one, as a backstop that also covers the queue: QUEUE_ALLOWANCE_S of waiting for
# GPUs (Pending pods hold none; a smoke test still queued after a day is stale, and `status`
# shows the queue time apart), then the rendezvous and the preflight's own deadline.
DEFAULT_DEADLINE_S = 1800  # the preflight's own, from its start in the pod
QUEUE_ALLOWANCE_S = 86400
# on the profile's checkpoint volume, beside (never over) the real job's checkpoints
CHECKPOINT_SUBDIR = ".runai-spec-preflight"
METRICS_FILE = "/tmp/runai-spec-preflight/metrics.jsonl"
# pods of one job may start minutes apart in a cluster (image pulls): wait for them longer
MIN_JOIN_TIMEOUT_S = 600.0


def job_deadline_s(deadline_s: int) -> int:
    """The smoke job's activeDeadlineSeconds for a preflight deadline of DEADLINE_S: the queue
    allowance, the rendezvous's join timeout, then the preflight's own deadline."""
    return QUEUE_ALLOWANCE_S + int(MIN_JOIN_TIMEOUT_S) + deadline_s


PREFLIGHT = f"{SMOKE_MOUNT}/preflight.py"  # the smoke job's entry point, from its ConfigMap


@dataclass(frozen=True)
class ConfigMapPlan:
    """A ConfigMap of text files, as templates/configmap.json.j2 renders it."""

    name: str
    namespace: str
    labels: tuple[tuple[str, str], ...]
    annotations: tuple[tuple[str, str], ...]
    data: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SmokePlan:
    """A workload's smoke test: its job (the workload's plan, renamed, never restarted, every
    pod running preflight.py) and the ConfigMap that ships preflight.py to the pods."""

    job: Plan
    config_map: ConfigMapPlan
    run_policy_after: tuple[tuple[str, int], ...]  # run limits the real job does not set
    volume: str = SMOKE_VOLUME
    mount_path: str = SMOKE_MOUNT
    label: str = SMOKE_LABEL  # on the job and its ConfigMap, never on the pods


def smoke_names(name: str) -> tuple[str, str]:
    """(PyTorchJob, ConfigMap) names of a workload's smoke test: beside the real job, so a
    smoke test can run (and be deleted) while the real job exists."""
    job = f"{name}{SMOKE_SUFFIX}"
    return job, f"{job}-preflight"


def refuse_other_kinds(plan: Plan, file: str | None) -> None:
    """A job of a kind whose ranks preflight.py cannot find its rank in (torchrun's RANK and
    WORLD_SIZE, or mpirun's OMPI_COMM_WORLD_*) has no smoke test."""
    if plan.workload not in (PYTORCHJOB, MPIJOB):
        raise InputError(
            f"the smoke test runs preflight.py with torchrun's or mpirun's env; this profile's job "
            f"is {plan.workload.kind} {plan.workload.api_version} (launcher: {plan.launcher_name}), "
            "which has no smoke test yet",
            file=file,
            field="launcher",
            hint="docs/mpi.md says what is checked of an MPIJob",
        )


def smoke_plan(
    plan: Plan,
    settings: PreflightSettings | None = None,
    *,
    deadline_s: int = DEFAULT_DEADLINE_S,
    source: str | None = None,
    file: str | None = None,
) -> SmokePlan:
    """The same workload, short: the world size, batch arithmetic and bandwidth minimum that
    preflight.py checks are the real job's. Bad input (in `file`, the profile) when a pod name
    would outgrow a DNS label with `-smoke`."""
    refuse_other_kinds(plan, file)
    settings = settings or PreflightSettings()
    source = preflight_source() if source is None else source
    name, cm_name = smoke_names(plan.name)
    renamed = plan._replace(name=name)
    longest = renamed.longest_pod_name
    if len(longest) > NAME_MAX:
        room = name_room(plan.name, longest)
        raise InputError(
            f"the smoke test's pod name {longest!r} has {len(longest)} characters (limit {NAME_MAX})",
            file=file,
            field="name",
            hint=f"shorten name to at most {room} characters to run the smoke test",
        )
    notes = {k: v for k, v in plan.annotations if k.startswith(ANNOTATION_PREFIX)}
    notes[SMOKE_LABEL] = SMOKE_NOTE
    # a changed preflight.py is a different render of both objects: resubmit says so
    notes[PREFLIGHT_SHA_ANNOTATION] = hashlib.sha256(source.encode("utf-8")).hexdigest()
    run_policy = {**dict(plan.run_policy), "backoffLimit": 0}
    after: tuple[tuple[str, int], ...] = ()
    if "activeDeadlineSeconds" in run_policy:
        run_policy["activeDeadlineSeconds"] = job_deadline_s(deadline_s)
    else:
        after = (("activeDeadlineSeconds", job_deadline_s(deadline_s)),)
    settings = dataclasses.replace(
        settings,
        join_timeout_s=max(settings.join_timeout_s, MIN_JOIN_TIMEOUT_S),
        deadline_s=float(deadline_s),
    )
    ckpt = settings.checkpoint_dir
    # an elastic job may be started with minReplicas pods (KAI gangs the minimum): that
    # world passes too, as in the rehearsal
    args = settings.args(
        world_size=plan.world_size,
        checkpoint_dir=f"{ckpt}/{CHECKPOINT_SUBDIR}" if ckpt else None,
        metrics_file=METRICS_FILE,
        min_world_size=plan.min_world_size,
    )
    # its own rendezvous id, as for any job of that name (plan.rendezvous_plan), and no
    # torchrun restarts: a smoke test runs every rank once. An elastic job's restarts are
    # elasticPolicy.maxRestarts, which the operator passes as PET_MAX_RESTARTS whenever it is
    # set (v1.9 pkg/controller.v1/pytorch/elastic.go), 0 included: the smoke job says 0
    rendezvous = plan.rendezvous
    if rendezvous is not None and rendezvous.backend == RDZV_BACKEND:
        rendezvous = rendezvous._replace(rdzv_id=name, max_restarts=None)
    job = renamed._replace(
        annotations=tuple({**dict(plan.annotations), **notes}.items()),
        run_policy=tuple(run_policy.items()),
        restart_policy="Never",
        rendezvous=rendezvous,
        elastic=None if plan.elastic is None else plan.elastic._replace(max_restarts=0),
        launcher=smoke_launcher(plan, rendezvous),
        env=smoke_env(plan, rendezvous, name),
        launcher_setup=_smoke_setup(plan, rendezvous, name),
        entrypoint=(PREFLIGHT, *args),
        # an MPIJob's launcher is a Job of its own: never restarted either (backoffLimit 0)
        mpi=None if plan.mpi is None else plan.mpi._replace(launcher_restart_policy="Never"),
    )
    # the job's labels carry runai-spec's managed-by label: submit and delete treat the
    # ConfigMap as runai-spec's own, like the job
    config_map = ConfigMapPlan(
        cm_name,
        plan.namespace,
        (*job.labels, (SMOKE_LABEL, "true")),
        tuple(notes.items()),
        (("preflight.py", source),),
    )
    return SmokePlan(job, config_map, after)


def _smoke_setup(plan: Plan, rendezvous: RendezvousPlan | None, name: str = "") -> LaunchSetup:
    """What the smoke job's launcher is planned from: the job's own (its strategy, ZeRO stage,
    accelerate config, forwarded variables: accelerate launches a DeepSpeed job with
    --use_deepspeed, which needs DeepSpeed in the image, where --multi_gpu does not), with the
    smoke test's entry point, rendezvous and name."""
    own = plan.launcher_setup
    if own is None:  # plan_workload records it for every job it plans
        raise ValueError(f"the plan of {plan.name} records no launcher setup")
    return own._replace(
        rendezvous=rendezvous,
        entrypoint=(PREFLIGHT,),
        checkpoint_dir=plan.mount_of(CHECKPOINT) or "",
        job=name,
    )


def smoke_launcher(plan: Plan, rendezvous: RendezvousPlan | None) -> tuple[str, ...]:
    """The smoke job's launcher, built by the job's own launcher (plan.launcher_name) as the
    planner builds the job's: the smoke test's RENDEZVOUS, the job's per-rank logs on its
    checkpoint volume. Never torchrun's --no-python, and `python -u` on one GPU: preflight.py
    is a Python script whatever the job's entry point. An MPIJob's mpirun line is the job's
    own (the preset's flags and the -x list: no rendezvous in it; the launcher's name travels
    in MASTER_ADDR's value, smoke_env), with `python -u` before preflight.py."""
    if plan.workload == MPIJOB:
        return program_launcher(plan.launcher)
    return launcher_named(plan.launcher_name).argv(_smoke_setup(plan, rendezvous))


def smoke_env(plan: Plan, rendezvous: RendezvousPlan | None, name: str) -> tuple[tuple[str, str], ...]:
    """The job's env with the smoke test's RENDEZVOUS where the launcher carries it in a
    variable (accelerate's PET_RDZV_ID: it has no flag; an MPIJob's MASTER_ADDR: the smoke job
    NAME's launcher), each in its place."""
    own = launcher_named(plan.launcher_name).rendezvous_env(_smoke_setup(plan, rendezvous, name))
    names = {name for name, _ in plan.env}
    return (
        *((name, own.get(name, value)) for name, value in plan.env),
        *((name, value) for name, value in own.items() if name not in names),
    )


def smoke_workload(workload: Workload, *, deadline_s: int = DEFAULT_DEADLINE_S) -> list[Manifest]:
    """`render --smoke`: the workload's smoke test (ConfigMap, then job), expecting what the
    real job declares."""
    smoke = smoke_plan(
        workload.plan,
        preflight_settings(workload, in_cluster=True),
        deadline_s=deadline_s,
        file=workload.path,
    )
    return render_smoke(smoke, workload.site.family)
