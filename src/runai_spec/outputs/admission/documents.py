"""The cluster's gate: a ValidatingAdmissionPolicy generated from the approved presets' renders.

Each approved preset's job and smoke test are rendered on probe profiles (admission_shape)
and written as CEL (admission_cel): every leaf the preset, the site, the ledger or the
template decides is pinned, every profile value is checked by validate's rule for it, and
any key the render does not produce is refused. The parameters (a ConfigMap) carry each
approval: its sha256, who approved it, until when, the projects granted it, and the digest of
the shape the policy enforces for it, so that a policy and parameters from two different
generations deny instead of disagreeing silently.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import InputError, PresetError
from ...facts import kubeflow, mpi
from ...facts.kai import GPU_SHARING_ANNOTATIONS
from ...facts.kubeflow import ANNOTATION_PREFIX, MANAGED_BY, MANAGED_BY_LABEL
from ...facts.torchrun import DEVICE_ENV_NAMES
from ...files import ReplacedFiles
from ...load.registry import PresetRegistry
from ...load.site import Site
from ...render.manifests import dump
from .gate import (
    PresetGate,
    Validation,
    families,
    members,
    preset_digests,
    preset_gates,
    validations,
    variables,
)
from .live import (
    DEPLOYED,
    PARAMS_NAME,
    PARAMS_NAMESPACE,
    POLICY_NAME,
    SCALE_POLICY_NAME,
    Deployment,
    Gate,
    compare_deployed,
    deployment_report,
    read_gate,
)
from .rules import balanced, lit

API_VERSION = "admissionregistration.k8s.io/v1"
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA (served by default) from 1.30
MIN_KUBERNETES = "1.30"
REQUIRES_ANNOTATION = f"{ANNOTATION_PREFIX}requires-kubernetes"
POLICY_FILE = "policy.yaml"
# etcd's default --max-request-bytes is 1.5 MiB; the API server adds managedFields and status
MAX_POLICY_BYTES = 1_400_000
PARAMS_FILE = "params.yaml"

ALL = "*"


# -- parameters ------------------------------------------------------------------------
def preset_params(
    registry: PresetRegistry, name: str, projects: Sequence[str], digest: str, pins: Mapping[str, str]
) -> dict[str, str]:
    """The flat ConfigMap entries of one approved preset: `<name>.<field>` -> text: the
    approval itself, the digest of the shapes the policy enforces for it, and the pinned
    values in which each of its launchers' jobs differs from the presets sharing its checks
    (PINS)."""
    approved = registry.get(name)
    fields = {
        "sha256": approved.sha256,
        "approved-by": approved.approval.approved_by,
        "approved-at": approved.approval.approved_at,
        "expires": approved.approval.expires or "",
        "projects": ",".join(projects),
        "shape-sha256": digest,
        **pins,
    }
    return {f"{name}.{field}": text for field, text in fields.items()}


def granted_projects(grants: Mapping[str, Sequence[str]] | None, name: str) -> list[str]:
    """Projects granted preset NAME: grants map project -> preset names; project `*` is every
    project, preset `*` every preset. No grants at all: every preset to every project."""
    if grants is None:
        return [ALL]
    projects = sorted(project for project, names in grants.items() if name in names or ALL in names)
    return [ALL] if ALL in projects else projects


def site_grants(site: Site) -> Mapping[str, Sequence[str]] | None:
    """The site file's grants, or None where it has none."""
    return None if site.grants is None else dict(site.grants)


def _approved_names(registry: PresetRegistry) -> tuple[list[str], dict[str, str]]:
    """(presets whose approval holds today, {expired preset: its expiry date})."""
    ledger = registry.ledger()
    names, expired = [], {}
    for name in registry.names():
        entry = ledger.approvals.get(f"{name}.yaml")
        if (
            entry is not None
            and entry.expires is not None
            and dt.date.fromisoformat(entry.expires) < registry.today
        ):
            expired[name] = entry.expires
        else:
            names.append(name)
    return names, expired


def gates(registry: PresetRegistry) -> list[PresetGate]:
    """Every approved, unexpired preset's checks (raises PresetError where one does not
    verify: a policy is only generated from a folder that `presets verify` accepts)."""
    return [gate for name in _approved_names(registry)[0] for gate in preset_gates(registry, name)]


def params_data(
    registry: PresetRegistry,
    grants: Mapping[str, Sequence[str]] | None = None,
    preset_gates: Sequence[PresetGate] | None = None,
) -> dict[str, str]:
    """The ConfigMap data: every approved, unexpired preset's approval; an expired approval
    only as `<name>.expired`, so that the policy names it (the policy has no clock: the AI
    Engineers regenerate and apply the parameters when an approval expires)."""
    site = registry.site()
    if grants is None:
        grants = site_grants(site)
    names, expired = _approved_names(registry)
    fams = families(preset_gates if preset_gates is not None else gates(registry))
    digests = preset_digests(fams)
    pins: dict[str, dict[str, str]] = {}
    for gate, fam in members(fams):
        pins.setdefault(gate.name, {}).update(fam.params(gate))
    data: dict[str, str] = {f"{name}.expired": date for name, date in expired.items()}
    for name in names:
        projects = granted_projects(grants, name)
        for project in projects:
            if "," in project:
                raise InputError(f"project {project!r} has a comma", field="grants")
        data.update(preset_params(registry, name, projects, digests[name], pins.get(name, {})))
    return dict(sorted(data.items()))


CHANGES = (
    "request.operation != 'UPDATE' || oldObject == null || "
    "!has(oldObject.spec) || !has(object.spec) || object.spec != oldObject.spec || "
    "(has(object.metadata.labels) ? object.metadata.labels : {}) != "
    "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) || "
    "(has(object.metadata.annotations) ? object.metadata.annotations : {}) != "
    "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})"
)

# `kubectl scale` (the CRD's scale subresource: spec.pytorchReplicaSpecs.Worker.replicas)
# never reaches a policy on pytorchjobs: it is matched on its own. A Scale that keeps the
# replicas (a read-modify-write that changes nothing) is admitted; any other is not.
SCALE_UNCHANGED = (
    "oldObject != null && has(object.spec) && has(oldObject.spec) && "
    "(has(object.spec.replicas) ? object.spec.replicas : 0) == "
    "(has(oldObject.spec.replicas) ? oldObject.spec.replicas : 0)"
)


GUARD_POLICY_NAME = "runai-spec-workloads"
NETWORK_ANNOTATION_PREFIXES = ("k8s.v1.cni.cncf.io/", "v1.multus-cni.io/")  # Multus's keys
# What else can run a pod: the workload kinds of Kubernetes, the training operator's other job
# kinds (training-operator v1.9 serves these CRDs beside pytorchjobs), and mpi-operator's MPIJob
# (v0.6.0's CRD serves kubeflow.org/v2beta1 only, under the name training-operator's v1 MPIJob
# has: a rule names each version, as matchPolicy Equivalent converts only between versions one
# CRD serves): the preset policy judges mpi-operator's v2beta1 MPIJobs (JUDGED), the guard
# keeps training-operator's v1 ones to the creators.
GUARDED = (
    ("", "v1", ("pods",)),
    ("batch", "v1", ("jobs", "cronjobs")),
    ("apps", "v1", ("deployments", "statefulsets", "daemonsets", "replicasets")),
    ("kubeflow.org", "v1", ("tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")),
)
# What the preset policy judges: (apiVersion, plural, whether the CRD serves a scale
# subresource, which the scale policy then matches).
JUDGED = (
    (kubeflow.API_VERSION, kubeflow.PLURAL, True),
    (mpi.API_VERSION, mpi.PLURAL, mpi.SCALE_SUBRESOURCE),
)


def _document(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One admission object of ours (a policy or a binding), labelled and annotated alike."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {REQUIRES_ANNOTATION: f">={MIN_KUBERNETES}"},
        },
        "spec": spec,
    }


def _binding(name: str, **extra: Any) -> dict[str, Any]:
    return _document(
        "ValidatingAdmissionPolicyBinding", name, {"policyName": name, "validationActions": ["Deny"], **extra}
    )


# the pod templates of a Pod, a workload (spec.template) or a CronJob (its job's template)
TEMPLATES = (
    "(has(object.spec) && has(object.spec.containers) ? [object] : []) + "
    "(has(object.spec) && has(object.spec.template) ? [object.spec.template] : []) + "
    "(has(object.spec) && has(object.spec.jobTemplate) && "
    "has(object.spec.jobTemplate.spec) && has(object.spec.jobTemplate.spec.template)"
    " ? [object.spec.jobTemplate.spec.template] : [])"
)


def _gpu_signals(prefixes: Sequence[str], names: Sequence[str]) -> str:
    """The guard's condition that one of `variables.templates` asks for GPUs, RDMA devices or
    a network attachment."""
    device = balanced(
        "||",
        [f"k.startsWith({lit(p)})" for p in prefixes] + [f"k in [{', '.join(lit(n) for n in names)}]"],
        "false",
    )
    # the GPU signals: extended resources, a DRA claim, the toolkit's device variables
    # (torchrun.DEVICE_ENV_NAMES, which validate refuses in a profile), KAI's GPU-sharing
    # annotations (kai.GPU_SHARING_ANNOTATIONS) and a network attachment
    network = balanced(
        "||",
        [f"k.startsWith({lit(p)})" for p in NETWORK_ANNOTATION_PREFIXES]
        + [f"k in [{', '.join(lit(a) for a in GPU_SHARING_ANNOTATIONS)}]"],
        "false",
    )
    devices = ", ".join(lit(n) for n in DEVICE_ENV_NAMES)
    asks = (
        f"((has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, "
        f"{device})) || (has(c.resources.requests) && c.resources.requests.exists(k, "
        f"{device})) || (has(c.resources.claims) && size(c.resources.claims) > 0))) || "
        f"(has(c.env) && c.env.exists(v, has(v.name) && v.name in [{devices}])))"
    )
    return (
        f"variables.templates.exists(t, (has(t.spec) && "
        f"((has(t.spec.containers) && t.spec.containers.exists(c, {asks})) || "
        f"(has(t.spec.initContainers) && t.spec.initContainers.exists(c, {asks})) || "
        f"(has(t.spec.resourceClaims) && size(t.spec.resourceClaims) > 0))) || "
        f"(has(t.metadata) && has(t.metadata.annotations) && "
        f"t.metadata.annotations.exists(k, {network})))"
    )


def guard_documents(registry: PresetRegistry) -> list[dict[str, Any]]:
    """The optional workload guard (site `workload_guard`): in the project namespaces, a Pod,
    Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet that requests GPUs, RDMA
    devices or a network attachment, and any other training-operator job, is admitted only
    from the listed creators (the operators, whose PyTorchJobs and MPIJobs the preset policy
    judged). [] where the site does not enable it."""
    site = registry.site()
    guard = site.workload_guard
    if not guard.enabled:
        return []
    names = sorted(
        {
            r
            for n in registry.names()
            if n in _approved_names(registry)[0]
            for r in registry.get(n).preset.network.resources
        }
    )
    claims = _gpu_signals(guard.resource_prefixes, names)
    creators = ", ".join(lit(c) for c in guard.creators)
    rules = [
        {"apiGroups": [g], "apiVersions": [v], "operations": ["CREATE", "UPDATE"], "resources": list(rs)}
        for g, v, rs in GUARDED
    ]
    policy = _document(
        "ValidatingAdmissionPolicy",
        GUARD_POLICY_NAME,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchExpressions": [{"key": site.queue_label, "operator": "Exists"}]},
                "resourceRules": rules,
            },
            "variables": [
                {"name": "templates", "expression": TEMPLATES},
                {"name": "claims", "expression": f"request.resource.group == 'kubeflow.org' || {claims}"},
            ],
            "validations": [
                Validation(
                    "creator",
                    f"!variables.claims || request.userInfo.username in [{creators}]",
                    f"only {_judged_kinds()} admitted by the preset policy may run GPU, RDMA or "
                    "network-attachment pods in a project namespace",
                    "request.resource.resource + ' ' + (has(object.metadata.name) ? "
                    "object.metadata.name : '') + ': requests GPUs, RDMA devices or a network "
                    "attachment (or is a training job); in a project namespace only the "
                    f"{_judged_kinds()} the preset policy admits may, run by their operators'",
                ).document()
            ],
        },
    )
    return [policy, _binding(GUARD_POLICY_NAME)]


def _judged_kinds() -> str:
    return " and ".join(f"{kind}s" for kind in (kubeflow.KIND, mpi.KIND))


def _match(site: Site, *, scale: bool) -> dict[str, Any]:
    """The project namespaces' JUDGED kinds (SCALE: their scale subresources, where served)."""
    rules = [
        {
            "apiGroups": [api_version.split("/")[0]],
            "apiVersions": [api_version.split("/")[1]],
            "operations": ["CREATE", "UPDATE"],
            "resources": [f"{plural}/scale" if scale else plural],
        }
        for api_version, plural, scaled in JUDGED
        if scaled or not scale
    ]
    return {
        "namespaceSelector": {"matchExpressions": [{"key": site.queue_label, "operator": "Exists"}]},
        "resourceRules": rules,
    }


def policy_documents(
    registry: PresetRegistry,
    grants: Mapping[str, Sequence[str]] | None = None,
    *,
    params_namespace: str = PARAMS_NAMESPACE,
) -> list[dict[str, Any]]:
    """The policy and its binding, the scale policy and its binding, the workload guard and
    its binding where the site enables it, and the parameters (last), for `presets policy`.

    Raises PresetError where a preset or the site does not verify: a policy is only ever
    generated from a folder that `presets verify` accepts (expired approvals aside)."""
    site = registry.site()
    preset_gates = gates(registry)
    data = params_data(registry, grants, preset_gates)
    policy = _document(
        "ValidatingAdmissionPolicy",
        POLICY_NAME,
        {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": _match(site, scale=False),
            # an update that leaves spec, labels and annotations alone (the operator's own
            # writes) is not judged again, so a job admitted before an approval expired can
            # still be cleaned up
            "matchConditions": [{"name": "changes-the-shape", "expression": CHANGES}],
            "variables": variables(site, families(preset_gates)),
            "validations": [v.document() for v in validations()],
        },
    )
    binding = _binding(
        POLICY_NAME,
        paramRef={"name": PARAMS_NAME, "namespace": params_namespace, "parameterNotFoundAction": "Deny"},
    )
    scale = _document(
        "ValidatingAdmissionPolicy",
        SCALE_POLICY_NAME,
        {
            "failurePolicy": "Fail",
            "matchConstraints": _match(site, scale=True),
            "validations": [
                Validation(
                    "scale",
                    SCALE_UNCHANGED,
                    "spec.replicas: a PyTorchJob's replicas are its preset's; scaling is refused",
                    "'spec.replicas: the replicas of a PyTorchJob are its approved preset\\'s; "
                    "kubectl scale is refused (elastic presets scale within their own bounds)'",
                ).document()
            ],
        },
    )
    scale_binding = _binding(SCALE_POLICY_NAME)
    params = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PARAMS_NAME,
            "namespace": params_namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "data": data,
    }
    size = len(json.dumps(policy))
    if size > MAX_POLICY_BYTES:
        raise PresetError(
            f"the generated policy is {size:,} bytes, over the {MAX_POLICY_BYTES:,} "
            "that fit etcd's default request limit (1.5 MiB) with room for the "
            f"API server's own fields ({len(preset_gates)} presets)",
            file=str(registry.root),
            field="presets",
            hint="approve fewer presets per cluster, or raise etcd's --max-request-bytes (docs/admission.md)",
        )
    return [policy, binding, scale, scale_binding, *guard_documents(registry), params]


def write_policy(
    registry: PresetRegistry,
    out_dir: Path,
    grants: Mapping[str, Sequence[str]] | None = None,
    *,
    params_namespace: str = PARAMS_NAMESPACE,
) -> list[Path]:
    """Write policy.yaml (the policies and bindings) and params.yaml (the approvals) into
    OUT_DIR, both or neither (files.ReplacedFiles). Returns the paths."""
    *policies, params = policy_documents(registry, grants, params_namespace=params_namespace)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("not a folder", file=str(out_dir), field="--out")
    header = (
        f"# Generated by `runai-spec presets policy` from the approved presets of "
        f"{registry.site().cluster}; needs Kubernetes >= {MIN_KUBERNETES}.\n"
        "# Apply params.yaml and policy.yaml together: the policy checks the parameters' "
        "shape digests.\n"
    )
    texts = {POLICY_FILE: header + dump(policies), PARAMS_FILE: header + dump([params])}
    paths = [out_dir / name for name in texts]
    for path in paths:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise InputError("is a symlink or not a plain file", file=str(path), field="--out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with ReplacedFiles(out_dir) as out:
            for name, text in texts.items():
                out.add(name, text)
    except OSError as exc:
        raise InputError(
            f"cannot write the policy: {exc.strerror or exc}",
            file=str(out_dir),
            field="--out",
            hint="give a folder you can write, e.g. deploy/",
        ) from None
    return paths


__all__ = [
    "API_VERSION",
    "MIN_KUBERNETES",
    "PARAMS_NAME",
    "PARAMS_NAMESPACE",
    "POLICY_NAME",
    "DEPLOYED",
    "Deployment",
    "compare_deployed",
    "deployment_report",
    "Gate",
    "SCALE_POLICY_NAME",
    "read_gate",
    "gates",
    "params_data",
    "policy_documents",
    "preset_params",
    "write_policy",
]
