"""Typer commands: parse, call the core, print, exit."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from . import __version__
from .errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, InputError, RunaiSpecError
from .findings import Finding
from .presets import PresetRegistry, preset_summary
from .workload import Workload, prepare_workload

app = typer.Typer(
    name="runai-spec",
    help="Approved-preset PyTorchJob manifests for the Run:ai cluster, from a small profile.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
presets_app = typer.Typer(help="Engineer-owned presets and their approvals ledger.",
                          no_args_is_help=True)
app.add_typer(presets_app, name="presets")

T = TypeVar("T")


class Format(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"


Profiles = Annotated[list[Path], typer.Argument(help="Profile files (profile.yaml).",
                                                show_default=False)]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
PresetsDir = Annotated[Path | None, typer.Option("--dir", help="presets/ folder (default: the "
                                                  "one shipped with runai-spec).", hidden=True)]


def err(lines: Iterable[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def fail(exc: RunaiSpecError) -> NoReturn:
    err(exc.lines())
    raise typer.Exit(exc.exit_code)


def guarded(fn: Callable[[], T]) -> T:
    """Run fn, turning the tool's errors into one error line and their exit code."""
    try:
        return fn()
    except RunaiSpecError as exc:
        fail(exc)


def prepare_all(paths: list[Path], registry: PresetRegistry | None = None
                ) -> tuple[list[Workload], list[RunaiSpecError]]:
    """Carry every profile through the pipeline, collecting bad input instead of stopping."""
    registry = registry or PresetRegistry()
    done: list[Workload] = []
    bad: list[RunaiSpecError] = []
    for path in paths:
        try:
            done.append(prepare_workload(path, registry))
        except InputError as exc:
            bad.append(exc)
    return done, bad


def findings_exit(workloads: list[Workload], bad: list[RunaiSpecError]) -> int:
    if bad:
        return EXIT_INPUT
    return EXIT_FINDINGS if any(w.errors for w in workloads) else EXIT_OK


def print_findings(findings: Iterable[Finding]) -> None:
    for finding in findings:
        err(finding.lines())


@app.command()
def validate(profiles: Profiles, fmt: FormatOpt = Format.text) -> None:
    """Check profiles against the preset and the site rules; exit 0 clean, 1 findings, 2 bad input."""
    workloads, bad = prepare_all(profiles)
    for exc in bad:
        err(exc.lines())
    if fmt is Format.json:
        print(json.dumps([finding_dict(f) for w in workloads for f in w.findings], indent=2))
    else:
        for workload in workloads:
            print_findings(workload.findings)
            if not workload.errors:
                p = workload.plan
                err([f"ok: {workload.path}: {p.name}: {p.layout}, {p.pods} pod(s) x "
                     f"{p.procs_per_pod} process(es), world size {p.world_size}"])
    raise typer.Exit(findings_exit(workloads, bad))


def finding_dict(finding: Finding) -> dict[str, object]:
    return {"rule": finding.rule, "severity": finding.severity, "file": finding.file,
            "line": finding.line, "path": finding.path, "message": finding.message,
            "hint": finding.hint}


@app.command()
def render(
    profiles: Profiles,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write one <name>.yaml per "
                                             "workload into this folder instead of stdout.")] = None,
) -> None:
    """Render profiles to manifests (stdout, or one file per workload with -o)."""
    workloads, bad = prepare_all(profiles)
    for exc in bad:
        err(exc.lines())
    for workload in workloads:
        print_findings(workload.findings)
    code = findings_exit(workloads, bad)
    if code != EXIT_OK:
        raise typer.Exit(code)
    names = [w.plan.name for w in workloads]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        fail(InputError(f"two profiles render the workload {duplicate!r}", field="name",
                        hint="workload names must be unique within one call"))
    if out is None:
        sys.stdout.write("---\n".join(w.text for w in workloads))
        return
    guarded(lambda: write_files(out, {f"{w.plan.name}.yaml": w.text for w in workloads}))
    err([f"wrote {out / name}.yaml" for name in names])


def write_files(folder: Path, files: dict[str, str]) -> None:
    """Write every file atomically (temp file + rename); nothing half-written on failure."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temps = []
        for name, text in files.items():
            tmp = folder / f".{name}.tmp-{os.getpid()}"
            tmp.write_text(text, encoding="utf-8")
            temps.append((tmp, folder / name))
        for tmp, final in temps:
            tmp.replace(final)
    except OSError as exc:
        for tmp in folder.glob(f".*.tmp-{os.getpid()}"):
            tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write: {exc.strerror}", file=str(folder)) from None


@app.command()
def schema() -> None:
    """Print the profile's JSON Schema (for editors)."""
    from .profile import profile_schema

    print(json.dumps(profile_schema(), indent=2))


@app.command()
def version() -> None:
    """Print the runai-spec version."""
    print(__version__)


@presets_app.command("list")
def presets_list(directory: PresetsDir = None) -> None:
    """List the approved presets."""
    registry = PresetRegistry(directory)
    for name in registry.names():
        try:
            p = registry.get(name).preset
            print(f"{name:28} {p.layout:12} {p.nodes} x {p.gpus_per_pod} {p.gpu.model} "
                  f"({p.gpu.memory_gb:g} GB)  priority={p.priority} "
                  f"{'preemptible' if p.preemptible else 'non-preemptible'}"
                  f"{'  elastic ' + str(p.elastic.min) + '..' + str(p.elastic.max) if p.elastic else ''}")
        except InputError as exc:
            print(f"{name:28} REFUSED: {exc.message}")


@presets_app.command("show")
def presets_show(name: str, directory: PresetsDir = None) -> None:
    """Show one approved preset and its approval record."""
    from .manifests import dump

    approved = guarded(lambda: PresetRegistry(directory).get(name))
    sys.stdout.write(dump([preset_summary(approved)]))


@presets_app.command("approve")
def presets_approve(
    name: Annotated[str, typer.Argument(help="Preset name, or `site` for the site file.")],
    by: Annotated[str, typer.Option("--by", help="Who approves (recorded in the ledger).")],
    expires: Annotated[str | None, typer.Option(help="Expiry date YYYY-MM-DD.")] = None,
    directory: PresetsDir = None,
) -> None:
    """Record the current contents of a preset in the approvals ledger."""
    entry = guarded(lambda: PresetRegistry(directory).approve(name, by, expires=expires))
    err([f"approved {name}: sha256 {entry.sha256} by {entry.approved_by} on {entry.approved_at}"])


@presets_app.command("verify")
def presets_verify(directory: PresetsDir = None) -> None:
    """Check every file in presets/ against the ledger; exit 1 when any is refused (for CI)."""
    result = PresetRegistry(directory).verify()
    for name in result.ok:
        print(f"ok: {name}")
    err(result.problems)
    raise typer.Exit(EXIT_FINDINGS if result.problems else EXIT_OK)


# --- cluster commands (cluster.py) ---


# --- rehearse commands (rehearse.py) ---


def main() -> None:
    """Console entry point: no traceback ever reaches a user for their own mistakes."""
    try:
        app()
    except RunaiSpecError as exc:
        err(exc.lines())
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err(["error: interrupted"])
        sys.exit(130)
    except Exception as exc:  # a bug: say so, never look like findings
        err([f"error: internal error (a bug in runai-spec {__version__}): "
             f"{type(exc).__name__}: {exc}",
             "hint: please report it with the command you ran"])
        sys.exit(EXIT_INTERNAL)
