"""`init [DIR]`: write a new profile, asking on a terminal, from flags in a script."""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK
from .common import app, err, with_options

if TYPE_CHECKING:
    from ..pipeline.workload import Workload


def _opt(name: str, help: str) -> object:
    return typer.Option(name, help=help, show_default=False)


class TerminalPrompt:
    """Questions on the terminal; each answer is one line."""

    def ask(self, question: str, default: str | None) -> str:
        return input(f"{question}{f' [{default}]' if default is not None else ''}: ")

    def say(self, line: str) -> None:
        print(line, flush=True)


@dataclass(frozen=True)
class InitOptions:
    folder: Annotated[
        Path, typer.Argument(metavar="[DIR]", help="Folder for profile.yaml (made if missing).")
    ] = Path(".")
    project: Annotated[str | None, _opt("--project", "Run:ai project.")] = None
    preset: Annotated[str | None, _opt("--preset", "Approved preset (one the project may use).")] = None
    name: Annotated[str | None, _opt("--name", "Workload name (DNS-1035).")] = None
    image: Annotated[
        str | None, _opt("--image", "Image pinned by digest: registry/repo[:tag]@sha256:<64 hex>.")
    ] = None
    command: Annotated[
        str | None,
        _opt("--command", "Entry point as typed, e.g. 'train.py --config c.yaml' (no python/torchrun)."),
    ] = None
    launcher: Annotated[
        str | None,
        _opt("--launcher", "torchrun (default) or accelerate, where the preset offers it (asked then)."),
    ] = None
    working_dir: Annotated[
        str | None, _opt("--working-dir", "Working directory in the image (default /workspace).")
    ] = None
    strategy: Annotated[str | None, _opt("--strategy", "ddp, fsdp, deepspeed, ... (default ddp).")] = None
    local_batch: Annotated[str | None, _opt("--local-batch", "Samples per GPU per step.")] = None
    grad_accum: Annotated[str | None, _opt("--grad-accum", "Gradient accumulation steps (default 1).")] = None
    parameters: Annotated[
        str | None, _opt("--parameters", "Model size, e.g. 7B or 7e9 (unknown: not declared).")
    ] = None
    precision: Annotated[str | None, _opt("--precision", "bf16 (default), fp16, fp32, tf32 or fp8.")] = None
    sequence_length: Annotated[
        str | None, _opt("--sequence-length", "Tokens per sample (default: not declared).")
    ] = None
    data: Annotated[
        str | None,
        _opt(
            "--data",
            "Data to mount: SOURCE:/path (an approved data "
            "source) or pvc:CLAIM:/path, comma-separated (default: "
            "none).",
        ),
    ] = None
    checkpoint_pvc: Annotated[
        str | None, _opt("--checkpoint-pvc", "Checkpoint PVC (default <project>-checkpoints).")
    ] = None
    checkpoint_dir: Annotated[
        str | None, _opt("--checkpoint-dir", "Checkpoint mount path (default /checkpoints).")
    ] = None
    checkpoint_format: Annotated[
        str | None, _opt("--checkpoint-format", "dcp, torch, safetensors or deepspeed.")
    ] = None
    resume: Annotated[str | None, _opt("--resume", "How the script resumes after a restart.")] = None
    metrics_writer: Annotated[
        str | None, _opt("--metrics-writer", "rank0 (default), per-rank or all-ranks.")
    ] = None
    metrics_tracker: Annotated[
        str | None, _opt("--metrics-tracker", "tensorboard, wandb, mlflow, ... (default: none).")
    ] = None
    no_input: Annotated[
        bool,
        typer.Option(
            "--no-input", help="Never ask: a value no flag gives and that has no default is an error."
        ),
    ] = False
    force: Annotated[bool, typer.Option("--force", help="Replace an existing profile.yaml.")] = False


@app.command()
@with_options
def init(o: InitOptions) -> int:
    """Write a new profile.yaml: asks in plain words on a terminal (project, layout, image,
    entry point, model, batch sizes, checkpoint, data, metrics), or takes every answer from
    flags in a script; the profile is checked with every rule and written only when it has no
    error."""
    from ..outputs.init import Answers, init_profile

    answers = Answers(**{f.name: getattr(o, f.name) for f in fields(Answers)})
    prompt = TerminalPrompt() if sys.stdin.isatty() and not o.no_input else None
    return written(*init_profile(o.folder, answers, prompt=prompt, force=o.force))


DRAFT_SUFFIX = ".draft"  # init's answers, kept beside the profile it refused to write


def written(target: Path, workload: Workload, text: str) -> int:
    """init's findings and, when the profile has no error, the file written and what next."""
    from ..outputs.init import write_profile

    if workload.errors:
        # every answer kept, in a file the findings' lines point into: never a line of a
        # profile that does not exist, never all the questions again for one bad answer
        draft = target.with_name(f"{target.name}{DRAFT_SUFFIX}")
        write_profile(draft, text)
        err(
            line
            for finding in workload.findings
            for line in finding._replace(location=finding.location._replace(file=str(draft))).lines()
        )
        err(
            [
                f"error: {target}: not written: the profile has {len(workload.errors)} error "
                f"finding(s) (above); your answers are kept in {draft}",
                f"hint: fix {draft} and rename it to {target.name} (`runai-spec validate` checks it)",
            ]
        )
        return EXIT_FINDINGS
    err(line for finding in workload.findings for line in finding.lines())
    write_profile(target, text)
    err(
        [
            f"wrote {target}",
            f"next: `runai-spec plan {target}` (the ticket for the AI engineer), "
            f"`runai-spec rehearse {target}`",
        ]
    )
    return EXIT_OK
