"""Each judged workload kind's CRD objects and their properties (what survives pruning).

admission_shape refuses any other key of a typed object.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from ...facts import kubeflow, mpi

# -- schema properties --------------------------------------------------------------------
# Each workload kind's CRD objects and properties, as crd_fields writes them (the tests compare
# each file with its CRD): training-operator 1.9's PyTorchJob v1 (kubeflow/training-operator
# release-1.9 `kubeflow.org_pytorchjobs.yaml`), mpi-operator v0.6.0's MPIJob v2beta1
# (kubeflow/mpi-operator v0.6.0 `manifests/base/kubeflow.org_mpijobs.yaml`).
FIELDS_FILES = {
    (kubeflow.API_VERSION, kubeflow.KIND): "pytorchjob-fields.json",
    (mpi.API_VERSION, mpi.KIND): "mpijob-fields.json",
}


def crd_fields(crd: dict[str, Any], version_name: str = "v1") -> dict[str, list[str]]:
    """Every object of the CRD's schema of VERSION_NAME -> its properties, by schema path (`*` a
    map's value, `[]` a list's item): what a typed object may hold after the API server's pruning."""
    version = next(v for v in crd["spec"]["versions"] if v["name"] == version_name)
    out: dict[str, list[str]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            out[path] = sorted(node["properties"])
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(version["schema"]["openAPIV3Schema"], "")
    return dict(sorted(out.items()))


def shipped_fields(kind: tuple[str, str] = (kubeflow.API_VERSION, kubeflow.KIND)) -> dict[str, list[str]]:
    """The objects and properties of the CRD of KIND (apiVersion, kind): FIELDS_FILES."""
    data = resources.files(__package__ or "").joinpath(FIELDS_FILES[kind]).read_text(encoding="utf-8")
    loaded: dict[str, list[str]] = json.loads(data)
    return loaded


@cache
def replica_keys() -> tuple[str, ...]:
    """Each kind's spec property of its replica specs (pytorchReplicaSpecs, mpiReplicaSpecs);
    read once (the policy's checks ask for it at every role loop)."""
    return tuple(
        k for kind in FIELDS_FILES for k in shipped_fields(kind)["spec"] if k.endswith("ReplicaSpecs")
    )


def roles_variable(key: str) -> str:
    """The policy's variable of the replica types of a job whose replica specs are KEY."""
    index = replica_keys().index(key)
    return f"roles{index}" if index else "roles"


__all__ = ["FIELDS_FILES", "crd_fields", "replica_keys", "roles_variable", "shipped_fields"]
