"""The cluster's gate: a ValidatingAdmissionPolicy generated from the approved presets."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, visible
from .kubeflow import (
    CONTAINER,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PRESET_ANNOTATION,
    PRESET_SHA_ANNOTATION,
    SMOKE_LABEL,
)
from .launcher import NCCL_DIAGNOSTICS, TRANSPORT_ENV_NAMES, TRANSPORT_ENV_PREFIXES
from .manifests import dump
from .presets import ApprovedPreset, PresetRegistry, Site

API_VERSION = "admissionregistration.k8s.io/v1"
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA (served by default) from 1.30
MIN_KUBERNETES = "1.30"
POLICY_NAME = "runai-spec-presets"
PARAMS_NAME = "runai-spec-presets"
# The parameters must live where researchers cannot write: a paramRef without a namespace
# would read the ConfigMap from the request's own namespace.
PARAMS_NAMESPACE = "runai-spec-system"
REQUIRES_ANNOTATION = "runai-spec/requires-kubernetes"
POLICY_FILE = "policy.yaml"
PARAMS_FILE = "params.yaml"

# Keys the renderer writes (plan.py); the smoke label and its fixed run policy are
# rehearse.py's (test_admission checks that these spellings agree).
NETWORK_ANNOTATION_PREFIXES = ("k8s.v1.cni.cncf.io/", "v1.multus-cni.io/")

ALL = "*"


@dataclass(frozen=True)
class Validation:
    """One CEL rule of the policy, with the message a denial reads as."""

    name: str
    expression: str
    message: str
    message_expression: str

    def document(self) -> dict[str, Any]:
        return {"expression": self.expression, "message": self.message,
                "messageExpression": self.message_expression, "reason": "Forbidden"}


# -- CEL building blocks ---------------------------------------------------------------
def lit(text: str) -> str:
    """A CEL string literal (JSON's escapes are a subset of CEL's)."""
    return json.dumps(text)


def param(field: str) -> str:
    return f"params.data[variables.key + {lit(field)}]"


def lines(field: str) -> str:
    """A newline-separated parameter as a list ('' is the empty list)."""
    return f"({param(field)} == '' ? [] : {param(field)}.split('\\n'))"


def csv(field: str) -> str:
    return f"({param(field)} == '' ? [] : {param(field)}.split(','))"


def text(value: str) -> str:
    """VALUE as the parameters write it; a list or map (never in a shape) as `?`, so that
    a comparison fails instead of raising an evaluation error."""
    return (f"(type({value}) == bool ? ({value} ? 'true' : 'false') : type({value}) == string "
            f"|| type({value}) == int || type({value}) == uint || type({value}) == double "
            f"? string({value}) : '?')")


def same_map(mapping: str, tokens: str) -> str:
    """MAPPING holds exactly the `key=value` lines TOKENS (values compared as strings)."""
    return (f"(size({mapping}) == size({tokens}) && "
            f"{mapping}.all(k, (k + '=' + {text(f'{mapping}[k]')}) in {tokens}))")


def has_or(path: str, field: str, default: str) -> str:
    return f"(has({path}.{field}) ? {path}.{field} : {default})"


SPEC = "variables.specs[r]"
POD = f"{SPEC}.template.spec"
META = f"{SPEC}.template.metadata"
TPL_LABELS = f"(has({SPEC}.template.metadata) && has({META}.labels) ? {META}.labels : {{}})"
TPL_ANNOTATIONS = (f"(has({SPEC}.template.metadata) && has({META}.annotations) "
                   f"? {META}.annotations : {{}})")
CONTAINERS = has_or(POD, "containers", "[]")
INITS = has_or(POD, "initContainers", "[]")
VOLUMES = has_or(POD, "volumes", "[]")
PRESET = "' (preset ' + variables.preset + ')'"


def role_path(condition: str, field: str) -> str:
    """`spec.pytorchReplicaSpecs.<first role failing CONDITION>.<field>` as a CEL string."""
    return (f"'spec.pytorchReplicaSpecs.' + variables.roles.filter(r, !({condition}))[0] "
            f"+ '.template.{field}'")


def every_container(condition: str) -> str:
    """CONDITION (about `c`) for each container and init container of each pod template."""
    return f"({CONTAINERS}.all(c, {condition}) && {INITS}.all(c, {condition}))"


def reserved(name: str) -> str:
    """The reserved variables, as `validate` refuses them (one list, launcher.py): the
    transport and interface settings are the preset's; NCCL's diagnostics switch is the
    researcher's."""
    prefixes = " || ".join(f"{name}.startsWith({lit(p)})" for p in TRANSPORT_ENV_PREFIXES)
    diagnostics = ", ".join(lit(n) for n in NCCL_DIAGNOSTICS)
    names = ", ".join(lit(n) for n in TRANSPORT_ENV_NAMES)
    return f"(({prefixes}) && !({name} in [{diagnostics}]) || {name} in [{names}])"


def variables(site: Site) -> list[dict[str, str]]:
    queue = lit(site.queue_label)
    nslabels = "namespaceObject.metadata.labels"
    items = [
        ("project", f"has({nslabels}) && {queue} in {nslabels} ? {nslabels}[{queue}] : ''"),
        ("labels", "has(object.metadata.labels) ? object.metadata.labels : {}"),
        ("annotations", "has(object.metadata.annotations) ? object.metadata.annotations : {}"),
        ("preset", f"{lit(PRESET_ANNOTATION)} in variables.annotations "
                   f"? variables.annotations[{lit(PRESET_ANNOTATION)}] : ''"),
        ("key", "variables.preset + '.'"),
        ("known", "variables.preset != '' && (variables.key + 'sha256') in params.data"),
        ("smoke", f"{lit(SMOKE_LABEL)} in variables.labels && "
                  f"variables.labels[{lit(SMOKE_LABEL)}] == 'true'"),
        ("specs", "has(object.spec) && has(object.spec.pytorchReplicaSpecs) "
                  "? object.spec.pytorchReplicaSpecs : {}"),
        ("roles", "variables.specs.filter(r, has(variables.specs[r].template) && "
                  "has(variables.specs[r].template.spec))"),
        ("presetEnv", f"variables.known ? {lines('env')} : []"),
        ("runPolicy", "has(object.spec) && has(object.spec.runPolicy) ? object.spec.runPolicy : {}"),
        ("runPolicyKeys", "variables.runPolicy.filter(k, k != 'suspend')"),
        # the smoke test (render --smoke) runs each pod once, under a deadline: fewer
        # restarts and less time than the preset's, never more
        ("expectedRunPolicy",
         f"!variables.known ? [] : variables.smoke ? {lines('run-policy')}.filter(t, "
         "!t.startsWith('backoffLimit=') && !t.startsWith('activeDeadlineSeconds=')) "
         f"+ ['backoffLimit=0'] : {lines('run-policy')}"),
    ]
    return [{"name": name, "expression": expression} for name, expression in items]


def label_rule(name: str, label: str, field: str) -> Validation:
    """The job's label LABEL (and its pod templates', where set) is the preset's FIELD."""
    key = lit(label)
    want = param(field)
    job_ok = (f"({want} == '' ? !({key} in variables.labels) : "
              f"({key} in variables.labels && variables.labels[{key}] == {want}))")
    tpl_ok = f"(!({key} in {TPL_LABELS}) || ({want} != '' && {TPL_LABELS}[{key}] == {want}))"
    expression = f"!variables.known || ({job_ok} && variables.roles.all(r, {tpl_ok}))"
    where = f"({job_ok} ? {role_path(tpl_ok, 'metadata.labels.')} + {key} : 'metadata.labels.' + {key})"
    return Validation(
        name, expression, f"metadata.labels.{label}: not the approved preset's {field}",
        f"{where} + ': must be ' + ({want} == '' ? 'unset' : {want}) + {PRESET}")


def validations(site: Site) -> list[Validation]:
    """Every rule of the policy. Shape rules hold vacuously for a preset that is not approved,
    so that a denial names the one reason."""
    queue = lit(site.queue_label)
    sha = lit(PRESET_SHA_ANNOTATION)
    rules: list[Validation] = []

    def add(name: str, expression: str, message: str, message_expression: str) -> None:
        rules.append(Validation(name, expression, message, message_expression))

    add("preset-annotation", "variables.preset != ''",
        f"metadata.annotations.{PRESET_ANNOTATION}: missing; only jobs rendered by runai-spec "
        "from an approved preset are admitted",
        f"'metadata.annotations.{PRESET_ANNOTATION}: missing; only jobs rendered by runai-spec "
        "from an approved preset are admitted'")
    add("preset-approved", "variables.preset == '' || variables.known",
        f"metadata.annotations.{PRESET_ANNOTATION}: not an approved preset",
        f"(variables.key + 'expired') in params.data ? 'metadata.annotations.{PRESET_ANNOTATION}:"
        f" the approval of preset ' + variables.preset + ' expired on ' + "
        "params.data[variables.key + 'expired'] : "
        f"'metadata.annotations.{PRESET_ANNOTATION}: ' + variables.preset + "
        "' is not an approved preset'")
    add("preset-sha256",
        f"!variables.known || ({sha} in variables.annotations && "
        f"variables.annotations[{sha}] == {param('sha256')})",
        f"metadata.annotations.{PRESET_SHA_ANNOTATION}: not the approved preset's sha256",
        f"'metadata.annotations.{PRESET_SHA_ANNOTATION}: not the approved sha256 of preset ' "
        "+ variables.preset")
    add("project-granted",
        f"!variables.known || (variables.project != '' && "
        f"{csv('projects')}.exists(g, g == '{ALL}' || g == variables.project))",
        "metadata.namespace: the project is not granted the preset",
        "'metadata.namespace: project ' + (variables.project == '' ? '(none)' : "
        "variables.project) + ' (namespace ' + request.namespace + ') is not granted preset ' "
        "+ variables.preset")
    tpl_queue = f"(!({queue} in {TPL_LABELS}) || {TPL_LABELS}[{queue}] == variables.project)"
    job_queue = f"({queue} in variables.labels && variables.labels[{queue}] == variables.project)"
    add("queue",
        f"variables.project != '' && {job_queue} && variables.roles.all(r, {tpl_queue})",
        f"metadata.labels.{site.queue_label}: must be the project of the namespace",
        f"({job_queue} ? {role_path(tpl_queue, 'metadata.labels.')} + {queue} : "
        f"'metadata.labels.' + {queue}) + ': must be ' + (variables.project == '' ? "
        "'a Run:ai project' : variables.project) + ', the project of namespace ' + "
        "request.namespace")

    replicas = "variables.specs"
    value = f"(has({replicas}[k].replicas) ? {text(f'{replicas}[k].replicas')} : 'unset')"
    add("replicas",
        f"!variables.known || (size(variables.roles) == size(variables.specs) && "
        f"size({replicas}) == size({lines('replicas')}) && "
        f"{replicas}.all(k, (k + '=' + {value}) in {lines('replicas')}))",
        "spec.pytorchReplicaSpecs: not the approved preset's replicas",
        f"'spec.pytorchReplicaSpecs: ' + {replicas}.map(k, k + '=' + {value}).join(', ') + "
        f"' but preset ' + variables.preset + ' has ' + {lines('replicas')}.join(', ')")
    elastic = "(has(object.spec) && has(object.spec.elasticPolicy) ? object.spec.elasticPolicy : {})"
    add("elastic",
        f"!variables.known || {same_map(elastic, lines('elastic'))}",
        "spec.elasticPolicy: not the approved preset's elastic bounds",
        f"'spec.elasticPolicy: must be ' + ({param('elastic')} == '' ? 'unset' : "
        f"{lines('elastic')}.join(', ')) + {PRESET}")
    nproc = f"(has(object.spec) && has(object.spec.nprocPerNode) ? {text('object.spec.nprocPerNode')} : '')"
    add("nproc-per-node",
        f"!variables.known || {nproc} == {param('nproc-per-node')}",
        "spec.nprocPerNode: not the approved preset's GPUs per pod",
        f"'spec.nprocPerNode: must be ' + {param('nproc-per-node')} + {PRESET}")

    shape = (f"size({CONTAINERS}) == 1 && {CONTAINERS}[0].name == {lit(CONTAINER)} && "
             f"size({INITS}) == 0 && !has({POD}.ephemeralContainers)")
    add("containers",
        f"size(variables.roles) == size(variables.specs) && variables.roles.all(r, {shape})",
        f"spec.pytorchReplicaSpecs: each pod template has exactly one container, named {CONTAINER}",
        f"size(variables.roles) != size(variables.specs) ? 'spec.pytorchReplicaSpecs: every "
        f"replica needs a pod template' : {role_path(shape, 'spec.containers')} + ': exactly one "
        f"container, named {CONTAINER}, and no init or ephemeral containers'")

    requests = "(has(c.resources) && has(c.resources.requests) ? c.resources.requests : {})"
    limits = "(has(c.resources) && has(c.resources.limits) ? c.resources.limits : {})"
    # the other containers are the containers rule's
    resources = (f"{CONTAINERS}.filter(c, c.name == {lit(CONTAINER)}).all(c, "
                 f"{same_map(requests, lines('resources'))} && "
                 f"{same_map(limits, lines('resources'))})")
    add("resources", f"!variables.known || variables.roles.all(r, {resources})",
        "resources: not the approved preset's requests and limits",
        f"{role_path(resources, 'spec.containers.resources')} + ': requests and limits must be ' "
        f"+ {lines('resources')}.join(', ') + {PRESET}")

    memory = (f"{VOLUMES}.filter(v, has(v.emptyDir) && has(v.emptyDir.medium) && "
              "v.emptyDir.medium == 'Memory')")
    shm = (f"({param('shared-memory')} == '' ? size({memory}) == 0 : (size({memory}) == 1 && "
           f"has({memory}[0].emptyDir.sizeLimit) && "
           f"{text(f'{memory}[0].emptyDir.sizeLimit')} == {param('shared-memory')}))")
    add("shared-memory", f"!variables.known || variables.roles.all(r, {shm})",
        "volumes: not the approved preset's shared memory",
        f"{role_path(shm, 'spec.volumes')} + ': memory emptyDir (shared memory) must be ' + "
        f"({param('shared-memory')} == '' ? 'absent' : 'one, sizeLimit ' + "
        f"{param('shared-memory')}) + {PRESET}")

    priority = label_rule("priority", site.priority_label, "priority")
    pod_priority = f"!has({POD}.priorityClassName)"
    no_pod_priority = f"variables.roles.all(r, {pod_priority})"
    rules.append(Validation(
        "priority", f"({priority.expression}) && {no_pod_priority}", priority.message,
        f"!({no_pod_priority}) ? {role_path(pod_priority, 'spec.priorityClassName')}"
        f" + ': must be unset; the priority is the label' + {PRESET} : {priority.message_expression}"))
    rules.append(label_rule("preemptibility", site.preemptibility_label, "preemptibility"))
    rules.append(label_rule("node-pool", site.node_pool_label, "node-pool"))

    network_key = " || ".join(f"k.startsWith({lit(p)})" for p in NETWORK_ANNOTATION_PREFIXES)
    network = (f"{lines('pod-annotations')}.all(t, {TPL_ANNOTATIONS}.exists(k, "
               f"(k + '=' + {TPL_ANNOTATIONS}[k]) == t)) && {TPL_ANNOTATIONS}.all(k, "
               f"!({network_key}) || (k + '=' + {TPL_ANNOTATIONS}[k]) in {lines('pod-annotations')})")
    add("network", f"!variables.known || variables.roles.all(r, {network})",
        "network attachment: not the approved preset's pod annotations",
        f"{role_path(network, 'metadata.annotations')} + ': the network attachment must be ' + "
        f"({param('pod-annotations')} == '' ? 'unset' : {lines('pod-annotations')}.join(', ')) "
        f"+ {PRESET}")

    added = ("(has(c.securityContext) && has(c.securityContext.capabilities) && "
             "has(c.securityContext.capabilities.add) ? c.securityContext.capabilities.add : [])")
    allowed = csv("capabilities")
    caps = (f"{every_container(f'{added}.all(x, x in {allowed})')} && "
            f"{CONTAINERS}.all(c, c.name != {lit(CONTAINER)} || "
            f"{csv('capabilities')}.all(x, x in {added}))")
    add("capabilities", f"!variables.known || variables.roles.all(r, {caps})",
        "securityContext.capabilities.add: not the approved preset's capabilities",
        f"{role_path(caps, 'spec.containers.securityContext.capabilities.add')} + ': must be ' + "
        f"({param('capabilities')} == '' ? 'empty' : {param('capabilities')}) + {PRESET}")

    restart = (f"has(variables.specs[k].restartPolicy) && variables.specs[k].restartPolicy == "
               f"(variables.smoke ? 'Never' : {param('restart-policy')})")
    add("restart-policy", f"!variables.known || variables.specs.all(k, {restart})",
        "restartPolicy: not the approved preset's restart policy",
        f"'spec.pytorchReplicaSpecs.' + variables.specs.filter(k, !({restart}))[0] + "
        f"'.restartPolicy: must be ' + (variables.smoke ? 'Never (smoke test)' : "
        f"{param('restart-policy')}) + {PRESET}")

    rp, keys, want = "variables.runPolicy", "variables.runPolicyKeys", "variables.expectedRunPolicy"
    seconds = f"{rp}['activeDeadlineSeconds']"
    deadline = (f"type({seconds}) == int && {seconds} > 0 && "
                f"({param('active-deadline-seconds')} == '' || "
                f"{seconds} <= int({param('active-deadline-seconds')}))")
    smoke_rp = (f"size({keys}) == size({want}) + 1 && 'activeDeadlineSeconds' in {rp} && "
                f"{keys}.all(k, k == 'activeDeadlineSeconds' ? {deadline} : "
                f"(k + '=' + {text(f'{rp}[k]')}) in {want})")
    normal_rp = (f"size({keys}) == size({want}) && "
                 f"{keys}.all(k, (k + '=' + {text(f'{rp}[k]')}) in {want})")
    add("run-policy", f"!variables.known || (variables.smoke ? ({smoke_rp}) : ({normal_rp}))",
        "spec.runPolicy: not the approved preset's run policy",
        f"'spec.runPolicy: ' + {keys}.map(k, k + '=' + {text(f'{rp}[k]')}).join(', ') + "
        f"' but preset ' + variables.preset + ' has ' + {lines('run-policy')}.join(', ') + "
        "(variables.smoke ? ' (smoke test: backoffLimit=0 and a deadline)' : '')")

    scheduler = f"has({POD}.schedulerName) && {POD}.schedulerName == {lit(site.scheduler_name)}"
    add("scheduler", f"variables.roles.all(r, {scheduler})",
        f"schedulerName: must be {site.scheduler_name}",
        f"{role_path(scheduler, 'spec.schedulerName')} + ': must be {site.scheduler_name}'")

    env = has_or("c", "env", "[]")
    env_ok = (f"!{reserved('e.name')} || (has(e.value) && !has(e.valueFrom) && "
              "(e.name + '=' + e.value) in variables.presetEnv)")
    env_rule = every_container(f"{env}.all(e, {env_ok})")
    bad_names = (f"variables.roles.map(r, ({CONTAINERS} + {INITS}).map(c, {env}.filter(e, "
                 f"!({env_ok})).map(e, e.name).join(', ')).filter(s, s != '').join(', '))"
                 ".filter(s, s != '').join(', ')")
    add("reserved-env", f"variables.roles.all(r, {env_rule})",
        "env: a reserved variable (NCCL and PyTorch's NCCL settings, UCX, libfabric, interfaces, "
        "LD_PRELOAD, LD_LIBRARY_PATH) is set",
        f"{role_path(env_rule, 'spec.containers.env')} + ': ' + {bad_names} + ' reserved for the "
        "AI Engineers (network transport and interfaces come from the preset)' + "
        "(variables.known ? ' (preset ' + variables.preset + ')' : '')")
    env_from = every_container("!has(c.envFrom) || size(c.envFrom) == 0")
    add("env-from", f"variables.roles.all(r, {env_from})",
        "envFrom: not allowed (it could set reserved variables)",
        f"{role_path(env_from, 'spec.containers.envFrom')} + ': not allowed, it could set "
        "reserved variables; list each variable in env'")

    for field in ("hostNetwork", "hostPID", "hostIPC"):
        ok = f"!has({POD}.{field}) || {POD}.{field} == false"
        add(field, f"variables.roles.all(r, {ok})", f"{field}: not allowed",
            f"{role_path(ok, 'spec.' + field)} + ': must not be true'")
    privileged = every_container("!has(c.securityContext) || !has(c.securityContext.privileged) "
                                 "|| c.securityContext.privileged == false")
    add("privileged", f"variables.roles.all(r, {privileged})", "privileged: not allowed",
        f"{role_path(privileged, 'spec.containers.securityContext.privileged')} + "
        "': must not be true'")
    host_path = f"{VOLUMES}.all(v, !has(v.hostPath))"
    add("host-path", f"variables.roles.all(r, {host_path})", "hostPath volumes: not allowed",
        f"{role_path(host_path, 'spec.volumes')} + ': hostPath volumes are not allowed'")
    node_name = f"!has({POD}.nodeName)"
    add("node-name", f"variables.roles.all(r, {node_name})",
        "nodeName: not allowed (it bypasses the scheduler)",
        f"{role_path(node_name, 'spec.nodeName')} + ': must be unset; it bypasses the scheduler'")
    return rules


# -- parameters ------------------------------------------------------------------------
def _tokens(mapping: Mapping[str, object], what: str) -> str:
    for key, value in mapping.items():
        text = _text(value)
        if "\n" in key or "=" in key or "\n" in text:
            raise InputError(f"{key!r}: a newline or '=' cannot be enforced by the policy",
                             field=what)
    return "\n".join(f"{key}={_text(value)}" for key, value in sorted(mapping.items()))


def _text(value: object) -> str:
    """A value as CEL's string() writes it (ints plain, booleans lowercase)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def preset_params(approved: ApprovedPreset, site: Site, projects: Sequence[str]) -> dict[str, str]:
    """The flat ConfigMap entries of one approved preset: `<name>.<field>` -> text.

    ConfigMap values are strings and CEL in Kubernetes cannot parse JSON, so every shape is
    a string the policy compares directly: maps are sorted `key=value` lines, lists are
    comma-separated. The values are what plan.py renders from the preset."""
    preset = approved.preset
    if preset.elastic is not None:
        replicas = {"Worker": preset.nodes}
        elastic: dict[str, object] = {"rdzvBackend": "c10d", "minReplicas": preset.elastic.min,
                                      "maxReplicas": preset.elastic.max,
                                      "maxRestarts": preset.elastic.max_restarts}
    elif preset.nodes == 1:
        replicas, elastic = {"Master": 1}, {}
    else:
        replicas, elastic = {"Master": 1, "Worker": preset.nodes - 1}, {}
    resources: dict[str, object] = {"nvidia.com/gpu": preset.gpus_per_pod, "cpu": preset.cpu,
                                    "memory": preset.memory, **preset.network.resources}
    policy = preset.run_policy
    run_policy: dict[str, object] = {"cleanPodPolicy": policy.clean_pod_policy,
                                     "backoffLimit": policy.backoff_limit}
    if policy.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = policy.ttl_seconds_after_finished
    if policy.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = policy.active_deadline_seconds
    for cap in preset.network.capabilities:
        if "," in cap:
            raise InputError(f"capability {cap!r} has a comma", field="network.capabilities")
    fields = {
        "sha256": approved.sha256,
        "approved-by": approved.approval.approved_by,
        "approved-at": approved.approval.approved_at,
        "expires": approved.approval.expires or "",
        "projects": ",".join(projects),
        "replicas": _tokens(replicas, "nodes"),
        "elastic": _tokens(elastic, "elastic"),
        "nproc-per-node": str(preset.gpus_per_pod),
        "resources": _tokens(resources, "network.resources"),
        "shared-memory": preset.shared_memory or "",
        "priority": preset.priority,
        "preemptibility": "preemptible" if preset.preemptible else "non-preemptible",
        "node-pool": preset.node_pool or "",
        "pod-annotations": _tokens(preset.network.annotations, "network.annotations"),
        "capabilities": ",".join(preset.network.capabilities),
        "env": _tokens(preset.network.env, "network.env"),
        "restart-policy": policy.restart_policy,
        "run-policy": _tokens(run_policy, "run_policy"),
        "active-deadline-seconds": ("" if policy.active_deadline_seconds is None
                                    else str(policy.active_deadline_seconds)),
    }
    return {f"{approved.name}.{field}": text for field, text in fields.items()}


def granted_projects(grants: Mapping[str, Sequence[str]] | None, name: str) -> list[str]:
    """Projects granted preset NAME: grants map project -> preset names; project `*` is every
    project, preset `*` every preset. No grants at all (the site has none yet): every preset
    is granted to every project."""
    if grants is None:
        return [ALL]
    projects = sorted(project for project, names in grants.items()
                      if name in names or ALL in names)
    return [ALL] if ALL in projects else projects


def site_grants(site: Site) -> Mapping[str, Sequence[str]] | None:
    """The site file's grants (a field the site issue adds), or None where it has none."""
    grants = getattr(site, "grants", None)
    return None if grants is None else dict(grants)


def params_data(registry: PresetRegistry,
                grants: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """The ConfigMap data: every approved, unexpired preset's shape; an expired approval only
    as `<name>.expired`, so that the policy names it (the policy has no clock: the AI Engineers
    regenerate and apply the parameters when an approval expires)."""
    site = registry.site()
    if grants is None:
        grants = site_grants(site)
    ledger = registry.ledger()
    data: dict[str, str] = {}
    for name in registry.names():
        entry = ledger.approvals.get(f"{name}.yaml")
        if entry is not None and entry.expires is not None \
                and dt.date.fromisoformat(entry.expires) < registry.today:
            data[f"{name}.expired"] = entry.expires
            continue
        data.update(preset_params(registry.get(name), site, granted_projects(grants, name)))
    return dict(sorted(data.items()))


def policy_documents(registry: PresetRegistry,
                     grants: Mapping[str, Sequence[str]] | None = None,
                     *, params_namespace: str = PARAMS_NAMESPACE) -> list[dict[str, Any]]:
    """The policy, its binding and its parameters (in that order) for `presets policy`.

    Raises PresetError where a preset or the site does not verify: a policy is only ever
    generated from a folder that `presets verify` accepts (expired approvals aside)."""
    site = registry.site()
    data = params_data(registry, grants)
    labels = {MANAGED_BY_LABEL: MANAGED_BY}
    notes = {REQUIRES_ANNOTATION: f">={MIN_KUBERNETES}"}
    policy = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels, "annotations": notes},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "namespaceSelector": {"matchExpressions": [
                    {"key": site.queue_label, "operator": "Exists"}]},
                "resourceRules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"],
                                   "operations": ["CREATE", "UPDATE"],
                                   "resources": ["pytorchjobs"]}],
            },
            # an update that leaves spec, labels and annotations alone (the operator's own
            # writes) is not judged again, so a job admitted before an approval expired can
            # still be cleaned up
            "matchConditions": [{"name": "changes-the-shape", "expression": CHANGES}],
            "variables": variables(site),
            "validations": [v.document() for v in validations(site)],
        },
    }
    binding = {
        "apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels, "annotations": notes},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "paramRef": {"name": PARAMS_NAME, "namespace": params_namespace,
                         "parameterNotFoundAction": "Deny"},
        },
    }
    params = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PARAMS_NAME, "namespace": params_namespace, "labels": labels},
        "data": data,
    }
    return [policy, binding, params]


CHANGES = ("request.operation != 'UPDATE' || oldObject == null || "
           "!has(oldObject.spec) || !has(object.spec) || object.spec != oldObject.spec || "
           "(has(object.metadata.labels) ? object.metadata.labels : {}) != "
           "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) || "
           "(has(object.metadata.annotations) ? object.metadata.annotations : {}) != "
           "(has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})")


def write_policy(registry: PresetRegistry, out_dir: Path,
                 grants: Mapping[str, Sequence[str]] | None = None,
                 *, params_namespace: str = PARAMS_NAMESPACE) -> list[Path]:
    """Write policy.yaml (policy and binding: changes with the tool) and params.yaml (the
    approved shapes: changes with each approval) into OUT_DIR; returns the paths."""
    policy, binding, params = policy_documents(registry, grants, params_namespace=params_namespace)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("not a folder", file=str(out_dir), field="--out")
    out_dir.mkdir(parents=True, exist_ok=True)
    header = (f"# Generated by `runai-spec presets policy` from the approved presets of "
              f"{registry.site().cluster}; needs Kubernetes >= {MIN_KUBERNETES}.\n")
    written = []
    for filename, docs in ((POLICY_FILE, [policy, binding]), (PARAMS_FILE, [params])):
        path = out_dir / filename
        if path.is_symlink():
            raise InputError("is a symlink", file=str(path), field="--out")
        path.write_text(header + dump(docs), encoding="utf-8")
        written.append(path)
    return written


# -- presets verify --live --------------------------------------------------------------
@dataclass(frozen=True)
class Deployment:
    """How one preset's approved parameters here compare with those the cluster enforces."""

    name: str
    state: str  # "not deployed", "different", "not approved here", "expired here"
    fields: tuple[str, ...] = ()  # the parameters that differ; "expired here": the date

    def line(self, root: Path, where: str) -> str:
        file = root / f"{self.name}.yaml"
        if self.state == "not deployed":
            return (f"error: {file}: live: approved here but not yet deployed by the AI "
                    f"Engineers ({where} has no {self.name}; the cluster denies its jobs)")
        if self.state == "expired here":
            return (f"error: {file}: live: deployed on the cluster ({where}) but its approval "
                    f"here expired on {self.fields[0]}; the cluster still admits its jobs")
        if self.state == "not approved here":
            return (f"error: {file}: live: deployed on the cluster ({where}) but not approved "
                    "here (the cluster admits jobs of a preset this ledger does not vouch for)")
        return (f"error: {file}: live: deployed but different: {', '.join(self.fields)} "
                f"({where} holds other values)")


def _by_preset(data: Mapping[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for key, value in data.items():
        name, _, field = key.partition(".")
        out.setdefault(name, {})[field] = value
    return out


def compare_deployed(local: Mapping[str, str], deployed: Mapping[str, str]) -> list[Deployment]:
    """The presets whose parameters here (params_data) and on the cluster (the ConfigMap's
    data) disagree, sorted by name. A preset counts as approved where its sha256 is present;
    an expired approval (only `<name>.expired`) is neither approved nor deployable."""
    mine, theirs = _by_preset(local), _by_preset(deployed)
    out = []
    for name in sorted(set(mine) | set(theirs)):
        here, there = mine.get(name, {}), theirs.get(name, {})
        if here == there:
            continue
        if "sha256" in here and "sha256" not in there:
            out.append(Deployment(name, "not deployed"))
        elif "sha256" in there and "expired" in here:
            out.append(Deployment(name, "expired here", (here["expired"],)))
        elif "sha256" in there and "sha256" not in here:
            out.append(Deployment(name, "not approved here"))
        else:
            fields = sorted(f for f in set(here) | set(there) if here.get(f) != there.get(f))
            out.append(Deployment(name, "different", tuple(fields)))
    return out


DEPLOYED = f"configmap {PARAMS_NAMESPACE}/{PARAMS_NAME}"


def deployment_report(root: Path, local: Mapping[str, str], deployed: Mapping[str, str] | None,
                      where: str = DEPLOYED) -> tuple[list[str], list[str]]:
    """`presets verify --live`'s (stdout, stderr) lines for the parameters here (params_data)
    and on the cluster (None: no ConfigMap); any stderr line is a finding."""
    problems = []
    if deployed is None:
        problems.append(f"error: cluster: {where}: not deployed (no admission parameters on "
                        "the cluster)")
    problems += [d.line(root, where) for d in compare_deployed(local, deployed or {})]
    if not problems:
        return [visible(f"ok: live: {where} matches the approved presets")], []
    # the names are the cluster's ConfigMap keys: each line stays one line (errors.visible)
    return [], [*map(visible, problems), "hint: the AI Engineers deploy the approved presets with "
                "`runai-spec presets policy -o DIR` and `kubectl apply -f DIR` (docs/admission.md)"]


__all__ = ["API_VERSION", "MIN_KUBERNETES", "PARAMS_NAME", "PARAMS_NAMESPACE", "POLICY_NAME",
           "DEPLOYED", "Deployment", "Validation", "compare_deployed", "deployment_report",
           "params_data", "policy_documents", "preset_params", "validations", "variables", "write_policy"]
