"""`plan PROFILE`: the review request the AI engineer asks for before approving a topology."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..facts.kubeflow import KIND, operator_env, replica_specs
from ..pipeline.checklist import GUIDE_CHECKLIST
from ..pipeline.workload import Workload
from ..plan.failure import failure_semantics
from ..plan.memory import memory_estimate
from ..plan.plan import Plan
from ..rehearse.records import ForeignRecord, read_record
from ..text import md_code, md_fence, md_text, one_line

CHECKLIST = tuple(item.text for item in GUIDE_CHECKLIST)


def review_dict(w: Workload) -> dict[str, Any]:
    p, prof, preset = w.plan, w.loaded.profile, w.approved.preset
    model = prof.model
    est = memory_estimate(prof, p, preset.gpu.memory_gb)
    batch = prof.batch
    ranks = []
    for i, pod in enumerate(p.pod_names):
        ranks.append(
            {
                "pod": pod,
                "gpus": p.procs_per_pod,
                "ranks": list(range(i * p.procs_per_pod, (i + 1) * p.procs_per_pod)),
            }
        )
    fs = failure_semantics(p, w.path)
    return {
        "name": p.name,
        "project": p.project,
        "namespace": p.namespace,
        "layout": p.layout,
        "model": None
        if model is None
        else {
            "parameters": model.parameters,
            "precision": model.precision,
            "sequence_length": model.sequence_length,
            "optimizer": model.optimizer,
        },
        "strategy": prof.strategy,
        "checkpoint_format": None if prof.checkpoint is None else prof.checkpoint.format,
        "pods": p.pods,
        "processes_per_pod": p.procs_per_pod,
        "world_size": p.world_size,
        "elastic": p.as_dict()["elastic"],
        "batch": None
        if batch is None
        else {
            "local": batch.local,
            "grad_accum": batch.grad_accum,
            "global": batch.global_,
            "computed": batch.local * p.world_size * batch.grad_accum,
        },
        "memory_per_gpu": None
        if est is None
        else {
            "method": est.method,
            "weights_gb": round(est.weights_gb, 2),
            "grads_gb": round(est.grads_gb, 2),
            "optimizer_gb": round(est.optimizer_gb, 2),
            "total_gb": round(est.total_gb, 2),
            "capacity_gb": est.capacity_gb,
        },
        "preset": {
            "name": w.approved.name,
            "gpu": preset.gpu.model,
            "sha256": w.approved.sha256,
            "approved_by": w.approved.approval.approved_by,
            "approved_at": w.approved.approval.approved_at,
            "expires": w.approved.approval.expires,
        },
        "launcher": shlex.join(p.command),
        "env": dict(p.env),
        "secret_env": {k: f"secretKeyRef {s}/{key}" for k, s, key in p.secret_env},
        "topology": ranks,
        "failure_semantics": {
            "choices": dict(fs.choices),
            "faults": [
                {"fault": f.fault, "outcome": f.outcome, "restarts": f.restarts, "recovers": f.recovers}
                for f in fs.faults
            ],
            "tolerated_faults": fs.tolerated,
            "survives": dict(fs.survives),
            "beyond": fault_tail(fs.tolerated, p),
            "resubmit": fs.resubmit,
        },
        "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in w.findings],
        "checklist": list(CHECKLIST),
        **ticket_dict(w),
    }


def fault_tail(tolerated: int | None, plan: Plan) -> str:
    """What happens past the faults the job survives: it fails fast, and how to resume."""
    limit = dict(plan.run_policy).get("backoffLimit")
    if tolerated is None:
        return (
            "no backoffLimit: the operator restarts failed containers forever, so a job "
            "that cannot progress keeps its GPUs until someone deletes it"
        )
    head = (
        f"the restarts above add up against backoffLimit {limit}: the job survives any "
        f"{tolerated} fault(s), and the one after reaches it"
        if tolerated
        else "at a fault it cannot recover from"
    )
    return (
        f"{head}: the operator marks the job Failed and stops every pod at once, so no "
        "GPUs stay held by a job that cannot progress (fail fast). It does not come back "
        "by itself: resubmit it, and it resumes from its last checkpoint"
    )


def review_json(w: Workload) -> str:
    return json.dumps(review_dict(w), indent=2)


def mermaid(d: dict[str, Any]) -> list[str]:
    lines = ["flowchart LR"]
    for i, pod in enumerate(d["topology"]):
        lines.append(f'  subgraph P{i}["{pod["pod"]} ({pod["gpus"]} GPU)"]')
        lines += [f'    R{r}["GPU {j}: rank {r}"]' for j, r in enumerate(pod["ranks"])]
        lines.append("  end")
    if len(d["topology"]) > 1:
        lines += [f"  P0 <--> P{i}" for i in range(1, len(d["topology"]))]
    return md_fence("\n".join(lines), "mermaid")


def _failure_lines(fs: dict[str, Any]) -> list[str]:
    """The failure semantics section: the preset's choices, then each fault's outcome."""
    # plan.failure_semantics writes these sentences from preset numbers and validated names
    # (DNS-1035): our own Markdown-free text, kept readable; only `|` would break the table
    text = ["", "## Failure semantics (preset choices)", "", "| | |", "|---|---|"]
    text += [f"| {_own(what)} | {_own(value)} |" for what, value in fs["choices"].items()]
    text += ["", "| fault | what happens | restarts used |", "|---|---|---|"]
    text += [
        f"| {_own(f['fault'])} | {_own(f['outcome'])} | "
        f"{'all of backoffLimit' if f['restarts'] is None else _own(f['restarts'])} |"
        for f in fs["faults"]
    ]
    text += ["", "| the job survives, worst case | |", "|---|---|"]
    text += [f"| {_own(what)} | {_own(n)} |" for what, n in fs["survives"].items()]
    text += ["", f"{_own(fs['beyond'][0].upper() + fs['beyond'][1:])}:", "", *md_fence(fs["resubmit"], "sh")]
    return text


def review_markdown(w: Workload) -> str:
    d = review_dict(w)
    m, b, pr = d["model"], d["batch"], d["preset"]
    out: list[str | None] = [
        f"# Review request: {md_code(d['name'])} ({md_text(d['project'])})",
        "",
        "| | |",
        "|---|---|",
        f"| layout | {md_text(d['layout'])} |",
        f"| model size | {m['parameters']:,} parameters |" if m else "| model size | not declared |",
        f"| precision | {md_text(m['precision'])} |" if m else "| precision | not declared |",
        f"| sequence length | {m['sequence_length'] or 'n/a'} |" if m else None,
        f"| strategy | {md_text(d['strategy'])} |",
        f"| checkpoint format | {md_text(d['checkpoint_format'] or 'n/a')} |",
        f"| pods x processes | {d['pods']} x {d['processes_per_pod']} |",
        f"| world size | {d['world_size']} |",
    ]
    if d["elastic"]:
        e = d["elastic"]
        out.append(f"| elastic | {e['min_pods']} to {e['max_pods']} pods, {e['max_restarts']} restarts |")
    text: list[str] = [line for line in out if line is not None]
    text += measure_lines(d)
    text += ["", "## Batch arithmetic", ""]
    if b:
        ok = "matches" if b["computed"] == b["global"] else "**does not match**"
        text.append(
            f"{b['local']} local x {d['world_size']} processes x {b['grad_accum']} "
            f"accumulation = {b['computed']} ({ok} the declared global {b['global']})"
        )
    else:
        text.append("not declared")
    text += ["", "## Memory estimate per GPU (model state, activations excluded)", ""]
    # from the estimate itself, to one decimal, as validate's ddp-replica-fits finding says it
    # (the JSON's two-decimal values rounded again could differ: issue 26 item 9)
    est = memory_estimate(w.loaded.profile, w.plan, w.approved.preset.gpu.memory_gb)
    text.append(
        f"{est.total_gb:.1f} GB of {est.capacity_gb:g} GB: weights "
        f"{est.weights_gb:.1f} + gradients {est.grads_gb:.1f} + optimizer "
        f"{est.optimizer_gb:.1f} ({md_text(est.method)})"
        if est
        else "not known for this strategy"
    )
    text += [
        "",
        "## Preset and approval",
        "",
        f"{md_code(pr['name'])} ({md_text(pr['gpu'])}), sha256 {md_code(pr['sha256'][:16])}..."
        f", approved by {md_text(pr['approved_by'])} on {md_text(pr['approved_at'])}, "
        f"expires {md_text(pr['expires'] or 'never')}",
        "",
        "## Launcher and environment",
        "",
        *md_fence(d["launcher"], "sh"),
        "",
    ]
    text += [f"- {md_code(f'{k}={v}')}" for k, v in d["env"].items()]
    text += [f"- {md_code(k)} from {md_text(v)}" for k, v in d["secret_env"].items()]
    text += _failure_lines(d["failure_semantics"])
    text += ["", "## Topology (global ranks)", ""]
    if d["elastic"]:
        text += [
            "Elastic: the pods that join form the world; ranks are assigned by torchrun's "
            "rendezvous, so the diagram shows the largest world.",
            "",
        ]
    text += mermaid(d)
    text[1:1] = readiness_lines(d)
    text += ticket_markdown(d)
    text += ["", "## Findings", ""]
    text += [
        f"- **{md_text(f['severity'])}** {md_code(f['rule'])}: {md_text(f['message'])}" for f in d["findings"]
    ] or ["none"]
    text += ["", "## Validation checklist (before the real run)", ""]
    text += [f"- [ ] {item}" for item in CHECKLIST]
    return "\n".join(text) + "\n"


# --- what the engineer asks next: image, volumes, metrics, diagnostics, exact env, rehearsal ---


def ticket_dict(w: Workload) -> dict[str, Any]:
    """The ticket's answers to the engineer's next questions, and whether submit would refuse."""
    p, prof, preset = w.plan, w.loaded.profile, w.approved.preset
    repo, _, digest = p.image.partition("@")
    tag = repo.rsplit(":", 1)[1] if ":" in repo.rsplit("/", 1)[-1] else None
    ckpt = prof.checkpoint
    jobs = [m for m in w.manifests if m.get("kind") == KIND]  # none: an MPIJob (no operator env)
    operator = {
        f"{rtype} {i}": operator_env(job, rtype, i, p.operator_version)
        for job in jobs
        for rtype, count, _ in replica_specs(job)
        for i in sorted({0, count - 1})
    }
    env = dict(p.env)
    record = read_record(p.project, p.name, str(w.path))
    return {
        "ready": not w.errors,
        "errors": len(w.errors),
        "image": {
            "image": p.image,
            "repository": repo.rsplit(":", 1)[0] if tag else repo,
            "tag": tag,
            "digest": digest or None,
        },
        "volumes": [
            {
                "name": v.name,
                "mount_path": v.mount_path,
                "read_only": v.read_only,
                "claim": v.claim,
                "memory_size": v.memory_size,
                "source": v.source,
            }
            for v in p.volumes
        ],
        "checkpoint": {
            "dir": ckpt.dir,
            "claim": p.volumes[0].claim,
            "format": ckpt.format,
            "resume": ckpt.resume,
            "on_sigterm": ckpt.on_sigterm,
        },
        "metrics": None
        if prof.metrics is None
        else {"writer": prof.metrics.writer, "tracker": prof.metrics.tracker},
        "diagnostics": {
            "nccl_debug": prof.diagnostics.nccl_debug,
            "reason": prof.diagnostics.reason,
            "on": list(p.diagnostics),
        },
        "environment": {
            "operator_version": p.operator_version,
            "container": env,
            "preset_network": {k: env[k] for k in preset.network.env if k in env},
            "operator": operator,
        },
        "rehearsal": None
        if record is None
        else {"counted": False, "record": record.path, "why": record.why}
        if isinstance(record, ForeignRecord)
        else {
            **record.as_dict(),
            "counted": True,
            "record": record.path,
            "same_profile": record.profile_sha256 == w.loaded.sha256,
        },
    }


def readiness_lines(d: dict[str, Any]) -> list[str]:
    """The ticket's first words: whether `submit` would accept this profile at all."""
    if d["ready"]:
        return []
    return [
        "",
        f"> **Not ready: {d['errors']} error finding(s); `runai-spec submit` refuses "
        "this profile until they are fixed (see Findings). Do not approve it yet.**",
    ]


def _own(text: object) -> str:
    """The tool's own sentence in a table cell: on one line, `|` escaped, no HTML."""
    return one_line(text).replace("|", "\\|").replace("<", "&lt;")


def ticket_markdown(d: dict[str, Any]) -> list[str]:
    """The ticket's sections after the topology; every value through report's escaping."""
    img, ck, m, dg = d["image"], d["checkpoint"], d["metrics"], d["diagnostics"]
    out = [
        "",
        "## Image",
        "",
        f"- repository {md_code(img['repository'])}, tag {md_code(img['tag'] or 'none')}",
        f"- digest {md_code(img['digest'])}" if img["digest"] else "- digest: **none** (not pinned)",
        "",
        "## Volumes",
        "",
        "| volume | mount | access | from |",
        "|---|---|---|---|",
    ]
    out += _volume_rows(d["volumes"])
    out += [
        "",
        "## Checkpoint and resume",
        "",
        f"{md_code(ck['dir'])} on PVC {md_code(ck['claim'])}, format "
        f"{md_text(ck['format'])}; resume: "
        + (
            md_text(ck["resume"])
            if ck["resume"]
            else "**not declared** (a restarted pod may start from step 0)"
        )
        + f"; checkpoint on SIGTERM: {'yes' if ck['on_sigterm'] else 'no'}",
        "",
        "## Metrics",
        "",
        (
            f"written by {md_text(m['writer'])}, tracker {md_text(m['tracker'] or 'not declared')}"
            if m
            else "**not declared** (who writes the metrics: `metrics.writer`)"
        ),
        "",
        "## Diagnostics",
        "",
        (
            "NCCL_DEBUG=INFO is **on**"
            + (f" ({md_text(dg['reason'])})" if dg["reason"] else " (no reason given)")
            if dg["nccl_debug"]
            else "none on"
        ),
    ]
    out += _environment_lines(d["environment"])
    out += ["## Latest rehearsal", ""]
    out += _rehearsal_lines(d["rehearsal"])
    return out


def _volume_rows(volumes: list[dict[str, Any]]) -> list[str]:
    """The volumes table's rows: name, mount path, access, and where the volume comes from."""
    out = []
    for v in volumes:
        claim = md_code(v["claim"], cell=True)
        source = (
            f"data source {md_code(v['source'], cell=True)} (PVC {claim} in the project's namespace)"
            if v.get("source")
            else f"PVC {claim}"
            if v["claim"]
            else f"memory ({md_text(v['memory_size'])})"
            if v["memory_size"]
            else "emptyDir"
        )
        out.append(
            f"| {md_text(v['name'])} | {md_code(v['mount_path'], cell=True)} | "
            f"{'read-only' if v['read_only'] else 'read-write'} | {source} |"
        )
    return out


def _environment_lines(env: dict[str, Any]) -> list[str]:
    """The exact environment: the container's variables, the preset's NCCL settings, and what
    the operator sets in each kind of pod."""
    # the version is one of kubeflow.OPERATOR_VERSIONS (the site model's Literal)
    out = [
        "",
        f"## Exact environment (training operator {env['operator_version']})",
        "",
        "The container's own variables (profile, preset network):",
        "",
    ]
    out += md_fence(
        "\n".join(f"{k}={shlex.quote(str(v))}" for k, v in env["container"].items()) or "# none", "sh"
    )
    out += [
        "",
        "NCCL settings from the preset: "
        + (", ".join(md_code(f"{k}={v}") for k, v in env["preset_network"].items()) or "none"),
        "",
    ]
    for pod, values in env["operator"].items():
        out += [f"Set by the operator in {md_text(pod)}:", ""]
        out += md_fence("\n".join(f"{k}={shlex.quote(v)}" for k, v in values.items()), "sh")
        out += [""]
    return out


def measure_lines(d: dict[str, Any]) -> list[str]:
    """Next to the GPUs asked for: what the latest counted rehearsal measured of the script's
    steps. The guide: more GPUs only once the run is compute bound and can scale."""
    r = d["rehearsal"]
    m = r.get("measures") if r and r.get("counted") else None
    out = ["", f"## Measured before scaling ({d['world_size']} processes asked for)", ""]
    if not m:
        return out + [
            "**not measured**: `runai-spec rehearse PROFILE --own-script --scaling 1,2,4` "
            "measures where each step's time goes (compute, input, checkpoint, communication) "
            "and the throughput per process as processes are added; the site guide asks for a "
            "compute-bound run before more GPUs"
        ]
    of = "" if r["same_profile"] else " of **an earlier version** of this profile"
    out.append(
        f"From the latest rehearsal{of} ({md_text(r['finished_at'])}, host "
        f"{md_code(r['written_by']['host'])}, {md_text(r['backend'])}): that machine's numbers."
    )
    out.append("")
    b, sc = m.get("bottleneck"), m.get("scaling")
    if b:
        out.append(
            f"- bottleneck: **{md_text(b.get('verdict') or b['status'])}**: {md_text(b['message'])}"
            + _earlier(b, r)
        )
    if sc:
        out.append(f"- scaling: {md_text(sc['message'])}" + _earlier(sc, r))
    if sc and sc.get("runs") and sc["status"] == "note":
        unit = "samples" if sc.get("unit") == "samples" else "steps"
        out += ["", f"| processes per pod | world | {unit}/s per process | efficiency | bottleneck |"]
        out.append("|---|---|---|---|---|")
        out += [
            f"| {_own(x['procs_per_pod'])} | {_own(x['world'])} | "
            f"{float(x.get(f'{unit}_per_s_per_process') or 0):.2f} | {_efficiency(x)} | "
            f"{_own(x['verdict'])} |"
            for x in sc["runs"]
        ]
    return out


def _earlier(measure: dict[str, Any], r: dict[str, Any]) -> str:
    """Where a measurement comes from an earlier rehearsal of the same profile than the latest
    (a --scaling series kept through later rehearsals): when, and its logs."""
    when = measure.get("measured_at")
    if not when or (when == r["finished_at"] and measure.get("logs_dir") in (None, r["logs_dir"])):
        return ""
    logs = md_code(str(measure.get("logs_dir")))
    return f" (measured by an earlier rehearsal, at {md_text(when)}; logs {logs})"


def _efficiency(run: dict[str, Any]) -> str:
    """A run's scaling efficiency as the ticket shows it: the figure, or the row's refusal with
    the relative throughput; a figure above 100 % (a record from before the row refused them)
    is never shown bare."""
    figure = run.get("efficiency")
    if figure is not None and not run.get("refused") and float(figure) <= 1.0:
        return f"{_own(round(100 * float(figure)))} %"
    relative = run.get("relative", figure)
    why = run.get("refused") or ("not an efficiency: above 100 %" if figure is not None else "not measured")
    shown = f"{round(100 * float(relative))} % of the baseline, " if relative is not None else ""
    return _own(f"{shown}{why}")


def _rehearsal_lines(r: dict[str, Any] | None) -> list[str]:
    """The latest rehearsal recorded on this machine: none, not counted, or its verdict, checks
    and who recorded it."""
    if r is None:
        return ["none recorded on this machine (`runai-spec rehearse PROFILE` records one)"]
    if not r["counted"]:
        return [
            f"a record at {md_code(r['record'])} is **not counted**: {md_text(r['why'])}. "
            "Rehearse again (`runai-spec rehearse PROFILE`) for one that counts"
        ]
    verdict = "**passed**" if r["ok"] else "**failed**"
    of = (
        "this profile"
        if r["same_profile"]
        else "**an earlier version** of this profile (its sha256 differs): rehearse again"
    )
    options = " ".join(r["options"]) if r["options"] else ""
    out = [
        f"{verdict} at {md_text(r['finished_at'])}, of {of}; world {md_text(r['world_size'])}"
        f", {md_text(r['backend'])}{', ' + md_code(options) if options else ''}; logs "
        f"{md_code(r['logs_dir'])}",
        "",
        "| check | status | message |",
        "|---|---|---|",
    ]
    out += [
        f"| {md_text(c['check'])} | {md_text(c['status'])} | {md_text(c['message'])} |" for c in r["checks"]
    ]
    by = r["written_by"]
    out += [
        "",
        f"Recorded by {md_text(by['tool'])} {md_code(by['version'])} on host "
        f"{md_code(by['host'])} as user {md_code(by['user'])}, read from "
        f"{md_code(r['record'])} on the machine that made this ticket, and signed with that "
        "user's record key there: runai-spec wrote it, unedited. It is that machine's "
        "account of a local run, not a proof: ask for the logs folder, or rehearse again.",
    ]
    return out
