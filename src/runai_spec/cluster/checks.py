"""Live site checks: read-only GETs over one Session, each result a Finding naming its object.

A 403 is one `not checked: forbidden (<resource>)` warning (issue 13)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..check.rules import REGISTRY, declare, declared
from ..errors import Location
from ..facts.kai import (
    PLACEMENT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_GROUP,
    TOPOLOGY_PLURAL,
    topology_api,
)
from ..facts.kubeflow import GPU_RESOURCE, KIND, OPERATOR_VERSION
from ..findings import Finding, Severity
from ..pipeline.workload import Workload
from ..plan.volumes import CHECKPOINT
from .refusals import refusal
from .session import Session, clean, json_body

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
GPU_PRODUCT = "nvidia.com/gpu.product"
QUEUES = "/apis/scheduling.run.ai/v2/queues"
OPERATOR = "/apis/apps/v1/namespaces/kubeflow/deployments/training-operator"
PYTORCHJOB_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org"

# The live checks' rules, registered in the one rule registry (check/rules.py) that `rules`,
# docs/rules.md and the tests read; each id is spelled here once.
LIVE_NAMESPACE = declare(
    "live-namespace",
    "error",
    "The project's namespace exists and belongs to the project",
    "Reads the project's namespace: a finding when it does not exist, or when its queue label "
    "(the site's `label_keys.queue`) names another project.",
    kind="live",
)
LIVE_QUEUE = declare(
    "live-queue",
    "error",
    "The project's Run:ai queue exists, with quota for the job's GPUs",
    "Reads `queues.scheduling.run.ai/<project>`: an error when the queue does not exist, a warning "
    "when the job's GPUs exceed its quota (it waits, or runs only as preemptible over-quota work).",
    kind="live",
    milder=("warning",),
)
LIVE_PRIORITY = declare(
    "live-priority",
    "error",
    "The preset's PriorityClass exists",
    "Reads the preset's `PriorityClass`: when it does not exist the scheduler silently ignores it.",
    kind="live",
)
LIVE_PVC = declare(
    "live-pvc",
    "error",
    "Every claim the job mounts exists, is Bound and can be mounted by all its pods",
    "Reads every claim the job mounts (checkpoint, data, data sources resolved through the site's "
    "`data_sources`): missing, not `Bound`, or mounted by more than one pod without "
    "`ReadWriteMany` (`ReadOnlyMany` for read-only mounts): pods on different nodes fail with a "
    "multi-attach error.",
    kind="live",
)
LIVE_SECRET = declare(
    "live-secret",
    "error",
    "Every `secret_env` Secret and key exists",
    "Reads every `secret_env` Secret: the Secret or the key does not exist.",
    kind="live",
)
LIVE_NODE_POOL = declare(
    "live-node-pool",
    "error",
    "The preset's node pool is served, with the preset's GPU product",
    "Reads the nodes: no node carries the preset's node-pool label, or none of them has the "
    "preset's GPU product (`nvidia.com/gpu.product`).",
    kind="live",
)
LIVE_NODE_FIT = declare(
    "live-node-fit",
    "error",
    "A node of the pool can hold one pod",
    "Reads the nodes of the pool: no node's allocatable GPUs, CPU, memory and extended resources "
    "(RDMA) cover one pod's requests, so the pods would stay Pending.",
    kind="live",
)
LIVE_NETWORK = declare(
    "live-network",
    "error",
    "Every network attachment the preset names exists",
    "Reads every `network-attachment-definitions.k8s.cni.cncf.io` the preset names: it does not exist.",
    kind="live",
)
LIVE_OPERATOR = declare(
    "live-operator",
    "error",
    "The training operator is installed, at the site's version",
    "Reads the PyTorchJob CRD and the `training-operator` deployment: the CRD is not served, or "
    "the operator's image is not the site's `operator_version` (a warning when the deployment "
    "is not found).",
    kind="live",
    milder=("warning",),
)
LIVE_TOPOLOGY = declare(
    "live-topology",
    "error",
    "KAI's Topology the site names exists, with the placement's levels",
    "Reads the KAI `Topology` (`topologies.kai.scheduler`) the site's `topology.name` names, for a "
    "multi-node preset with a `topology.placement`: it does not exist, or the placement's level "
    "(a node label key) is none of its levels, and KAI leaves the job unscheduled.",
    kind="live",
)
LIVE_CRD_SCHEMA = declare(
    "live-crd-schema",
    "error",
    "The render passes the PyTorchJob schema the cluster serves",
    "Reads the PyTorchJob CRD the cluster serves: the render violates the cluster's own schema "
    "(as `validate --crd FILE` does with a file), naming the field; an unserved API version is a "
    "finding too. A warning when the served CRD has no usable schema.",
    kind="live",
    milder=("warning",),
)
LIVE_FORBIDDEN = declare(
    "live-forbidden",
    "warning",
    "A check the credentials may not read is reported, never skipped",
    "A check whose GET is refused (HTTP 403, or any other refusal) or answered in a form "
    "Kubernetes never uses becomes one warning `not checked: forbidden (<resource>)`, and the "
    "other checks still run.",
    kind="live",
)
LIVE_RULES = declared("live")  # the rules above, in their order (`rules` lists them)


class _Forbidden(Exception):
    pass


def _get(session: Session, path: str) -> dict[str, Any] | None:
    """The object at PATH, None when it does not exist; _Forbidden on 403. A 401 is no
    finding: the credentials are refused, so nothing at all can be checked (exit 3)."""
    resp = session.call("GET", path)
    if resp.status == 401:
        raise refusal(resp, path, "read")
    if resp.status == 403:
        raise _Forbidden(path)
    if resp.status == 404:
        return None
    if resp.status >= 300:
        raise _Forbidden(path)  # any other refusal: not checked, never a traceback
    body = json_body(resp)
    return body if isinstance(body, dict) else None


def _finding(
    w: Workload,
    rule: str,
    obj: str,
    message: str,
    hint: str,
    severity: Severity | None = None,
    field: str | None = None,
) -> Finding:
    """A finding of RULE (a registered one: its default severity unless a milder one is given),
    at the line of the profile field that leads to OBJ (FIELD, else the rule's LIVE_FIELD)."""
    line = w.loaded.line(field or LIVE_FIELD.get(rule, "preset"))
    return Finding(rule, Location(w.path, line, obj), message, hint, severity or REGISTRY[rule].severity)


# the profile field each live rule's object comes from (its line is the finding's); the rest
# come from the preset the profile names
LIVE_FIELD = {
    LIVE_NAMESPACE: "project",
    LIVE_QUEUE: "project",
    LIVE_FORBIDDEN: "project",
    LIVE_SECRET: "secret_env",
}


def _quantity(text: str | int) -> float:
    units = {
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
    }
    match = re.match(r"^([0-9.]+)([A-Za-z]*)$", str(text))
    if not match:
        return 0.0
    return float(match.group(1)) * units.get(match.group(2), 1)


def _namespace(s: Session, w: Workload) -> Iterator[Finding]:
    ns, project = w.plan.namespace, w.plan.project
    obj = _get(s, f"/api/v1/namespaces/{ns}")
    if obj is None:
        yield _finding(
            w,
            LIVE_NAMESPACE,
            f"namespace/{ns}",
            f"namespace {ns} does not exist",
            "check the project name; ask the AI Engineers which namespace it has",
        )
        return
    label = obj.get("metadata", {}).get("labels", {}).get(w.site.queue_label)
    if label != project:
        yield _finding(
            w,
            LIVE_NAMESPACE,
            f"namespace/{ns}",
            f"namespace {ns} is not project {project}'s ({w.site.queue_label}: {label or 'absent'})",
            "use your project's namespace",
        )


def _queue(s: Session, w: Workload) -> Iterator[Finding]:
    project = w.plan.project
    obj = _get(s, f"{QUEUES}/{project}")
    if obj is None:
        yield _finding(
            w,
            LIVE_QUEUE,
            f"queue/{project}",
            f"Run:ai queue {project} does not exist",
            "ask the AI Engineers to create the project's queue",
        )
        return
    gpus = w.plan.pods * int(dict(w.plan.limits).get(GPU_RESOURCE, 0) or 0)
    quota = 0.0
    for resource in obj.get("spec", {}).get("resources", {}).values():
        if isinstance(resource, dict) and "quota" in resource:
            quota = float(resource["quota"])
            break
    gpu_spec = obj.get("spec", {}).get("resources", {}).get("gpu")
    if isinstance(gpu_spec, dict):
        quota = float(gpu_spec.get("quota", quota))
    if quota >= 0 and gpus > quota:
        yield _finding(
            w,
            LIVE_QUEUE,
            f"queue/{project}",
            f"the job asks {gpus} GPUs, over queue {project}'s quota of {quota:g}",
            "it will wait, or run only as preemptible over-quota work",
            "warning",
        )


def _priority(s: Session, w: Workload) -> Iterator[Finding]:
    name = w.approved.preset.priority
    if _get(s, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}") is None:
        yield _finding(
            w,
            LIVE_PRIORITY,
            f"priorityclass/{name}",
            f"PriorityClass {name} does not exist (the scheduler would ignore it)",
            "ask the AI Engineers: the site's priority dictionary is out of date",
        )


def _pvcs(s: Session, w: Workload) -> Iterator[Finding]:
    ns = w.plan.namespace
    for volume in w.plan.volumes:
        if volume.claim is None:
            continue
        obj = _get(s, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{volume.claim}")
        where = f"persistentvolumeclaim/{volume.claim}"
        field = "checkpoint" if volume.role == CHECKPOINT else "data"
        if obj is None:
            yield _finding(
                w,
                LIVE_PVC,
                where,
                f"PVC {volume.claim} does not exist in {ns}",
                "create it, or name an existing claim",
                field=field,
            )
            continue
        phase = obj.get("status", {}).get("phase")
        if phase != "Bound":
            yield _finding(
                w,
                LIVE_PVC,
                where,
                f"PVC {volume.claim} is {phase or 'not Bound'}",
                "the pods would stay Pending until it binds",
                field=field,
            )
        modes = obj.get("spec", {}).get("accessModes", [])
        if (
            w.plan.pods > 1
            and "ReadWriteMany" not in modes
            and not (volume.read_only and "ReadOnlyMany" in modes)
        ):
            yield _finding(
                w,
                LIVE_PVC,
                where,
                f"PVC {volume.claim} ({', '.join(modes) or 'no access modes'}) is "
                f"mounted by {w.plan.pods} pods but is not ReadWriteMany",
                "pods on different nodes fail with a multi-attach error; use a "
                "ReadWriteMany claim (shared file system)",
                field=field,
            )


def _secrets(s: Session, w: Workload) -> Iterator[Finding]:
    ns = w.plan.namespace
    for _variable, secret, key in w.plan.secret_env:
        obj = _get(s, f"/api/v1/namespaces/{ns}/secrets/{secret}")
        if obj is None:
            yield _finding(
                w,
                LIVE_SECRET,
                f"secret/{secret}",
                f"Secret {secret} does not exist in {ns}",
                "create it first",
            )
        elif key not in obj.get("data", {}) and key not in obj.get("stringData", {}):
            yield _finding(
                w,
                LIVE_SECRET,
                f"secret/{secret}",
                f"Secret {secret} has no key {key}",
                "add the key or fix secret_env",
            )


def _nodes(s: Session, w: Workload) -> Iterator[Finding]:
    preset = w.approved.preset
    body = _get(s, "/api/v1/nodes") or {}
    nodes = body.get("items", [])
    pool = preset.node_pool
    label = w.site.node_pool_label
    if pool is not None:
        nodes = [n for n in nodes if n.get("metadata", {}).get("labels", {}).get(label) == pool]
        if not nodes:
            yield _finding(
                w,
                LIVE_NODE_POOL,
                f"nodepool/{pool}",
                f"no node carries {label}={pool}: the pool is not served",
                "ask the AI Engineers which node pools the cluster serves",
            )
            return
    model = preset.gpu.model.replace(" ", "-").lower()
    matching = [
        n for n in nodes if model in n.get("metadata", {}).get("labels", {}).get(GPU_PRODUCT, "").lower()
    ]
    if not matching:
        yield _finding(
            w,
            LIVE_NODE_POOL,
            f"nodepool/{pool or 'default'}",
            f"no node of pool {pool or 'default'} has GPU product {preset.gpu.model}",
            "the preset's GPU model does not match the cluster's nodes",
        )
        return
    needs = dict(w.plan.requests)
    for node in matching:
        free = node.get("status", {}).get("allocatable", {})
        if all(_quantity(free.get(k, 0)) >= _quantity(v) for k, v in needs.items()):
            return
    wanted = ", ".join(f"{k}={v}" for k, v in needs.items())
    yield _finding(
        w,
        LIVE_NODE_FIT,
        f"nodepool/{pool or 'default'}",
        f"no node of pool {pool or 'default'} has allocatable {wanted} for one pod",
        "the pods would stay Pending; ask the AI Engineers about the preset",
    )


def _networks(s: Session, w: Workload) -> Iterator[Finding]:
    text = w.approved.preset.network.annotations.get(NETWORKS_ANNOTATION, "")
    for entry in filter(None, (e.strip() for e in text.split(","))):
        entry = entry.split("@")[0]
        ns, _, name = entry.rpartition("/")
        ns = ns or w.plan.namespace
        path = f"/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}"
        if _get(s, path) is None:
            yield _finding(
                w,
                LIVE_NETWORK,
                f"network-attachment-definition/{ns}/{name}",
                f"network attachment {ns}/{name} does not exist",
                "ask the AI Engineers: the preset names a network the cluster lacks",
            )


def _topology(s: Session, w: Workload) -> Iterator[Finding]:
    """The KAI Topology object the job's annotations name exists, with the placement levels
    among its levels (KAI leaves a job whose topology it cannot find unscheduled)."""
    annotations = dict(w.plan.annotations)
    name = annotations.get(TOPOLOGY_ANNOTATION)
    if not name:
        return
    obj = f"topology/{name}"
    # the object KAI reads: its own from v0.12.0, Kueue's before (facts.kai.topology_api)
    group, version, plural = topology_api(w.site.kai_version)
    found = _get(s, f"/apis/{group}/{version}/{plural}/{name}")
    if found is None:
        yield _finding(
            w,
            LIVE_TOPOLOGY,
            obj,
            f"the Topology {name} ({plural}.{group}, what KAI {w.site.kai_version} reads) does not exist",
            "ask the AI Engineers: site.yaml's topology.name names no Topology of this cluster "
            f"(kubectl get {plural}.{group}), or its kai_version is not the cluster's",
        )
        return
    levels = [str(level.get("nodeLabel")) for level in (found.get("spec") or {}).get("levels") or []]
    for key in PLACEMENT_ANNOTATION.values():
        level = annotations.get(key)
        if level and level not in levels:
            yield _finding(
                w,
                LIVE_TOPOLOGY,
                obj,
                f"{key} {level} is not a level of Topology {name} ({', '.join(levels) or 'none'})",
                "ask the AI Engineers: site.yaml's placement names a level the Topology lacks",
            )


def _operator(s: Session, w: Workload) -> Iterator[Finding]:
    served = _get(s, PYTORCHJOB_CRD)
    if served is None:
        yield _finding(
            w,
            LIVE_OPERATOR,
            "crd/pytorchjobs.kubeflow.org",
            "the PyTorchJob CRD is not served",
            "the training operator is not installed",
        )
        return
    yield from _crd_schema(served, w)
    want = str(getattr(w.site, "operator_version", None) or OPERATOR_VERSION)
    deploy = _get(s, OPERATOR)
    if deploy is None:
        yield _finding(
            w,
            LIVE_OPERATOR,
            "deployment/kubeflow/training-operator",
            "the training-operator deployment was not found",
            "check the install",
            "warning",
        )
        return
    images = [
        c.get("image", "")
        for c in deploy.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    ]
    if not any(re.search(rf"[:v]{re.escape(want)}(\.|$|-)", image) for image in images):
        yield _finding(
            w,
            LIVE_OPERATOR,
            "deployment/kubeflow/training-operator",
            f"the training operator runs {', '.join(images)}, not version {want}",
            "the site's operator_version and the cluster disagree",
        )


def _crd_schema(served: dict[str, Any], w: Workload) -> Iterator[Finding]:
    """The render against the schema the cluster serves (what `validate --crd FILE` does with
    a file): a field the cluster's operator does not know is dropped or refused there."""
    from ..check.crd import crd_findings, crd_schemas
    from ..errors import InputError

    source = "crd/pytorchjobs.kubeflow.org"
    try:
        schemas = crd_schemas(served, source)
    except InputError as exc:  # no schema, or one that is no JSON Schema (issue 23)
        what = (
            "the served PyTorchJob CRD has no schema"
            if exc.field is None
            else f"the served PyTorchJob CRD's schema cannot be used: {exc.field}: {exc.message}"
        )
        yield _finding(
            w,
            LIVE_CRD_SCHEMA,
            source,
            what,
            "the render could not be checked against the cluster's schema",
            "warning",
        )
        return
    for problem in crd_findings(list(w.manifests), schemas, KIND, w.path):
        yield Finding(
            LIVE_CRD_SCHEMA,
            Location(w.path, None, f"{source}: {problem.path}"),
            problem.message,
            problem.hint,
            problem.severity,
        )


CHECKS = (
    ("namespaces", _namespace),
    ("queues.scheduling.run.ai", _queue),
    ("priorityclasses", _priority),
    ("persistentvolumeclaims", _pvcs),
    ("secrets", _secrets),
    ("nodes", _nodes),
    ("network-attachment-definitions.k8s.cni.cncf.io", _networks),
    ("training-operator", _operator),
    (f"{TOPOLOGY_PLURAL}.{TOPOLOGY_GROUP}", _topology),
)


# what `validate --live` says it read, pass or not
LIVE_CHECKED = tuple(resource for resource, _ in CHECKS)


def live_findings(session: Session, workload: Workload) -> list[Finding]:
    """Every live check of one workload; a forbidden one is a single warning."""
    findings: list[Finding] = []
    for resource, check in CHECKS:
        try:
            findings.extend(check(session, workload))
        except _Forbidden:
            findings.append(
                _finding(
                    workload,
                    LIVE_FORBIDDEN,
                    resource,
                    f"not checked: forbidden ({resource})",
                    "ask the AI Engineers to check it, or for read access",
                    "warning",
                )
            )
        except (AttributeError, TypeError, ValueError, KeyError):  # the server's answer, odd
            findings.append(
                _finding(
                    workload,
                    LIVE_FORBIDDEN,
                    resource,
                    f"not checked: the API server's answer is malformed ({resource})",
                    "report it to your AI Engineers: the API server does not answer as Kubernetes does",
                    "warning",
                )
            )
    return [f._replace(message=clean(f.message, 2000)) for f in findings]
