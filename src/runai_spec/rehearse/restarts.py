"""What the operator does with failed pods and what a static rendezvous risks (`runner.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..facts.accelerate import RDZV_BACKEND_FLAG as ACCELERATE_BACKEND_FLAG
from ..facts.torchrun import (
    ACCELERATE,
    RDZV_BACKEND_FLAGS,
    STANDALONE_FLAG,
    flag_value,
    has_flag,
    split_command,
)
from ..pipeline.checklist import PreflightSettings
from .checks import exit_status
from .job import container_of, replicas_of
from .processes import PodOutcome


def restart_settings(settings: PreflightSettings) -> PreflightSettings:
    """A first checkpoint early, and steps enough after it for a second one: the restarted
    run then trains, writes, reloads and reports metrics like the first."""
    every = min(settings.checkpoint_every, 2)
    steps = max(settings.steps, 2 * every)
    return PreflightSettings(**{**settings.__dict__, "steps": steps, "checkpoint_every": every})


def operator_verdict(
    job: Mapping[str, Any], replica_types: Mapping[str, str], failed: Sequence[PodOutcome]
) -> tuple[str | None, str]:
    """(why the operator would not restart these failed pods, or None; what it would do)."""
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    # the operator's defaults set OnFailure where the manifest says nothing (pytorch_defaults.go
    # setDefaultRestartPolicy, applied by the controller: its webhook only validates)
    policy = {
        o.name: str((replicas.get(replica_types.get(o.name, "")) or {}).get("restartPolicy") or "OnFailure")
        for o in failed
    }
    never = [o.name for o in failed if policy[o.name] == "Never"]
    if never:
        return (
            f"restartPolicy Never on {', '.join(never)}: the operator marks the job Failed "
            "instead of restarting it"
        ), "no restart"
    # ExitCode: exit codes up to 127 are permanent, from 128 (signals) retryable
    permanent = [
        f"{o.name} (exit {exit_status(o.exit_code)})"
        for o in failed
        if policy[o.name] == "ExitCode" and (exit_status(o.exit_code) or 0) < 128
    ]
    if permanent:
        return (
            f"restartPolicy ExitCode treats {', '.join(permanent)} as a permanent error: "
            "the operator marks the job Failed instead of restarting it"
        ), "no restart"
    counted = [o for o in failed if policy[o.name] in ("OnFailure", "Always")]
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    used = len(counted)
    what = ", ".join(sorted({policy[o.name] for o in failed}))
    note = f"{what} restarts {'the pod' if len(failed) == 1 else f'all {len(failed)} pods'}"
    if limit is None:
        return None, note
    note += f" ({used} restart(s), backoffLimit {limit})"
    if (limit == 0 and used > 0) or (limit > 0 and used >= limit):
        return (
            f"{used} container restart(s) reach the backoffLimit of {limit}: the operator "
            "marks the job Failed after losing one pod"
        ), note
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
    "on timing. After a node fault resubmit the job, which resumes from the checkpoint"
)


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
    if launcher.kind == ACCELERATE:  # its default backend is static, whatever PET_RDZV_BACKEND says
        return (flag_value(launcher.head, ACCELERATE_BACKEND_FLAG) or "static") == "static"
    return launcher.kind == "torchrun" and not has_flag(launcher.head, *RDZV_BACKEND_FLAGS, STANDALONE_FLAG)
