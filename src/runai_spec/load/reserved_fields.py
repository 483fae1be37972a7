"""The fields a profile may not set (the engineers' own), each named as a finding, not an error."""

from __future__ import annotations

from typing import Any

from ..errors import Location
from ..findings import Finding

# The site guide reserves these for the engineers; a profile naming one gets a finding
# that names the rule, not a silent drop or a generic "unknown field".
RESERVED: dict[str, str] = {
    key: "reserved-field"
    for key in (
        "gpus",
        "gpu",
        "gpus_per_pod",
        "gpu_devices",
        "gpu_devices_per_pod",
        "num_gpus",
        "resources",
        "cpu",
        "memory",
        "shared_memory",
        "shm",
        "compute",
        "compute_preset",
        "workers",
        "num_workers",
        "replicas",
        "nodes",
        "num_nodes",
        "nnodes",
        "nproc_per_node",
        "priority",
        "priority_class",
        "priorityClassName",
        "preemptible",
        "preemptibility",
        "elastic",
        "elasticity",
        "elastic_policy",
        "elasticPolicy",
        "min_replicas",
        "max_replicas",
        "node_pool",
        "node_pools",
        "nodePool",
        "node_selector",
        "nodeSelector",
        "affinity",
        "tolerations",
        "network",
        "annotations",
        "labels",
        "infiniband",
        "rdma",
        "extended_resources",
        "capabilities",
        "hostNetwork",
        "host_network",
        "privileged",
        "securityContext",
        "namespace",
        "scheduler",
        "schedulerName",
        "restart_policy",
        "backoff_limit",
    )
}

_RESERVED_MESSAGE = (
    "reserved for the SCC AI Engineers (compute preset, workers, priority, "
    "elasticity, node pools, network attachment are set by the preset)"
)
# Variable names are the researcher's own namespace: `env.GPUS` is a plain variable.
FREE_KEYS = ("env", "secret_env")


def _strip_reserved(
    value: Any, path: str, source: str, lines: dict[str, int], findings: list[Finding]
) -> Any:
    # Nested too: `checkpoint.annotations` or `nvidia.com/rdma_ib` copied from another
    # project must name the rule, not fail as a generic unknown field. (A value that holds no
    # mapping or list is kept as it is without a call: most of a profile's values.)
    if isinstance(value, list):
        return [
            _strip_reserved(item, f"{path}[{i}]", source, lines, findings)
            if isinstance(item, (dict, list))
            else item
            for i, item in enumerate(value)
        ]
    if not isinstance(value, dict):
        return value
    kept = {}
    for key, child in value.items():
        if key in RESERVED or "/" in key:
            child_path = f"{path}.{key}" if path else key
            what = (
                "extended resources, annotations and InfiniBand devices come from the preset"
                if "/" in key
                else _RESERVED_MESSAGE
            )
            if "/" in key:
                what = f"reserved for the SCC AI Engineers ({what})"
            findings.append(
                Finding(
                    "reserved-field",
                    Location(source, lines.get(child_path), child_path),
                    what,
                    "remove it; ask your AI Engineer for a preset that has what you need",
                )
            )
        elif not isinstance(child, (dict, list)) or (not path and key in FREE_KEYS):
            kept[key] = child
        else:
            kept[key] = _strip_reserved(child, f"{path}.{key}" if path else key, source, lines, findings)
    return kept


def reserved_findings(
    raw: dict[str, Any], source: str, lines: dict[str, int]
) -> tuple[dict[str, Any], list[Finding]]:
    findings: list[Finding] = []
    kept = _strip_reserved(raw, "", source, lines, findings)
    return kept, findings
