"""Commands that never reach a cluster: validate, rules, plan, diff, render, explain, schema."""

# No `from __future__ import annotations`: Typer reads each command's annotations when it builds
# the command, and a string annotation is compiled there one by one (~0.15 M instructions
# each, at every run: benchmarks/README.md); the few naming a type imported only for mypy
# are quoted.
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import __version__
from ..errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError, RunaiSpecError
from .common import (
    ContextOpt,
    DebugOpt,
    Format,
    FormatOpt,
    KubeconfigOpt,
    MarkdownJson,
    MarkdownJsonOpt,
    ProfileArg,
    Profiles,
    RequestTimeoutOpt,
    TextJson,
    TextJsonOpt,
    app,
    err,
)

if TYPE_CHECKING:
    from ..findings import Finding
    from ..outputs.diff import ProfileDiff
    from ..pipeline.spool import Reported, Spooled
    from ..pipeline.stream import ProfileCheck
    from ..pipeline.workload import Workload

CrdOpt = Annotated[
    Path | None,
    typer.Option(
        "--crd",
        help="Also validate the rendered manifests against this CRD (the cluster's own: "
        "`kubectl get crd pytorchjobs.kubeflow.org -o yaml`).",
        show_default=False,
    ),
]


ValidateLiveOpt = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Also check the cluster read-only: namespace, queue and quota, priority class, "
        "PVCs, secrets, node pool, network attachments, training operator.",
    ),
]


@app.command()
def validate(
    profiles: Profiles,
    fmt: FormatOpt = Format.text,
    crd: CrdOpt = None,
    live: ValidateLiveOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
) -> int:
    """Check profiles against the preset and the site rules; exit 0 clean, 1 findings, 2 bad
    input (also when findings are listed with it: a profile with schema errors is checked on
    every field that parsed, all in one pass, sorted by line).

    Text goes to stderr like compiler messages; JSON and Markdown (for a merge-request
    comment) go to stdout."""
    from ..errors import EXIT_CLUSTER, ClusterError
    from ..pipeline.stream import ProfileArgs, check_exit

    try:
        checks, bad = validate_checks(ProfileArgs(profiles), crd, live, kubeconfig, context, request_timeout)
    except ClusterError as exc:
        err(exc.lines())
        return EXIT_CLUSTER
    print_validate(fmt, checks, bad, live)
    return check_exit(checks, bad)


def print_validate(
    fmt: Format, checks: "Spooled[ProfileCheck]", bad: "list[RunaiSpecError]", live: bool
) -> None:
    """validate's report: text on stderr (with --live, the checks that ran, pass or not);
    JSON and Markdown on stdout."""
    from ..outputs import report

    if fmt is Format.text:
        err(report.validate_text(checks, bad))
        if live:
            err([report.live_checked_line()])
    else:
        print((report.validate_json if fmt is Format.json else report.validate_markdown)(checks, bad))


def validate_checks(
    profiles: Sequence[Path],
    crd: Path | None,
    live: bool,
    kubeconfig: Path | None,
    context: str | None,
    request_timeout: float | None = None,
) -> "tuple[Spooled[ProfileCheck], list[RunaiSpecError]]":
    """Every profile checked offline, and with --live against the cluster too (read-only)."""
    from ..pipeline.stream import check_profiles

    if not live:
        return check_profiles(profiles, crd)
    from ..cluster.backend import open_backend
    from .cluster import connection

    # the live checks read the cluster with the kubeconfig: the Kubernetes back-end's hook
    with open_backend("kubernetes", connection(None, kubeconfig, context, False, request_timeout)) as b:
        b.connect()  # a wrong kubeconfig fails before the first profile is read
        return check_profiles(profiles, crd, b.live_checks)


@app.command()
def rules(fmt: FormatOpt = Format.text) -> None:
    """List every rule: the site rules, `--crd`'s and the live checks, marked live
    (`--format markdown` writes docs/rules.md)."""
    from ..outputs import report

    if fmt is Format.json:
        print(json.dumps(report.rule_docs(), indent=2))
    elif fmt is Format.markdown:
        sys.stdout.write(report.rules_markdown())
    else:
        sys.stdout.write(report.rules_text())


@app.command()
def plan(profile: ProfileArg, fmt: MarkdownJsonOpt = MarkdownJson.markdown) -> int:
    """The review request for the AI engineer (Markdown, or --format json); paste it into
    the ticket unchanged. Exit 1 when the profile has error findings (the ticket says so at
    the top: `submit` would refuse it)."""
    from ..load.registry import PresetRegistry
    from ..outputs import review
    from ..pipeline.workload import prepare_workload

    workload = prepare_workload(profile, PresetRegistry())
    print_findings(workload.findings)
    print(
        review.review_json(workload) if fmt is MarkdownJson.json else review.review_markdown(workload),
        end="" if fmt is not MarkdownJson.json else "\n",
    )
    return EXIT_FINDINGS if workload.errors else EXIT_OK


AgainstOpt = Annotated[
    Path | None,
    typer.Option("--against", help="Folder of committed manifests, one <name>.yaml per workload."),
]
LiveOpt = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Compare with the cluster instead: a "
        "server-side dry-run apply (stores nothing) against the "
        "live objects.",
    ),
]


@app.command()
def diff(
    profiles: Profiles,
    against: AgainstOpt = None,
    live: LiveOpt = False,
    fmt: FormatOpt = Format.text,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    debug: DebugOpt = False,
) -> int:
    """What the profiles render now against committed manifests (--against DIR) or the
    cluster (--live); exit 0 same, 1 changed, 2 bad input, 3 cluster error."""
    from ..outputs import diff as drift

    check_diff_options(against, live, kubeconfig or context or debug or request_timeout)
    results, stopped, bad = compare(profiles, against, kubeconfig, context, debug, request_timeout)
    err(line for exc in stopped for line in exc.lines())  # stderr too, where a CI log shows it
    if fmt is Format.json:
        print(drift.as_json(results, stopped))
    else:
        sys.stdout.write(
            drift.as_markdown(results, stopped) if fmt is Format.markdown else drift.as_text(results)
        )
    reason = drift.drift_line(results) if fmt is not Format.text else None
    err([reason] if reason else [])  # the report may be in a file: the log says why it failed
    return EXIT_INPUT if bad else EXIT_FINDINGS if stopped or any(r.changed for r in results) else EXIT_OK


def compare(
    args: Sequence[str],
    against: Path | None,
    kubeconfig: Path | None,
    context: str | None,
    debug: bool,
    request_timeout: float | None = None,
) -> "tuple[Reported[ProfileDiff], list[RunaiSpecError | Finding], list[RunaiSpecError]]":
    """diff's results, the profiles it stopped on, and which of those were bad input: against
    committed manifests, or (no folder) against the cluster."""
    from ..pipeline.stream import ProfileArgs

    profiles = ProfileArgs(args)
    if against is None:
        from .cluster import diff_live_all

        return diff_live_all(profiles, kubeconfig, context, debug, request_timeout)
    results, bad = diff_against(profiles, against)
    return results, list(bad), bad


def check_diff_options(against: Path | None, live: bool, cluster_options: object) -> None:
    if (against is None) != live:
        raise InputError(
            "pass --against DIR or --live, not both"
            if live
            else "say what to compare with: --against DIR or --live",
            field="--against/--live",
            hint="--against DIR compares with committed manifests (CI); --live with what is on the cluster",
        )
    if against is not None and cluster_options:
        raise InputError(
            "--kubeconfig, --context, --request-timeout and --debug go with --live",
            field="--against",
            hint="drop them, or use --live instead of --against",
        )


def diff_against(
    profiles: Sequence[Path], against: Path
) -> "tuple[Reported[ProfileDiff], list[RunaiSpecError]]":
    """diff --against, with a progress bar on a terminal for more than one profile."""
    from ..outputs import diff as drift

    if not sys.stderr.isatty() or len(profiles) < 2:
        return drift.diff_all(profiles, against)
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("diff", total=len(profiles))
        return drift.diff_all(profiles, against, step=lambda: progress.advance(task))


OutDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--out-dir", "-d", help="Write one <name>.yaml per workload into this folder instead of stdout."
    ),
]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        metavar="yaml|json",
        help="Output format, as kubectl's -o: yaml (default) "
        "or json (one kubectl `List` object). A value other than yaml or json is the folder of "
        "--out-dir, the old spelling (deprecated).",
    ),
]
SmokeRenderOpt = Annotated[
    bool,
    typer.Option(
        "--smoke",
        help="The in-cluster smoke test instead: "
        "the same workload as <name>-smoke, short, every "
        "pod running preflight.py from a ConfigMap.",
    ),
]
ExplainOpt = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="Each value followed by where it came from (profile line, preset, site, rule); see `explain`.",
    ),
]


@app.command()
def render(
    profiles: Profiles,
    out_dir: OutDirOpt = None,
    output: OutputOpt = None,
    smoke: SmokeRenderOpt = False,
    explain: ExplainOpt = False,
) -> int:
    """Render profiles to manifests: stdout as YAML (or, with -o json, one JSON `List`), or one
    file per workload with -d DIR."""
    from ..files import StagedFiles
    from ..pipeline.spool import Spool
    from ..pipeline.stream import ProfileArgs, render_all

    fmt, out_dir = render_target(output, out_dir, smoke, explain)
    piece = smoke_piece if smoke else explained_piece if explain else manifest_piece
    if fmt == "json":
        return render_json(ProfileArgs(profiles), piece)
    # smoke pieces are whole streams (each opens with `---`): no separator between them
    sink = StagedFiles(out_dir) if out_dir is not None else Spool(sys.stdout, "" if smoke else "---\n")
    lines, code = render_all(ProfileArgs(profiles), piece, sink)
    err(lines)
    if code == EXIT_OK:
        err(sink.commit())
    return code


def render_target(
    output: str | None, out_dir: Path | None, smoke: bool, explain: bool
) -> tuple[str, Path | None]:
    """render's format (yaml or json) and folder from its options; bad input where they do
    not combine. `-o DIR` is the old spelling of `--out-dir DIR` (a warning)."""
    fmt = "yaml"
    if output in ("yaml", "json"):
        fmt = output
    elif output is not None:
        err(
            [
                f"warning: `-o {output}` as a folder is deprecated; use `--out-dir {output}` "
                "(-o is the output format: yaml or json)"
            ]
        )
        if out_dir is not None:
            raise InputError(
                "give the folder once",
                field="--out-dir",
                hint="-o yaml|json is the format, -d DIR the folder",
            )
        out_dir = Path(output)
    if fmt == "json" and (out_dir is not None or explain):
        raise InputError(
            "JSON goes to stdout as one List; it does not combine with "
            f"{'--out-dir' if out_dir is not None else '--explain'}",
            field="-o",
        )
    if explain and (out_dir is not None or smoke):
        raise InputError(
            "prints the annotated manifests to stdout; it does not combine with "
            f"{'--out-dir' if out_dir is not None else '--smoke'}",
            field="--explain",
            hint="run `runai-spec render PROFILE --explain` on its own",
        )
    return fmt, out_dir


def render_json(profiles: Sequence[Path], piece: "Callable[[Workload], tuple[str, str]]") -> int:
    """render -o json: every object of every workload, parsed back from its YAML, printed as
    one `List` when every profile rendered; its exit code."""
    from ..pipeline.spool import Spool
    from ..pipeline.stream import render_all
    from ..render.manifests import parse

    objects: list[object] = []

    class Collect(Spool):
        def add(self, name: str, text: str) -> None:
            objects.extend(parse(text, name))

    sink = Collect(sys.stdout, "")
    lines, code = render_all(profiles, piece, sink)
    sink.discard()
    err(lines)
    if code == EXIT_OK:
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    return code


def manifest_piece(workload: "Workload") -> tuple[str, str]:
    return f"{workload.plan.name}.yaml", workload.text


def explained_piece(workload: "Workload") -> tuple[str, str]:
    from ..outputs.explain import explain_workload

    return f"{workload.plan.name}.yaml", explain_workload(workload).annotated()


def smoke_piece(workload: "Workload") -> tuple[str, str]:
    """The workload's smoke test (ConfigMap + job) under the smoke job's name."""
    from ..pipeline.smoke import smoke_names, smoke_workload
    from ..render.manifests import dump

    return f"{smoke_names(workload.plan.name)[0]}.yaml", dump(smoke_workload(workload))


@app.command()
def explain(profile: ProfileArg, fmt: TextJsonOpt = TextJson.text) -> int:
    """Show where each value of the rendered manifest came from (also `render --explain`).

    Each value is followed by `# <origin>`: the profile with its line, the preset, the site
    file, the approvals ledger, a derived rule, or the template."""
    from ..outputs.explain import explain_workload
    from ..pipeline.workload import prepare_workload

    workload = prepare_workload(profile)
    print_findings(workload.findings)
    result = explain_workload(workload)
    if fmt is TextJson.json:
        print(
            json.dumps({"profile": result.profile, "fields": [f.as_dict() for f in result.fields]}, indent=2)
        )
    else:
        sys.stdout.write(result.annotated())
    return EXIT_FINDINGS if workload.errors else EXIT_OK


def print_findings(findings: "tuple[Finding, ...]") -> None:
    err(line for finding in findings for line in finding.lines())


@app.command()
def schema() -> None:
    """Print the profile's JSON Schema (for editors)."""
    from ..load.profile import profile_schema

    print(json.dumps(profile_schema(), indent=2))


@app.command()
def version() -> None:
    """Print the runai-spec version."""
    print(__version__)
