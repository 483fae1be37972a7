"""Typer commands: parse, call the core, print, exit."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

from . import __version__
from .errors import (
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    ClusterError,
    InputError,
    RunaiSpecError,
)
from .findings import Finding
from .presets import PresetRegistry, preset_summary
from .workload import Workload, prepare_workload

if TYPE_CHECKING:
    from . import cluster
    from .diff import ProfileDiff
    from .manifests import Manifest

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


def prepared(profiles: list[Path]) -> list[Workload]:
    """Every profile through the pipeline, or exit: all bad input (2) and error findings (1)
    reported together first, with the warnings."""
    workloads, bad = prepare_all(profiles)
    for exc in bad:
        err(exc.lines())
    for workload in workloads:
        print_findings(workload.findings)
    code = findings_exit(workloads, bad)
    if code != EXIT_OK:
        raise typer.Exit(code)
    return workloads


@app.command()
def validate(profiles: Profiles, fmt: FormatOpt = Format.text) -> None:
    """Check profiles against the preset and the site rules; exit 0 clean, 1 findings, 2 bad input.

    Text goes to stderr like compiler messages; JSON and Markdown (for a merge-request
    comment) go to stdout."""
    from . import report

    workloads, bad = prepare_all(profiles)
    if fmt is Format.json:
        print(report.validate_json(workloads, bad))
    elif fmt is Format.markdown:
        print(report.validate_markdown(workloads, bad))
    else:
        err(report.validate_text(workloads, bad))
    raise typer.Exit(findings_exit(workloads, bad))


@app.command()
def rules(fmt: FormatOpt = Format.text) -> None:
    """List the site rules (`--format markdown` writes docs/rules.md)."""
    from . import report

    if fmt is Format.json:
        print(json.dumps(report.rule_docs(), indent=2))
    elif fmt is Format.markdown:
        sys.stdout.write(report.rules_markdown())
    else:
        sys.stdout.write(report.rules_text())


@app.command()
def plan(profile: Annotated[Path, typer.Argument(help="Profile file (profile.yaml).")],
         fmt: FormatOpt = Format.markdown) -> None:
    """The review request for the AI engineer (Markdown, or --format json); paste it into
    the ticket unchanged."""
    from . import review

    workload = guarded(lambda: prepare_workload(profile, PresetRegistry()))
    print(review.review_json(workload) if fmt is Format.json else review.review_markdown(workload),
          end="" if fmt is not Format.json else "\n")


@app.command()
def diff(
    profiles: Profiles,
    against: Annotated[Path | None, typer.Option("--against", help="Folder of committed manifests, "
                                                 "one <name>.yaml per workload.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Compare with the cluster instead: a "
                                       "server-side dry-run apply (stores nothing) against the "
                                       "live objects.")] = False,
    fmt: FormatOpt = Format.text,
    kubeconfig: KubeconfigOpt = None, context: ContextOpt = None, debug: DebugOpt = False,
) -> None:
    """What the profiles render now against committed manifests (--against DIR) or the
    cluster (--live); exit 0 same, 1 changed, 2 bad input, 3 cluster error."""
    from . import diff as drift

    if (against is None) != live:
        fail(InputError("pass --against DIR or --live, not both" if live else
                        "say what to compare with: --against DIR or --live",
                        field="--against/--live", hint="--against DIR compares with committed "
                        "manifests (CI); --live with what is on the cluster"))
    if against is not None and (kubeconfig or context or debug):
        fail(InputError("--kubeconfig, --context and --debug go with --live",
                        field="--against", hint="drop them, or use --live instead of --against"))

    def run() -> tuple[list[drift.ProfileDiff], list[RunaiSpecError]]:
        assert against is not None
        if not sys.stderr.isatty() or len(profiles) < 2:
            return drift.diff_all(profiles, against)
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            task = progress.add_task("diff", total=len(profiles))
            return drift.diff_all(profiles, against,
                                  step=lambda: progress.advance(task))

    bad: list[RunaiSpecError] = []
    stopped: list[RunaiSpecError | Finding] = []  # --live sends nothing if any profile fails
    results: list[drift.ProfileDiff] = []
    if live:
        workloads, bad = prepare_all(profiles)
        stopped = [*bad, *(f for w in workloads for f in w.errors)]
        if not stopped:
            results = diff_live_all(workloads, cluster_target(kubeconfig, context, debug))
    else:
        results, bad = guarded(run)
        stopped = list(bad)
    err(line for exc in stopped for line in exc.lines())  # stderr too, where a CI log shows it
    if fmt is Format.json:
        print(drift.as_json(results, stopped))
    elif fmt is Format.markdown:
        sys.stdout.write(drift.as_markdown(results, stopped))
    else:
        sys.stdout.write(drift.as_text(results))
    if bad:
        raise typer.Exit(EXIT_INPUT)
    raise typer.Exit(EXIT_FINDINGS if stopped or any(r.changed for r in results) else EXIT_OK)


def diff_live_all(workloads: list[Workload], target: cluster.Target) -> list[ProfileDiff]:
    """diff --live of checked workloads (none with an error finding), in one session."""
    from . import cluster
    from . import diff as drift

    live = guarded(lambda: cluster.live_objects_all([w.manifests for w in workloads], target))
    for objects in live:
        err(f"note: {o.ref}: exists and was not created by runai-spec; submit will not touch it"
            for o in objects if o.live is not None and not cluster.managed_by_us(o.live))
    return [drift.diff_live(w.path, w.manifests, [(o.live, o.applied) for o in objects])
            for w, objects in zip(workloads, live, strict=True)]


@app.command()
def render(
    profiles: Profiles,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write one <name>.yaml per "
                                             "workload into this folder instead of stdout.")] = None,
    smoke: Annotated[bool, typer.Option("--smoke", help="The in-cluster smoke test instead: the "
                                        "same workload as <name>-smoke, short, every pod running "
                                        "preflight.py from a ConfigMap.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Each value followed by where it came "
                                          "from (profile line, preset, site, rule); see `explain`."
                                          )] = False,
) -> None:
    """Render profiles to manifests (stdout, or one file per workload with -o)."""
    if explain and (out is not None or smoke):
        fail(InputError("prints the annotated manifests to stdout; it does not combine with "
                        f"{'--out' if out is not None else '--smoke'}", field="--explain",
                        hint="run `runai-spec render PROFILE --explain` on its own"))
    workloads = prepared(profiles)
    names = [w.plan.name for w in workloads]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        fail(InputError(f"two profiles render the workload {duplicate!r}", field="name",
                        hint="workload names must be unique within one call"))
    if explain:
        from .provenance import explain_workload

        sys.stdout.write("---\n".join(explain_workload(w).annotated() for w in workloads))
        return
    if smoke:
        from .manifests import dump

        smoked = smoke_all(workloads)
        files = {f"{name}.yaml": dump(manifests) for name, manifests in smoked.items()}
        # one stream: the ConfigMap and job of every profile, no empty document in between
        text = dump([m for manifests in smoked.values() for m in manifests])
    else:
        files = {f"{w.plan.name}.yaml": w.text for w in workloads}
        text = "---\n".join(files.values())
    if out is None:
        sys.stdout.write(text)
        return
    guarded(lambda: write_files(out, files))
    err([f"wrote {out / name}" for name in files])


def smoke_all(workloads: list[Workload]) -> dict[str, list[Manifest]]:
    """Each workload's smoke test (ConfigMap + job) by the smoke job's name; a workload it
    cannot be made for (a name too long for `-smoke`) is bad input, all reported at once."""
    from .rehearse import smoke_names, smoke_workload

    done: dict[str, list[Manifest]] = {}
    bad: list[RunaiSpecError] = []
    for workload in workloads:
        try:
            manifests = smoke_workload(workload)
        except InputError as exc:
            bad.append(exc)
            continue
        done[smoke_names(workload.plan.name)[0]] = manifests
    for problem in bad:
        err(problem.lines())
    if bad:
        raise typer.Exit(EXIT_INPUT)
    return done


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
def explain(profile: Annotated[Path, typer.Argument(help="Profile file (profile.yaml).")],
            fmt: FormatOpt = Format.text) -> None:
    """Show where each value of the rendered manifest came from (also `render --explain`).

    Each value is followed by `# <origin>`: the profile with its line, the preset, the site
    file, the approvals ledger, a derived rule, or the template."""
    from .provenance import explain_workload

    workload = guarded(lambda: prepare_workload(profile))
    print_findings(workload.findings)
    result = explain_workload(workload)
    if fmt is Format.json:
        print(json.dumps({"profile": result.profile,
                          "fields": [f.as_dict() for f in result.fields]}, indent=2))
    elif fmt is Format.markdown:
        fail(InputError("explain has no Markdown format", field="--format",
                        hint="use --format text (annotated YAML) or json"))
    else:
        sys.stdout.write(result.annotated())
    raise typer.Exit(EXIT_FINDINGS if workload.errors else EXIT_OK)


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

KubeconfigOpt = Annotated[Path | None, typer.Option(
    "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context to use.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Log each API request to stderr "
                                        "(never headers, tokens or the kubeconfig).")]
JobArg = Annotated[str, typer.Argument(help="Workload name, or its profile file.", show_default=False)]
ProjectOpt = Annotated[str | None, typer.Option(
    "--project", help="Run:ai project of a workload NAME: the site file maps it to the namespace.")]


class DryRun(StrEnum):
    server = "server"


def cluster_target(kubeconfig: Path | None, context: str | None, debug: bool) -> cluster.Target:
    from . import cluster

    if debug:
        cluster.enable_debug()
    return cluster.Target(kubeconfig=kubeconfig, context=context)


def checked_workload(path: Path) -> Workload:
    """Render and check a profile; an error finding stops here, before any request."""
    workload = guarded(lambda: prepare_workload(path))
    print_findings(workload.findings)
    if workload.errors:
        raise typer.Exit(EXIT_FINDINGS)
    return workload


def job_refs(job: str, project: str | None, smoke: bool = False) -> list[cluster.Ref]:
    """NAME|PROFILE -> the objects on the cluster; the namespace always comes from the site file.
    With smoke: the workload's smoke test, its job and its ConfigMap."""
    from . import cluster
    from .manifests import DNS1035
    from .plan import namespace_for

    if Path(job).suffix in (".yaml", ".yml") or Path(job).is_file():
        workload = guarded(lambda: prepare_workload(Path(job)))
        if smoke:
            return smoke_refs(workload.plan.name, workload.plan.namespace)
        return guarded(lambda: [cluster.ref_of(m) for m in workload.manifests])
    if not DNS1035.match(job) or len(job) > 63:
        fail(InputError(f"{job!r} is neither a profile file nor a workload name", field="NAME"))
    if project is None:
        fail(InputError("a workload NAME needs --project (or pass its profile instead)",
                        field="--project"))
    site = guarded(lambda: PresetRegistry().site())
    namespace = namespace_for(site, project)
    return smoke_refs(job, namespace) if smoke else [cluster.job_ref(job, namespace)]


def smoke_refs(name: str, namespace: str) -> list[cluster.Ref]:
    """A workload's smoke test on the cluster: the job first, then the ConfigMap its pods mount."""
    from . import cluster
    from .rehearse import smoke_names

    job, configmap = smoke_names(name)
    return [cluster.job_ref(job, namespace), cluster.Ref(cluster.CONFIGMAP, namespace, configmap)]


SmokeOpt = Annotated[bool, typer.Option("--smoke", help="The workload's in-cluster smoke test "
                                        "(`render --smoke`): job <name>-smoke and its ConfigMap.")]


@app.command()
def submit(
    profile: Annotated[Path, typer.Argument(help="Profile file.", show_default=False)],
    dry_run: Annotated[DryRun | None, typer.Option("--dry-run", help="`server`: the API server "
                                                   "checks it and shows what it would store.")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Delete a different earlier render of "
                                          "the same name and create this one.")] = False,
    smoke: SmokeOpt = False,
    kubeconfig: KubeconfigOpt = None, context: ContextOpt = None, debug: DebugOpt = False,
) -> None:
    """Render, check and send a workload with server-side apply (re-submitting changes nothing);
    --smoke sends its smoke test instead (a ConfigMap with preflight.py and job <name>-smoke)."""
    from . import cluster

    workload = checked_workload(profile)
    manifests = list(workload.manifests)
    if smoke:
        (manifests,) = smoke_all([workload]).values()
    target = cluster_target(kubeconfig, context, debug)
    result = guarded(lambda: cluster.submit_manifests(manifests, target,
                                                      dry_run=dry_run is not None, replace=replace))
    err(f"{o.action}: {o.ref}{' (dry run: nothing stored)' if result.dry_run else ''}"
        for o in result.outcomes)
    if result.dry_run:
        from .manifests import dump

        sys.stdout.write(dump([o.stored for o in result.outcomes if o.stored is not None]))
    elif smoke:
        err([f"note: every pod runs preflight.py: `runai-spec status {profile} --smoke` follows "
             f"it, `runai-spec logs {profile} --smoke -o DIR` saves each rank's checks, "
             f"`runai-spec delete {profile} --smoke` removes the job and its ConfigMap"])


@app.command()
def status(job: JobArg, project: ProjectOpt = None, fmt: FormatOpt = Format.text,
           smoke: SmokeOpt = False, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None,
           debug: DebugOpt = False) -> None:
    """The job's phase, each pod's state and, when it is pending, why."""
    from . import cluster

    ref = job_refs(job, project, smoke)[0]
    result = guarded(lambda: cluster.job_status(ref.name, ref.namespace,
                                                cluster_target(kubeconfig, context, debug)))
    if fmt is Format.json:
        print(json.dumps(dataclasses.asdict(result), indent=2))
        return
    print(f"{result.name} ({result.namespace}): {result.phase}"
          f"{': ' + result.message if result.message else ''}")
    for p in result.pods:
        print(f"  {p.name}  {p.role} {p.index}  {p.phase}  {p.state}  restarts {p.restarts}"
              f"{'  on ' + p.node if p.node else ''}")
    for reason in result.pending_reasons:
        print(f"  pending: {reason}")


@app.command()
def logs(job: JobArg, out: Annotated[Path, typer.Option("--out", "-o", help="Folder for one "
                                                         "<pod>.log per rank.", show_default=False)],
         previous: Annotated[bool, typer.Option("--previous", help="The restarted containers' "
                                                "earlier logs.")] = False,
         project: ProjectOpt = None, smoke: SmokeOpt = False, kubeconfig: KubeconfigOpt = None,
         context: ContextOpt = None, debug: DebugOpt = False) -> None:
    """Save every rank's (pod's) log in its own file, so the logs outlive the pods."""
    from . import cluster

    ref = job_refs(job, project, smoke)[0]
    result = guarded(lambda: cluster.save_logs(ref.name, ref.namespace, out, cluster_target(
        kubeconfig, context, debug), previous=previous))
    err([f"saved {s.path} ({s.size} bytes)" for s in result.saved])
    err([f"skipped {pod}: {why}" for pod, why in result.skipped])
    if not result.saved:
        fail(ClusterError(f"{ref}: no pod had a log to save", file="cluster",
                          hint="`runai-spec status` shows the pods' states"))


@app.command()
def delete(job: JobArg, yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask "
                                                          "(for scripts).")] = False,
           project: ProjectOpt = None, smoke: SmokeOpt = False, kubeconfig: KubeconfigOpt = None,
           context: ContextOpt = None, debug: DebugOpt = False) -> None:
    """Delete a workload runai-spec created (asks first; its pods and their logs go too);
    --smoke deletes its smoke test, job and ConfigMap (either may already be gone)."""
    from . import cluster

    refs = job_refs(job, project, smoke=smoke)
    if not yes:
        if not sys.stdin.isatty():
            fail(InputError("refusing to delete without confirmation", field="--yes",
                            hint="pass --yes in scripts"))
        if not typer.confirm(f"delete {', '.join(map(str, refs))} and its pods (save logs first "
                             "with `runai-spec logs`)?"):
            raise typer.Exit(EXIT_FINDINGS)
    result = guarded(lambda: cluster.delete_job(refs, cluster_target(kubeconfig, context, debug),
                                                missing_ok=smoke))
    err(f"deleted: {ref}" for ref in result.deleted)
    err(f"already gone: {ref}" for ref in result.missing)


# --- rehearse commands (rehearse.py) ---


@app.command()
def rehearse(
    profile: Annotated[Path, typer.Argument(help="Profile file (profile.yaml).")],
    procs_per_pod: Annotated[int | None, typer.Option(
        "--procs-per-pod", help="Processes per pod here (scale down on a CPU machine).")] = None,
    own_script: Annotated[bool, typer.Option(
        "--own-script", help="Run the profile's own command instead of preflight.py.")] = False,
    restart_after_checkpoint: Annotated[bool, typer.Option(
        "--restart-after-checkpoint",
        help="Kill one pod after the first checkpoint, restart, check the resume.")] = False,
    logs: Annotated[Path | None, typer.Option("--logs", help="Folder for per-pod and per-rank "
                                              "logs (default: a new temporary folder).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS",
        help="How long the pods may run. Then they are stopped: preflight.py still running has "
             "failed, your own script (--own-script) still running is healthy.")] = 300.0,
) -> None:
    """Rehearse the rendered workload here: one process per pod, the operator's environment."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .rehearse import RESTART_OWN_SCRIPT, check_timeout, preflight_settings, rehearse_manifests

    if restart_after_checkpoint and own_script:
        fail(InputError(RESTART_OWN_SCRIPT))
    guarded(lambda: check_timeout(timeout))
    workload = guarded(lambda: prepare_workload(profile))
    print_findings(workload.findings)
    result = guarded(lambda: rehearse_manifests(
        list(workload.manifests), settings=preflight_settings(workload),
        procs_per_pod=procs_per_pod, own_script=own_script,
        restart_after_checkpoint=restart_after_checkpoint, logs_dir=logs, timeout_s=timeout))
    restarted = any(c.attempt is not None for c in result.checks)
    table = Table(title=f"rehearse {workload.plan.name}: world {result.world_size}, "
                        f"{result.backend}",
                  caption="attempt 1: the job until one pod was killed after the first "
                          "checkpoint; 2: the job restarted; 1→2: the restart itself"
                  if restarted else None)
    for column in ("attempt",) * restarted + ("check", "status"):
        table.add_column(column)
    table.add_column("message", overflow="fold")  # a log's path whole, never cut short
    for i, c in enumerate(result.checks):
        row: tuple[str, ...] = (c.check, c.status, escape(c.message))  # paths, argv: text
        if restarted:
            row = ("1→2" if c.attempt is None else str(c.attempt + 1), *row)
        after = result.checks[i + 1].attempt if i + 1 < len(result.checks) else c.attempt
        table.add_row(*row, end_section=after != c.attempt)
    console = Console(stderr=True)
    console.print(table)
    # plain print: rich would read torchrun's [default0] prefix as markup
    err([f"logs: {result.logs_dir}",
         f"  each pod: {result.logs_dir}/<pod>/pod.log"
         f"{' (pod.attempt1.log: the restarted job)' if restarted else ''} (launcher and every "
         "rank, a rank's lines prefixed [default<local rank>])"])
    if any(o.rank_logs for o in result.pods):
        err([f"  each rank: {result.logs_dir}/<pod>/ranks/<run id>/attempt_0/<local rank>/"
             "{stdout,stderr}.log"])
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FINDINGS)


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
