"""Text, JSON and Markdown output of results: findings, the rule catalogue, diffs."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import Any

from .errors import RunaiSpecError
from .findings import Finding
from .policy import RULES
from .workload import Workload

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def finding_dict(finding: Finding) -> dict[str, Any]:
    return {"rule": finding.rule, "severity": finding.severity, "file": finding.file,
            "line": finding.line, "path": finding.path, "message": finding.message,
            "hint": finding.hint}


def error_dict(exc: RunaiSpecError) -> dict[str, Any]:
    return {"file": exc.file, "field": exc.field, "message": exc.message, "hint": exc.hint,
            "exit_code": exc.exit_code}


def md_cell(text: object) -> str:
    """A value safe inside one Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def md_code(text: object) -> str:
    """Inline code that survives backticks in the value."""
    value = str(text).replace("\n", " ")
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = {"error": 0, "warning": 0, "info": 0}
    for finding in findings:
        out[finding.severity] += 1
    return out


def workload_summary(workload: Workload) -> str:
    p = workload.plan
    return (f"{p.name}: {p.layout}, {p.pods} pod(s) x {p.procs_per_pod} process(es), "
            f"world size {p.world_size}")


# --- validate --------------------------------------------------------------------

def validate_text(workloads: list[Workload], bad: list[RunaiSpecError]) -> list[str]:
    """Compiler-style lines (for stderr): every finding, then `ok:` for clean profiles."""
    lines: list[str] = []
    for exc in bad:
        lines += exc.lines()
    for workload in workloads:
        for finding in workload.findings:
            lines += finding.lines()
        if not workload.errors:
            lines.append(f"ok: {workload.path}: {workload_summary(workload)}")
    return lines


def validate_json(workloads: list[Workload], bad: list[RunaiSpecError]) -> str:
    every = [f for w in workloads for f in w.findings]
    doc = {
        "summary": {"profiles": len(workloads) + len(bad), "bad_input": len(bad),
                    "with_errors": sum(1 for w in workloads if w.errors), **counts(every)},
        "profiles": [{"file": w.path, "workload": w.plan.name, "layout": w.plan.layout,
                      "pods": w.plan.pods, "procs_per_pod": w.plan.procs_per_pod,
                      "world_size": w.plan.world_size, "ok": not w.errors,
                      "findings": [finding_dict(f) for f in w.findings]} for w in workloads],
        "bad_input": [error_dict(exc) for exc in bad],
    }
    return json.dumps(doc, indent=2)


def validate_markdown(workloads: list[Workload], bad: list[RunaiSpecError]) -> str:
    every = [f for w in workloads for f in w.findings]
    n = counts(every)
    failed = sum(1 for w in workloads if w.errors) + len(bad)
    verdict = "passed" if failed == 0 else f"{failed} of {len(workloads) + len(bad)} failed"
    out = [f"### runai-spec validate: {verdict}", "",
           f"{len(workloads) + len(bad)} profile(s); {n['error']} error(s), "
           f"{n['warning']} warning(s), {n['info']} note(s).", ""]
    if bad:
        out += ["**Bad input** (not checked further):", ""]
        out += [f"- {md_code(exc.file or '')} {md_cell(exc.field or '')}: {md_cell(exc.message)}"
                + (f" (hint: {md_cell(exc.hint)})" if exc.hint else "") for exc in bad]
        out.append("")
    for workload in workloads:
        mark = "❌" if workload.errors else "✅"
        out.append(f"#### {mark} {md_code(workload.path)}: {md_cell(workload_summary(workload))}")
        out.append("")
        if not workload.findings:
            out += ["No findings.", ""]
            continue
        out += ["| severity | rule | field | line | message | hint |",
                "|---|---|---|---|---|---|"]
        for f in sorted(workload.findings, key=lambda f: SEVERITY_ORDER[f.severity]):
            out.append(f"| {f.severity} | {md_code(f.rule)} | {md_code(f.path)} | "
                       f"{f.line if f.line is not None else ''} | {md_cell(f.message)} | "
                       f"{md_cell(f.hint or '')} |")
        out.append("")
    return "\n".join(out)


# --- the rule catalogue ----------------------------------------------------------

def rule_docs() -> list[dict[str, str]]:
    return [{"id": r.id, "severity": r.severity, "summary": r.summary,
             "details": inspect.cleandoc(r.check.__doc__ or "")} for r in RULES.values()]


def rules_markdown() -> str:
    """docs/rules.md, generated from the rules' ids, severities, summaries and docstrings."""
    out = ["# Rules", "",
           "<!-- Generated by `runai-spec rules --format markdown > docs/rules.md`; "
           "tests/test_rules_docs.py keeps it in step with the code. -->", "",
           "Every finding names one of these rules. `validate` reports all of them at once; "
           "the severity shown is the rule's default (a rule may report a warning or a note "
           "for a milder case). Errors exit 1, warnings and notes do not.", "",
           "| rule | severity | summary |", "|---|---|---|"]
    docs = rule_docs()
    out += [f"| [`{d['id']}`](#{d['id']}) | {d['severity']} | {md_cell(d['summary'])} |"
            for d in docs]
    for d in docs:
        out += ["", f"## {d['id']}", "", f"*{d['severity']}*: {d['summary']}.", "",
                " ".join(d["details"].split())]
    return "\n".join(out) + "\n"


def rules_text() -> str:
    return "".join(f"{d['id']:26} {d['severity']:8} {d['summary']}\n" for d in rule_docs())
