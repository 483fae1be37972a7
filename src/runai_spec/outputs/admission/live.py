"""`presets verify --live`: what the cluster enforces, compared with the approved presets here.

The parameters, the policy and its bindings are read; what the cluster does is said truly in
each state: nothing deployed, parameters only, policy only, policy and parameters of two
generations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import visible

POLICY_NAME = "runai-spec-presets"
SCALE_POLICY_NAME = "runai-spec-presets-scale"
PARAMS_NAME = "runai-spec-presets"
# The parameters must live where researchers cannot write: a paramRef without a namespace
# would read the ConfigMap from the request's own namespace.
PARAMS_NAMESPACE = "runai-spec-system"


@dataclass(frozen=True)
class Deployment:
    """How one preset's approved parameters here compare with those the cluster enforces."""

    name: str
    state: str  # "not deployed", "different", "not approved here", "expired here"
    fields: tuple[str, ...] = ()  # the parameters that differ; "expired here": the date

    def line(self, root: Path, where: str, enforcing: bool = True) -> str:
        """The finding; ENFORCING: a preset policy and its binding are deployed (what the
        cluster does with the preset's jobs depends on it)."""
        file = root / f"{self.name}.yaml"
        if self.state == "not deployed":
            does = "the cluster denies its jobs" if enforcing else "no policy enforces presets"
            return (
                f"error: {file}: live: approved here but not yet deployed by the AI "
                f"Engineers ({where} has no {self.name}; {does})"
            )
        if self.state == "expired here":
            return (
                f"error: {file}: live: deployed on the cluster ({where}) but its approval "
                f"here expired on {self.fields[0]}; the cluster still admits its jobs"
            )
        if self.state == "not approved here":
            return (
                f"error: {file}: live: deployed on the cluster ({where}) but not approved "
                "here (the cluster admits jobs of a preset this ledger does not vouch for)"
            )
        return (
            f"error: {file}: live: deployed but different: {', '.join(self.fields)} "
            f"({where} holds other values)"
        )


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
HINT = (
    "hint: the AI Engineers deploy the approved presets with `runai-spec presets policy -o DIR`, "
    "`kubectl apply --server-side -f DIR/params.yaml` and `kubectl apply --server-side -f "
    "DIR/policy.yaml` (docs/admission.md)"
)


@dataclass(frozen=True)
class Gate:
    """What the cluster holds of the gate besides its parameters: the preset policy's digests
    (None: no such policy; {} where it has none), which of the four objects exist, and those
    the credentials may not read."""

    digests: Mapping[str, str] | None
    present: frozenset[str]
    forbidden: tuple[str, ...] = ()


OBJECTS = (
    f"validatingadmissionpolicies/{POLICY_NAME}",
    f"validatingadmissionpolicybindings/{POLICY_NAME}",
    f"validatingadmissionpolicies/{SCALE_POLICY_NAME}",
    f"validatingadmissionpolicybindings/{SCALE_POLICY_NAME}",
)


def read_gate(objects: Mapping[str, Any]) -> Gate:
    """The Gate of OBJECTS (cluster.params.read_admission's answer: ref -> DeployedObject)."""
    present = frozenset(ref for ref, o in objects.items() if o.body is not None)
    forbidden = tuple(f"{ref} ({o.forbidden})" for ref, o in objects.items() if o.forbidden is not None)
    policy = objects.get(OBJECTS[0])
    digests: Mapping[str, str] | None = None
    if policy is not None and policy.body is not None:
        variables = (policy.body.get("spec") or {}).get("variables") or []
        found = [
            v.get("expression", "") for v in variables if isinstance(v, dict) and v.get("name") == "digests"
        ]
        try:
            parsed = json.loads(found[0]) if found else {}  # a CEL map literal of JSON's strings
        except ValueError:
            parsed = {}
        digests = {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
    return Gate(digests, present, forbidden)


def _gate_problems(
    root: Path, local: Mapping[str, str], deployed: Mapping[str, str] | None, gate: Gate
) -> list[str]:
    """What the cluster enforces, said truly in each state: nothing (no policy, or no binding),
    everything denied (a policy without parameters), or presets denied because the policy and
    the parameters here or there are of another generation."""
    if gate.forbidden:
        return []  # warned about; nothing can be said of what was not read
    policy, binding = OBJECTS[0], OBJECTS[1]
    out = []
    if policy not in gate.present:
        return [
            f"error: cluster: {policy}: not deployed: the cluster enforces no preset (PyTorchJobs "
            "of any shape are admitted)"
        ]
    if binding not in gate.present:
        out.append(
            f"error: cluster: {binding}: not deployed: the policy judges nothing (PyTorchJobs of "
            "any shape are admitted)"
        )
    elif deployed is None:
        out.append(
            f"error: cluster: {DEPLOYED}: not deployed: the binding denies every PyTorchJob in the "
            "project namespaces (no parameters)"
        )
    out += [
        f"error: cluster: {ref}: not deployed: `kubectl scale` of a PyTorchJob is not judged"
        for ref in OBJECTS[2:]
        if ref not in gate.present
    ]
    digests = gate.digests or {}
    for name in sorted({k.split(".", 1)[0] for k in local if k.endswith(".shape-sha256")}):
        mine = local[f"{name}.shape-sha256"]
        theirs = (deployed or {}).get(f"{name}.shape-sha256")
        if digests.get(name) != mine:
            out.append(
                f"error: {root / (name + '.yaml')}: live: the deployed policy "
                + ("has no checks for it" if name not in digests else "has other checks for it")
                + " than the approved presets here give (the cluster denies its jobs until policy.yaml "
                "and params.yaml of one generation are applied)"
            )
        elif theirs is not None and theirs != digests[name]:
            out.append(
                f"error: {root / (name + '.yaml')}: live: the deployed policy and parameters are of "
                "two generations (the cluster denies its jobs)"
            )
    return out


def deployment_report(
    root: Path,
    local: Mapping[str, str],
    deployed: Mapping[str, str] | None,
    where: str = DEPLOYED,
    gate: Gate | None = None,
) -> tuple[list[str], list[str]]:
    """`presets verify --live`'s (stdout, stderr) lines for the parameters here (params_data)
    and on the cluster (None: no ConfigMap), and the policy and bindings the cluster holds
    (GATE; None: not read); any stderr line is a finding."""
    problems = []
    enforcing = gate is None or {OBJECTS[0], OBJECTS[1]} <= gate.present
    if deployed is None and (gate is None or OBJECTS[0] not in gate.present):
        problems.append(f"error: cluster: {where}: not deployed (no admission parameters on the cluster)")
    if gate is not None:
        problems += _gate_problems(root, local, deployed, gate)
    problems += [d.line(root, where, enforcing) for d in compare_deployed(local, deployed or {})]
    if not problems:
        what = "the policy, its bindings and " if gate is not None else ""
        return [visible(f"ok: live: {what}{where} match the approved presets")], []
    # the names are the cluster's ConfigMap keys: each line stays one line (errors.visible)
    return [], [*map(visible, problems), HINT]


__all__ = [
    "DEPLOYED",
    "OBJECTS",
    "PARAMS_NAME",
    "PARAMS_NAMESPACE",
    "POLICY_NAME",
    "SCALE_POLICY_NAME",
    "Deployment",
    "Gate",
    "compare_deployed",
    "deployment_report",
    "read_gate",
]
