"""`plan PROFILE`: the review request the AI engineer asks for before approving a topology."""

from __future__ import annotations

import json
import shlex
from typing import Any

from .kubeflow import KIND, operator_env, replica_specs
from .policy import memory_estimate
from .rehearsals import read_record
from .report import md_cell
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
        "findings": [{"rule": f.rule, "severity": f.severity, "message": f.message}
                     for f in w.findings],
        "checklist": list(CHECKLIST),
        **ticket_dict(w),
    }


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
    text += ["", "## Topology (global ranks)", ""]
    if d["elastic"]:
        text += ["Elastic: the pods that join form the world; ranks are assigned by torchrun's "
                "rendezvous, so the diagram shows the largest world.", ""]
    text += mermaid(d)
    text[1:1] = readiness_lines(d)
    text += ticket_markdown(d)
    text += ["", "## Findings", ""]
    text += [f"- **{f['severity']}** `{f['rule']}`: {f['message']}" for f in d["findings"]] \
        or ["none"]
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
    job = next(m for m in w.manifests if m.get("kind") == KIND)
    operator = {f"{rtype} {i}": operator_env(job, rtype, i, p.operator_version)
                for rtype, count, _ in replica_specs(job) for i in sorted({0, count - 1})}
    env = dict(p.env)
    record = read_record(p.project, p.name)
    return {
        "ready": not w.errors,
        "errors": len(w.errors),
        "image": {"image": p.image, "repository": repo.rsplit(":", 1)[0] if tag else repo,
                  "tag": tag, "digest": digest or None},
        "volumes": [{"name": v.name, "mount_path": v.mount_path, "read_only": v.read_only,
                     "claim": v.claim, "memory_size": v.memory_size, "source": v.source}
                    for v in p.volumes],
        "checkpoint": {"dir": ckpt.dir, "claim": p.volumes[0].claim, "format": ckpt.format,
                       "resume": ckpt.resume, "on_sigterm": ckpt.on_sigterm},
        "metrics": None if prof.metrics is None else {
            "writer": prof.metrics.writer, "tracker": prof.metrics.tracker},
        "diagnostics": {"nccl_debug": prof.diagnostics.nccl_debug,
                        "reason": prof.diagnostics.reason, "on": list(p.diagnostics)},
        "environment": {
            "operator_version": p.operator_version,
            "container": env,
            "preset_network": {k: env[k] for k in preset.network.env if k in env},
            "operator": operator},
        "rehearsal": None if record is None else {
            **record.as_dict(), "same_profile": record.profile_sha256 == w.loaded.sha256},
    }


def readiness_lines(d: dict[str, Any]) -> list[str]:
    """The ticket's first words: whether `submit` would accept this profile at all."""
    if d["ready"]:
        return []
    return ["", f"> **Not ready: {d['errors']} error finding(s); `runai-spec submit` refuses "
            "this profile until they are fixed (see Findings). Do not approve it yet.**"]


def ticket_markdown(d: dict[str, Any]) -> list[str]:
    img, ck, m, dg, env = (d["image"], d["checkpoint"], d["metrics"], d["diagnostics"],
                           d["environment"])
    out = ["", "## Image", "",
           f"- repository `{img['repository']}`, tag `{img['tag'] or 'none'}`",
           f"- digest `{img['digest']}`" if img["digest"] else "- digest: **none** (not pinned)",
           "", "## Volumes", "", "| volume | mount | access | from |", "|---|---|---|---|"]
    for v in d["volumes"]:
        source = (f"data source `{v['source']}` (PVC `{v['claim']}` in the project's namespace)"
                  if v.get("source") else f"PVC `{v['claim']}`" if v["claim"] else
                  f"memory ({v['memory_size']})" if v["memory_size"] else "emptyDir")
        out.append(f"| {v['name']} | `{v['mount_path']}` | "
                   f"{'read-only' if v['read_only'] else 'read-write'} | {source} |")
    out += ["", "## Checkpoint and resume", "",
            f"`{ck['dir']}` on PVC `{ck['claim']}`, format {ck['format']}; resume: "
            + (md_cell(ck["resume"]) if ck["resume"] else
               "**not declared** (a restarted pod may start from step 0)")
            + f"; checkpoint on SIGTERM: {'yes' if ck['on_sigterm'] else 'no'}",
            "", "## Metrics", "",
            (f"written by {m['writer']}, tracker {m['tracker'] or 'not declared'}" if m
             else "**not declared** (who writes the metrics: `metrics.writer`)"),
            "", "## Diagnostics", "",
            ("NCCL_DEBUG=INFO is **on**" + (f" ({md_cell(dg['reason'])})" if dg["reason"]
                                            else " (no reason given)") if dg["nccl_debug"]
             else "none on"),
            "", f"## Exact environment (training operator {env['operator_version']})", "",
            "The container's own variables (profile, preset network):", "", "```sh"]
    out += [f"{k}={shlex.quote(str(v))}" for k, v in env["container"].items()] or ["# none"]
    out += ["```", "", "NCCL settings from the preset: " + (", ".join(
        f"`{k}={v}`" for k, v in env["preset_network"].items()) or "none"), ""]
    for pod, values in env["operator"].items():
        out += [f"Set by the operator in {pod}:", "", "```sh"]
        out += [f"{k}={shlex.quote(v)}" for k, v in values.items()]
        out += ["```", ""]
    out += ["## Latest rehearsal", ""]
    r = d["rehearsal"]
    if r is None:
        out.append("none recorded on this machine (`runai-spec rehearse PROFILE` records one)")
        return out
    verdict = "**passed**" if r["ok"] else "**failed**"
    of = ("this profile" if r["same_profile"] else
          "**an earlier version** of this profile (its sha256 differs): rehearse again")
    out += [f"{verdict} at {r['finished_at']}, of {of}; world {r['world_size']}, "
            f"{r['backend']}{', ' + ' '.join(r['options']) if r['options'] else ''}; logs "
            f"`{r['logs_dir']}`", "", "| check | status | message |", "|---|---|---|"]
    out += [f"| {c['check']} | {c['status']} | {md_cell(c['message'])} |" for c in r["checks"]]
    return out

