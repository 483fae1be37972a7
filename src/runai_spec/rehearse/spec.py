"""What one rehearsal is asked to do: the options of `runai-spec rehearse` as one value."""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..facts.kai import KAI_VERSION
from ..facts.kubeflow import OPERATOR_VERSION
from ..facts.operator import BACKOFF_BASE_S
from ..pipeline.checklist import PreflightSettings

if TYPE_CHECKING:
    from ..plan.plan import Plan

DEFAULT_TIMEOUT_S = 300.0
Progress = Callable[[str], None]


@dataclass(frozen=True)
class RehearsalSpec:
    """One rehearsal's options, built once by the CLI (or a test) and passed down whole.

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
    env each pod gets (kubeflow.operator_env) and whose restarts the fault model follows;
    `kai_version`: the KAI-Scheduler release the site declares, whose gang rules (minMember,
    the staleness grace period) the eviction model follows (facts/kai.py).
    `plan`: the workload's plan, where the manifests are its render: its workload kind and its
    volumes' roles (without it they are read back from the manifest by the planner's names)."""

    settings: PreflightSettings = field(default_factory=PreflightSettings)
    procs_per_pod: int | None = None
    own_script: bool = False
    restart_after_checkpoint: bool = False
    logs_dir: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: str = "auto"
    python: str = sys.executable
    workdir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    pod_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    skip_pods: Sequence[str] = ()
    kills: Sequence[str] = ()
    preempt: str | None = None
    evicts: Sequence[str] = ()  # --evict POD[@...]: KAI's eviction of one pod (facts/kai.py)
    stale_gang: Sequence[str] = ()  # --stale-gang POD[@...]: lost, the gang evicted when stale
    backoff_scale: float = 1.0
    progress: Progress | None = None
    network: str = "loopback"
    operator_version: str = OPERATOR_VERSION
    kai_version: str = KAI_VERSION
    scaling: tuple[int, ...] = ()  # --scaling: the run again with each of these --procs-per-pod
    script_args: tuple[str, ...] = ()  # --args: appended to the own script's arguments in every pod
    plan: Plan | None = None

    @property
    def faults_asked(self) -> bool:
        """A --kill, --evict, --stale-gang, --preempt or --restart-after-checkpoint: the run
        follows the fault model."""
        return bool(self.kills or self.evicts or self.stale_gang) or (
            self.preempt is not None or self.restart_after_checkpoint
        )

    @property
    def scheduler_faults(self) -> list[tuple[str, str]]:
        """(kind, POD[@...]) of each --evict ("evict") and --stale-gang ("lose")."""
        return [("evict", e) for e in self.evicts] + [("lose", s) for s in self.stale_gang]

    def recorded_options(self) -> list[str]:
        """The options that change what a rehearsal shows, as `plan`'s ticket lists them."""
        return (
            [f"--procs-per-pod {self.procs_per_pod}"] * (self.procs_per_pod is not None)
            + ["--own-script"] * self.own_script
            + ["--restart-after-checkpoint"] * self.restart_after_checkpoint
            + [f"--kill {k}" for k in self.kills]
            + [f"--evict {k}" for k in self.evicts]
            + [f"--stale-gang {k}" for k in self.stale_gang]
            + [f"--network {self.network}"] * (self.network != "auto")
            + [f"--scaling {','.join(map(str, self.scaling))}"] * bool(self.scaling)
            + [f"--args {shlex.join(self.script_args)}"] * bool(self.script_args)
        )


def parse_script_args(text: str | None, *, own_script: bool) -> tuple[str, ...]:
    """--args as the words a shell would split it into (no shell runs): for the own script only."""
    if not text:
        return ()
    if not own_script:
        raise InputError(
            "appends arguments to your script's, and preflight.py is not your script",
            field="--args",
            hint="add --own-script",
        )
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise InputError(
            f"cannot be split into arguments: {exc}", field="--args", hint="e.g. --args '--max-steps 40'"
        ) from exc


def check_timeout(timeout_s: float) -> None:
    """How long the pods may run: a positive, finite number of seconds."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(
            f"{timeout_s:g} is not a positive number of seconds",
            field="--timeout",
            hint=f"how long the pods may run, e.g. --timeout 60 (default {DEFAULT_TIMEOUT_S:g})",
        )


def check_backoff_scale(scale: float) -> None:
    """The kubelet's back-off scaled by a non-negative, finite factor."""
    if not (math.isfinite(scale) and scale >= 0):
        raise InputError(
            f"{scale:g} is not a non-negative number",
            field="--backoff-scale",
            hint=f"e.g. --backoff-scale 0.1 (the kubelet's {BACKOFF_BASE_S:g} s "
            f"back-off becomes {BACKOFF_BASE_S * 0.1:g} s)",
        )
