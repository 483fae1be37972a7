"""Text, JSON and Markdown output of results: findings, the rule catalogue, diffs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..check.catalogue import RULES
from ..check.rules import REGISTRY, Rule
from ..errors import RunaiSpecError
from ..findings import Finding
from ..load.registry import PresetRegistry
from ..pipeline.spool import Reported
from ..pipeline.stream import ProfileCheck
from ..text import md_code, md_text, one_line

if TYPE_CHECKING:
    from ..cluster import LogsResult, StatusResult, SubmitResult
    from ..rehearse import RehearseResult

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def finding_dict(finding: Finding) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "severity": finding.severity,
        "file": finding.file,
        "line": finding.line,
        "path": finding.path,
        "message": finding.message,
        "hint": finding.hint,
    }


def error_dict(exc: RunaiSpecError) -> dict[str, Any]:
    out: dict[str, Any] = {
        "file": exc.file,
        "line": exc.line,
        "field": exc.field,
        "message": exc.message,
        "hint": exc.hint,
        "exit_code": exc.exit_code,
    }
    errors: tuple[RunaiSpecError, ...] = getattr(exc, "errors", ())
    findings: tuple[Finding, ...] = getattr(exc, "findings", ())
    if errors or findings:  # a profile with schema errors, checked on the fields that parsed
        out["errors"] = [error_dict(e) for e in errors]
        out["findings"] = [finding_dict(f) for f in findings]
    return out


# --- Markdown: every value written into a Markdown output is escaped here, nowhere else ---
# (plan's ticket, validate -f markdown, diff -f markdown; review.py and diff.py call these)


md_cell = md_text  # a table cell: `|` is already escaped


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = {"error": 0, "warning": 0, "info": 0}
    for finding in findings:
        out[finding.severity] += 1
    return out


# --- validate --------------------------------------------------------------------


def validate_text(workloads: Iterable[ProfileCheck], bad: list[RunaiSpecError]) -> Iterator[str]:
    """Compiler-style lines (for stderr): every finding, then `ok:` for clean profiles; made
    as they are printed."""
    for exc in bad:
        yield from exc.lines()
    for workload in workloads:
        for finding in workload.findings:
            yield from finding.lines()
        if not workload.errors:
            yield one_line(f"ok: {workload.path}: {workload.summary}")


def validate_json(workloads: Reported[ProfileCheck], bad: list[RunaiSpecError]) -> str:
    every = (f for w in workloads for f in w.findings)
    doc = {
        "summary": {
            "profiles": len(workloads) + len(bad),
            "bad_input": len(bad),
            "with_errors": sum(1 for w in workloads if w.errors),
            **counts(every),
        },
        "profiles": [
            {
                "file": w.path,
                "workload": w.workload,
                "layout": w.layout,
                "pods": w.pods,
                "procs_per_pod": w.procs_per_pod,
                "world_size": w.world_size,
                "ok": not w.errors,
                "findings": [finding_dict(f) for f in w.findings],
            }
            for w in workloads
        ],
        "bad_input": [error_dict(exc) for exc in bad],
    }
    return json.dumps(doc, indent=2)


def validate_markdown(workloads: Reported[ProfileCheck], bad: list[RunaiSpecError]) -> str:
    every = (f for w in workloads for f in w.findings)
    n = counts(every)
    failed = sum(1 for w in workloads if w.errors) + len(bad)
    verdict = "passed" if failed == 0 else f"{failed} of {len(workloads) + len(bad)} failed"
    out = [
        f"### runai-spec validate: {verdict}",
        "",
        f"{len(workloads) + len(bad)} profile(s); {n['error']} error(s), "
        f"{n['warning']} warning(s), {n['info']} note(s).",
        "",
    ]
    if bad:
        out += [
            "**Bad input** (a profile with schema errors: its findings on the fields that "
            "parsed are listed with it):",
            "",
        ]
        for exc in bad:
            errors: tuple[RunaiSpecError, ...] = getattr(exc, "errors", ()) or (exc,)
            findings: tuple[Finding, ...] = getattr(exc, "findings", ())
            items = [
                (
                    e.line or 0,
                    f"- {md_code(e.file or '')} {md_cell(e.line or '')} "
                    f"{md_cell(e.field or '')}: {md_cell(e.message)}"
                    + (f" (hint: {md_cell(e.hint)})" if e.hint else ""),
                )
                for e in errors
            ]
            items += [
                (
                    f.line or 0,
                    f"- {md_code(f.file or '')} {md_cell(f.line or '')} "
                    f"{md_cell(f.path)}: {f.severity} {md_code(f.rule)}: {md_cell(f.message)}"
                    + (f" (hint: {md_cell(f.hint)})" if f.hint else ""),
                )
                for f in findings
            ]
            out += [text for _, text in sorted(items, key=lambda item: item[0])]
        out.append("")
    for workload in workloads:
        mark = "❌" if workload.errors else "✅"
        out.append(f"#### {mark} {md_code(workload.path)}: {md_text(workload.summary)}")
        out.append("")
        if not workload.findings:
            out += ["No findings.", ""]
            continue
        out += ["| severity | rule | field | line | message | hint |", "|---|---|---|---|---|---|"]
        for f in sorted(workload.findings, key=lambda f: SEVERITY_ORDER[f.severity]):
            out.append(
                f"| {md_text(f.severity)} | {md_code(f.rule, cell=True)} | "
                f"{md_code(f.path, cell=True)} | "
                f"{f.line if f.line is not None else ''} | {md_text(f.message)} | "
                f"{md_text(f.hint or '')} |"
            )
        out.append("")
    return "\n".join(out)


# --- the rule catalogue ----------------------------------------------------------


def catalogue() -> list[Rule]:
    """Every rule of the one registry: the site rules in the catalogue's order, `validate
    --crd`'s, then the live checks' (registered by cluster/checks.py, which loads no
    kubernetes until a check runs)."""
    from ..check.crd import CRD_SCHEMA
    from ..cluster.checks import LIVE_RULES

    return [*RULES.values(), REGISTRY[CRD_SCHEMA], *LIVE_RULES]


# Which command reports each kind of rule (the catalogue's `runs` column).
RUNS = {"site": "validate", "crd": "validate --crd", "live": "validate --live, submit"}


def rule_docs() -> list[dict[str, Any]]:
    """Each rule: its id, default severity, every severity it reports (validate never reports
    another), summary, details, and whether it is a live check (it reads the cluster)."""
    return [
        {
            "id": r.id,
            "severity": r.severity,
            "severities": list(r.severities),
            "summary": r.summary,
            "details": r.doc,
            "live": r.live,
            "runs": RUNS[r.kind],
        }
        for r in catalogue()
    ]


def _severities(doc: dict[str, Any]) -> str:
    """`error`, or `error (or warning)` for a rule that reports a milder case."""
    milder = [s for s in doc["severities"] if s != doc["severity"]]
    return f"{doc['severity']} (or {' or '.join(milder)})" if milder else str(doc["severity"])


def _doc_cell(text: str) -> str:
    """A rule's summary in the catalogue's table: Markdown we wrote (backticks, `_` stay
    markup), kept on one line and in its cell."""
    return one_line(text).replace("\\", "\\\\").replace("|", "\\|")


def rules_markdown() -> str:
    """docs/rules.md, generated from the rules' ids, severities, summaries and details."""
    out = [
        "# Rules",
        "",
        "<!-- Generated by `runai-spec rules --format markdown > docs/rules.md`; "
        "tests/check/test_rules_docs.py keeps it in step with the code. -->",
        "",
        "Every finding names one of these rules. `validate` reports all of them at once; "
        "the severity shown is the rule's default, and in brackets what it reports for a "
        "milder case. Errors exit 1, warnings and notes (info) do not. The live checks read "
        "the cluster (`validate --live`, and `submit` before it sends anything; see "
        "[live checks](live-checks.md)).",
        "",
        "| rule | severity | summary | reported by |",
        "|---|---|---|---|",
    ]
    docs = rule_docs()
    out += [
        f"| [`{d['id']}`](#{d['id']}) | {_severities(d)} | {_doc_cell(d['summary'])} | `{d['runs']}` |"
        for d in docs
    ]
    for d in docs:
        out += [
            "",
            f"## {d['id']}",
            "",
            f"*{_severities(d)}*{', live' if d['live'] else ''}: {d['summary']}.",
            "",
            " ".join(d["details"].split()),
        ]
    return "\n".join(out) + "\n"


def rules_text() -> str:
    """One line a rule; a live check's summary starts with `[live]`."""
    return "".join(
        f"{d['id']:26} {'/'.join(d['severities']):18} {'[live] ' if d['live'] else ''}{d['summary']}\n"
        for d in rule_docs()
    )


# --- presets, cluster, rehearsal ---------------------------------------------------


def presets_lines(registry: PresetRegistry, project: str | None = None) -> list[str]:
    """`presets list`: one line per preset, REFUSED with the reason for one that fails; with
    PROJECT, only the presets the site's grants give that project."""
    from ..errors import InputError

    lines = []
    try:
        site = registry.site()
        grants: dict[str, list[str]] | None = site.grants
        refused = None
    except InputError as exc:  # the site file does not verify: say so, once
        grants, refused = None, exc.message
    for name in registry.names():
        if project is not None and (refused is not None or not site.granted(project, name)):
            continue  # a site file that does not verify grants nothing
        try:
            p = registry.get(name).preset
        except InputError as exc:
            # a preset is loaded against the site file: its refusal is the site's (issue 41)
            site_file = refused is not None and str(exc.file or "").endswith("site.yaml")
            why = "the site file (site.yaml) does not verify, see below" if site_file else exc.message
            lines.append(f"{name:28} REFUSED: {why}")
            continue
        elastic = f"  elastic {p.elastic.min}..{p.elastic.max}" if p.elastic else ""
        granted = "" if refused is not None else f"  granted to {granted_to(grants, name)}"
        lines.append(
            f"{name:28} {p.layout:12} {p.nodes} x {p.gpus_per_pod} {p.gpu.model} "
            f"({p.gpu.memory_gb:g} GB)  priority={p.priority} "
            f"{'preemptible' if p.preemptible else 'non-preemptible'}{elastic}{granted}"
        )
    if refused is not None:
        lines.append(f"{'site.yaml':28} REFUSED: {refused} (grants not shown)")
    return lines


def granted_to(grants: dict[str, list[str]] | None, preset: str) -> str:
    """Which projects the site's grants let use PRESET, as `presets list` shows it (the
    `preset-not-granted` hint sends researchers there)."""
    from ..load.site import ALL_PROJECTS

    if grants is None or any(n in (preset, ALL_PROJECTS) for n in grants.get(ALL_PROJECTS, [])):
        return "every project"
    projects = sorted(
        p for p, names in grants.items() if p != ALL_PROJECTS and (preset in names or ALL_PROJECTS in names)
    )
    return ", ".join(projects) if projects else "no project"


def submit_lines(result: SubmitResult) -> list[str]:
    return [
        f"{o.action}: {o.ref}{' (dry run: nothing stored)' if result.dry_run else ''}"
        for o in result.outcomes
    ]


def saved_log_lines(result: LogsResult) -> list[str]:
    """`logs --out DIR`: each pod log saved, the ranks split out of it, and the pods skipped."""
    lines = []
    for s in result.saved:
        ranks = (
            f"; {len(s.ranks)} rank(s) apart in {s.path.parent / s.pod}/rank-<k>.log"
            if s.ranks
            else "; no [rank<k>]: lines to split"
        )
        lines.append(f"saved {s.path} ({s.size} bytes{ranks})")
    return lines + [f"skipped {pod}: {why}" for pod, why in result.skipped]


def dry_run_text(result: SubmitResult) -> str:
    """`submit --dry-run=server`: what the API server would store (credentials masked)."""
    from ..render.manifests import dump
    from ..secrets import mask_object

    return dump([mask_object(o.stored) for o in result.outcomes if o.stored is not None])


def smoke_note(profile: str) -> str:
    return (
        f"note: every pod runs preflight.py: `runai-spec status {profile} --smoke` follows "
        f"it, `runai-spec logs {profile} --smoke -o DIR` saves each rank's checks, "
        f"`runai-spec delete {profile} --smoke` removes the job and its ConfigMap"
    )


def live_checked_line() -> str:
    """`validate --live`: the checks that ran, so that a pass says what it read."""
    from ..cluster.checks import LIVE_CHECKED

    return f"live checks run: {', '.join(LIVE_CHECKED)}"


def status_lines(result: StatusResult) -> list[str]:
    """`status`: the job's phase, then a line per pod and per reason it is pending."""
    lines = [
        f"{result.name} ({result.namespace}): {result.phase}{': ' + result.message if result.message else ''}"
    ]
    lines += [
        f"  {p.name}  {p.role} {p.index}  {p.phase}  {p.state}  "
        f"restarts {'unknown' if p.restarts is None else p.restarts}"
        f"{'  on ' + p.node if p.node else ''}"
        for p in result.pods
    ]
    lines += [f"  pending: {reason}" for reason in result.pending_reasons]
    q = result.queue
    if q is not None:  # apart from the run: the smoke test's own deadline never counts it
        took = f"{int(q.seconds) // 60} min {int(q.seconds) % 60} s"
        lines.append(
            f"  queued {took} so far ({q.waiting} pod(s) not placed yet)"
            if q.waiting
            else f"  queued {took} before its last pod was placed"
        )
    return lines


def print_rehearsal(result: RehearseResult, name: str) -> list[str]:
    """`rehearse`: the checks as a table on stdout (rich, imported only here); returns the
    lines saying where the logs are (for stderr)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    restarted = any(c.attempt is not None for c in result.checks)
    table = Table(
        title=f"rehearse {name}: world {result.world_size}, {result.backend}",
        caption="attempt 1: the job until one pod was killed after the first "
        "checkpoint; 2: the job restarted; 1→2: the restart itself"
        if restarted
        else None,
    )
    for column in ("attempt",) * restarted + ("check", "status"):
        table.add_column(column)
    table.add_column("message", overflow="fold")  # a log's path whole, never cut short
    for i, c in enumerate(result.checks):
        row: tuple[str, ...] = (c.check, c.status, escape(c.message))  # paths, argv: text
        if restarted:
            row = ("1→2" if c.attempt is None else str(c.attempt + 1), *row)
        after = result.checks[i + 1].attempt if i + 1 < len(result.checks) else c.attempt
        table.add_row(*row, end_section=after != c.attempt)
    Console().print(table)
    # plain lines: rich would read torchrun's [default0] prefix as markup
    again = (
        " (pod.attempt<N>.log: the pod restarted or recreated)"
        if restarted or any(o.attempt for o in result.pods)
        else ""
    )
    if result.mpirun_log is not None:
        from ..rehearse.mpi import ATTEMPT_MARK as MPI_ATTEMPT_MARK

        return [
            f"logs: {result.logs_dir}",
            f"  mpirun (the launcher pod; every rank's lines, each launcher attempt after a line "
            f"'{MPI_ATTEMPT_MARK}'): {result.mpirun_log}",
        ]
    lines = [
        f"logs: {result.logs_dir}",
        f"  each pod: {result.logs_dir}/<pod>/pod.log"
        f"{again} (launcher and "
        # torch 2.13: torchrun's --tee copies a rank's lines as [<role><local rank>]: (tail_log.py,
        # with no --log-line-prefix-template); torch's own messages in a rank carry [rank<global rank>]:
        "every rank: lines torchrun tees prefixed [default<local rank>]:, torch's own "
        "[rank<global rank>]:)",
    ]
    if any(o.rank_logs for o in result.pods):
        lines.append(
            f"  each rank: {result.logs_dir}/<pod>/ranks/<run id>/attempt_0/"
            "<local rank>/{stdout,stderr}.log"
        )
    return lines
