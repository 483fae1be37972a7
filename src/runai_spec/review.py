"""`plan PROFILE`: the review request the AI engineer asks for before approving a topology."""

from __future__ import annotations

import json
import shlex
from typing import Any

from .plan import Plan, failure_semantics
from .policy import memory_estimate
from .workload import Workload

CHECKLIST = (
    "Every expected rank starts once and reports the same world size.",
    "Each process sees one intended GPU and no two processes claim the same device.",
    "The global batch size equals local batch size x process count x gradient accumulation.",
    "A checkpoint is written, reloaded, and produces the expected next step.",
    "Metrics are emitted once rather than duplicated by every rank.",
    "The run stops cleanly and its important logs are saved before they disappear.",
)


def review_dict(w: Workload) -> dict[str, Any]:
    p, prof, preset = w.plan, w.loaded.profile, w.approved.preset
    model = prof.model
    est = memory_estimate(prof, p, preset.gpu.memory_gb)
    batch = prof.batch
    ranks = []
    for i, pod in enumerate(p.pod_names):
        ranks.append({"pod": pod, "gpus": p.procs_per_pod,
                      "ranks": list(range(i * p.procs_per_pod, (i + 1) * p.procs_per_pod))})
    fs = failure_semantics(p, w.path)
    return {
        "name": p.name, "project": p.project, "namespace": p.namespace, "layout": p.layout,
        "model": None if model is None else {
            "parameters": model.parameters, "precision": model.precision,
            "sequence_length": model.sequence_length, "optimizer": model.optimizer},
        "strategy": prof.strategy,
        "checkpoint_format": None if prof.checkpoint is None else prof.checkpoint.format,
        "pods": p.pods, "processes_per_pod": p.procs_per_pod, "world_size": p.world_size,
        "elastic": p.as_dict()["elastic"],
        "batch": None if batch is None else {
            "local": batch.local, "grad_accum": batch.grad_accum, "global": batch.global_,
            "computed": batch.local * p.world_size * batch.grad_accum},
        "memory_per_gpu": None if est is None else {
            "method": est.method, "weights_gb": round(est.weights_gb, 2),
            "grads_gb": round(est.grads_gb, 2), "optimizer_gb": round(est.optimizer_gb, 2),
            "total_gb": round(est.total_gb, 2), "capacity_gb": est.capacity_gb},
        "preset": {"name": w.approved.name, "gpu": preset.gpu.model,
                   "sha256": w.approved.sha256,
                   "approved_by": w.approved.approval.approved_by,
                   "approved_at": w.approved.approval.approved_at,
                   "expires": w.approved.approval.expires},
        "launcher": shlex.join(p.command), "env": dict(p.env),
        "secret_env": {k: f"secretKeyRef {s}/{key}" for k, s, key in p.secret_env},
        "topology": ranks,
        "failure_semantics": {
            "choices": dict(fs.choices),
            "faults": [{"fault": f.fault, "outcome": f.outcome, "restarts": f.restarts,
                        "recovers": f.recovers} for f in fs.faults],
            "tolerated_faults": fs.tolerated, "beyond": fault_tail(fs.tolerated, p),
            "resubmit": fs.resubmit},
        "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message}
                     for f in w.findings],
        "checklist": list(CHECKLIST),
    }


def fault_tail(tolerated: int | None, plan: Plan) -> str:
    """What happens past the faults the job survives: it fails fast, and how to resume."""
    limit = dict(plan.run_policy).get("backoffLimit")
    if tolerated is None:
        return ("no backoffLimit: the operator restarts failed containers forever, so a job "
                "that cannot progress keeps its GPUs until someone deletes it")
    head = (f"the restarts above add up against backoffLimit {limit}: the job survives any "
            f"{tolerated} fault(s), and the one after reaches it" if tolerated
            else "at a fault it cannot recover from")
    return (f"{head}: the operator marks the job Failed and stops every pod at once, so no "
            "GPUs stay held by a job that cannot progress (fail fast). It does not come back "
            "by itself: resubmit it, and it resumes from its last checkpoint")


def review_json(w: Workload) -> str:
    return json.dumps(review_dict(w), indent=2)


def mermaid(d: dict[str, Any]) -> list[str]:
    lines = ["```mermaid", "flowchart LR"]
    for i, pod in enumerate(d["topology"]):
        lines.append(f'  subgraph P{i}["{pod["pod"]} ({pod["gpus"]} GPU)"]')
        lines += [f'    R{r}["GPU {j}: rank {r}"]' for j, r in enumerate(pod["ranks"])]
        lines.append("  end")
    if len(d["topology"]) > 1:
        lines += [f"  P0 <--> P{i}" for i in range(1, len(d["topology"]))]
    lines.append("```")
    return lines


def review_markdown(w: Workload) -> str:
    d = review_dict(w)
    m, b, mem, pr = d["model"], d["batch"], d["memory_per_gpu"], d["preset"]
    out: list[str | None] = [f"# Review request: `{d['name']}` ({d['project']})", "",
           "| | |", "|---|---|",
           f"| layout | {d['layout']} |",
           f"| model size | {m['parameters']:,} parameters |" if m else "| model size | not declared |",
           f"| precision | {m['precision']} |" if m else "| precision | not declared |",
           f"| sequence length | {m['sequence_length'] or 'n/a'} |" if m else None,
           f"| strategy | {d['strategy']} |",
           f"| checkpoint format | {d['checkpoint_format'] or 'n/a'} |",
           f"| pods x processes | {d['pods']} x {d['processes_per_pod']} |",
           f"| world size | {d['world_size']} |"]
    if d["elastic"]:
        e = d["elastic"]
        out.append(f"| elastic | {e['min_pods']} to {e['max_pods']} pods, "
                   f"{e['max_restarts']} restarts |")
    text: list[str] = [line for line in out if line is not None]
    text += ["", "## Batch arithmetic", ""]
    if b:
        ok = "matches" if b["computed"] == b["global"] else "**does not match**"
        text.append(f"{b['local']} local x {d['world_size']} processes x {b['grad_accum']} "
                   f"accumulation = {b['computed']} ({ok} the declared global {b['global']})")
    else:
        text.append("not declared")
    text += ["", "## Memory estimate per GPU (model state, activations excluded)", ""]
    text.append(f"{mem['total_gb']} GB of {mem['capacity_gb']:g} GB: weights {mem['weights_gb']}"
               f" + gradients {mem['grads_gb']} + optimizer {mem['optimizer_gb']} "
               f"({mem['method']})" if mem else "not known for this strategy")
    text += ["", "## Preset and approval", "",
            f"`{pr['name']}` ({pr['gpu']}), sha256 `{pr['sha256'][:16]}...`, approved by "
            f"{pr['approved_by']} on {pr['approved_at']}, expires {pr['expires'] or 'never'}",
            "", "## Launcher and environment", "", "```sh", d["launcher"], "```", ""]
    text += [f"- `{k}={v}`" for k, v in d["env"].items()]
    text += [f"- `{k}` from {v}" for k, v in d["secret_env"].items()]
    fs = d["failure_semantics"]
    text += ["", "## Failure semantics (preset choices)", "", "| | |", "|---|---|"]
    text += [f"| {what} | {value} |" for what, value in fs["choices"].items()]
    text += ["", "| fault | what happens | restarts used |", "|---|---|---|"]
    text += [f"| {f['fault']} | {f['outcome']} | "
             f"{'all of backoffLimit' if f['restarts'] is None else f['restarts']} |"
             for f in fs["faults"]]
    text += ["", f"{fs['beyond'][0].upper()}{fs['beyond'][1:]}:", "", "```sh",
             fs["resubmit"], "```"]
    text += ["", "## Topology (global ranks)", ""]
    if d["elastic"]:
        text += ["Elastic: the pods that join form the world; ranks are assigned by torchrun's "
                "rendezvous, so the diagram shows the largest world.", ""]
    text += mermaid(d)
    text += ["", "## Findings", ""]
    text += [f"- **{f['severity']}** `{f['rule']}`: {f['message']}" for f in d["findings"]] \
        or ["none"]
    text += ["", "## Validation checklist (before the real run)", ""]
    text += [f"- [ ] {item}" for item in CHECKLIST]
    return "\n".join(text) + "\n"
