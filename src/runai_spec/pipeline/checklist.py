"""preflight.py seen from the package: the guide's checklist, its argv, its lines, its source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .workload import Workload

PREFLIGHT_LINE = "PREFLIGHT {"


@dataclass(frozen=True)
class GuideItem:
    """One item of the site guide's "validate before the real run" checklist: its words, and
    the checks of preflight.py (and of `rehearse --own-script`) that test it."""

    text: str
    checks: tuple[str, ...]


# The guide's checklist, in the guide's order: `plan` prints the words, rehearse's tables
# derive their rows from the checks.
GUIDE_CHECKLIST = (
    GuideItem("Every expected rank starts once and reports the same world size.", ("ranks", "world-size")),
    GuideItem("Each process sees one intended GPU and no two processes claim the same device.", ("device",)),
    GuideItem(
        "The global batch size equals local batch size x process count x gradient accumulation.",
        ("global-batch",),
    ),
    GuideItem(
        "A checkpoint is written, reloaded, and produces the expected next step.", ("checkpoint", "resume")
    ),
    GuideItem("Metrics are emitted once rather than duplicated by every rank.", ("metrics",)),
    GuideItem("The run stops cleanly and its important logs are saved before they disappear.", ("shutdown",)),
)
GUIDE_CHECKS = tuple(check for item in GUIDE_CHECKLIST for check in item.checks)
# what preflight.py checks beyond the guide: the preset's bus bandwidth, a few training steps
PREFLIGHT_ONLY_CHECKS = ("bus-bandwidth", "training")


@dataclass(frozen=True)
class PreflightSettings:
    """What the profile and preset say the run should look like, for preflight.py's checks."""

    local_batch: int = 2
    grad_accum: int = 1
    global_batch: int | None = None
    checkpoint_format: str = "torch"
    checkpoint_dir: str | None = None
    min_busbw_gbps: float | None = None
    steps: int = 4
    checkpoint_every: int = 2
    join_timeout_s: float = 60.0
    collective_timeout_s: float = 120.0
    fresh_checkpoint: bool = False  # the smoke test: never resume an earlier smoke test
    busy_rank0_s: float = 0.0  # rank 0 busy after the first checkpoint (the hard fault case)
    checkpoint_on_sigterm: bool = False  # the profile's script saves on SIGTERM
    deadline_s: float | None = None  # the preflight's own deadline, from its start (smoke test)

    def args(
        self,
        *,
        world_size: int | None,
        checkpoint_dir: str | None,
        metrics_file: str | None,
        hold_dir: str | None = None,
        plan_world_size: int | None = None,
        min_world_size: int | None = None,
    ) -> list[str]:
        """preflight.py's argv (after the script path)."""
        out = [
            "--local-batch",
            str(self.local_batch),
            "--grad-accum",
            str(self.grad_accum),
            "--checkpoint-format",
            self.checkpoint_format,
            "--steps",
            str(self.steps),
            "--checkpoint-every",
            str(self.checkpoint_every),
            "--join-timeout",
            f"{self.join_timeout_s:g}",
            "--timeout",
            f"{self.collective_timeout_s:g}",
        ]
        if self.global_batch is not None:
            out += ["--global-batch", str(self.global_batch)]
        if world_size is not None:
            out += ["--world-size", str(world_size)]
        if min_world_size is not None and world_size is not None and min_world_size < world_size:
            out += ["--min-world-size", str(min_world_size)]
        if plan_world_size is not None and plan_world_size != world_size:
            out += ["--plan-world-size", str(plan_world_size)]
        if checkpoint_dir:
            out += ["--checkpoint-dir", checkpoint_dir]
        if metrics_file:
            out += ["--metrics-file", metrics_file]
        if self.min_busbw_gbps is not None:
            out += ["--min-busbw", f"{self.min_busbw_gbps:g}"]
        if hold_dir:
            out += ["--hold-after-checkpoint", hold_dir]
        if self.fresh_checkpoint:
            out += ["--fresh-checkpoint"]
        if self.busy_rank0_s > 0:
            out += ["--busy-rank0", f"{self.busy_rank0_s:g}"]
        if self.checkpoint_on_sigterm:
            out += ["--checkpoint-on-sigterm"]
        if self.deadline_s is not None:
            out += ["--deadline", f"{self.deadline_s:g}"]
        return out


def preflight_source() -> str:
    """The text of preflight.py as shipped in the package (also the ConfigMap's data)."""
    return resources.files("runai_spec").joinpath("preflight.py").read_text(encoding="utf-8")


def parse_lines(text: str) -> list[dict[str, Any]]:
    """Every `PREFLIGHT {...}` record in some output, wherever a prefix left it on the line."""
    out = []
    decoder = json.JSONDecoder()
    start = text.find(PREFLIGHT_LINE)
    while start != -1:
        brace = start + len(PREFLIGHT_LINE) - 1
        try:
            record, end = decoder.raw_decode(text, brace)
        except json.JSONDecodeError:
            end = brace + 1
        else:
            if isinstance(record, dict):
                out.append(record)
        start = text.find(PREFLIGHT_LINE, end)
    return out


def preflight_settings(workload: Workload, *, in_cluster: bool = False) -> PreflightSettings:
    """What the real job should look like to preflight.py: the profile's batch arithmetic and
    checkpoint format, the preset's bandwidth minimum. In the cluster the checkpoint goes to
    the profile's checkpoint volume; a local rehearsal keeps it in its own folder."""
    p = workload.loaded.profile
    return PreflightSettings(
        local_batch=p.batch.local,
        grad_accum=p.batch.grad_accum,
        global_batch=p.batch.global_,
        checkpoint_format=str(p.checkpoint.format),
        checkpoint_dir=p.checkpoint.dir if in_cluster else None,
        min_busbw_gbps=workload.approved.preset.min_busbw_gbps,
        fresh_checkpoint=in_cluster,
    )
