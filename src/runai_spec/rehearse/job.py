"""Reading the rendered PyTorchJob: its replicas, containers, and the operator's env."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError
from ..kubeflow import CONTAINER

DEFAULT_PORT = 23456  # kubeflow.org/v1 PytorchJobDefaultPort
PORT_NAME = "pytorchjob-port"


def find_job(manifests: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    jobs = [m for m in manifests if m.get("kind") == "PyTorchJob"]
    if len(jobs) != 1:
        raise InputError(f"expected one PyTorchJob among the manifests, found {len(jobs)}",
                         hint="rehearse takes the rendered output of one profile")
    job = jobs[0]
    if job.get("apiVersion") != "kubeflow.org/v1":
        raise InputError(f"PyTorchJob apiVersion {job.get('apiVersion')!r} is not "
                         "kubeflow.org/v1")
    return job


def replicas_of(job: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(type, replicas, spec) for Master then Worker, as the operator numbers them."""
    specs = job.get("spec", {}).get("pytorchReplicaSpecs") or {}
    out = []
    for rtype in ("Master", "Worker"):
        spec = specs.get(rtype)
        if spec is not None:
            out.append((rtype, int(spec.get("replicas", 1)), spec))
    if not out:
        raise InputError("the PyTorchJob has no Master or Worker replicas",
                         field="spec.pytorchReplicaSpecs")
    return out


def container_of(spec: Mapping[str, Any], rtype: str) -> Mapping[str, Any]:
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    for c in containers:
        if c.get("name") == CONTAINER:
            return dict(c)
    raise InputError(f"the {rtype} template has no container named 'pytorch'",
                     field=f"spec.pytorchReplicaSpecs.{rtype}.template.spec.containers")


def _port(container: Mapping[str, Any]) -> int:
    for p in container.get("ports") or []:
        if p.get("name") == PORT_NAME:
            return int(p["containerPort"])
    return DEFAULT_PORT


def nproc_of(job: Mapping[str, Any]) -> int:
    """getNprocPerNodeInt(): 1 unless spec.nprocPerNode is an integer string."""
    value = job.get("spec", {}).get("nprocPerNode")
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def operator_env(job: Mapping[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """The variables training-operator v1.9 appends to the pytorch container (envvar.go,
    master.go, elastic.go), with the cluster's names and ports."""
    name = job["metadata"]["name"]
    spec = job.get("spec", {})
    replicas = replicas_of(job)
    by_type = {rtype: (n, s) for rtype, n, s in replicas}
    total = sum(n for _, n, _ in replicas)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "0"}
    if "Master" in by_type:
        port = _port(container_of(by_type["Master"][1], "Master"))
        rank = index + 1 if replica_type == "Worker" else index
        env.update({
            "MASTER_PORT": str(port), "MASTER_ADDR": f"{name}-master-0",
            "PET_MASTER_PORT": str(port), "PET_MASTER_ADDR": f"{name}-master-0",
            "WORLD_SIZE": str(total * nproc_of(job)), "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
        })
        if spec.get("nprocPerNode") is not None:
            env["PET_NPROC_PER_NODE"] = str(spec["nprocPerNode"])
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        worker = by_type.get("Worker")
        lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if lo is None and hi is None:  # the defaulting webhook's setElasticPolicy
            lo = hi = worker[0] if worker else None
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        port = elastic.get("rdzvPort") or (_port(container_of(worker[1], "Worker"))
                                           if worker else DEFAULT_PORT)
        env["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
        env["PET_RDZV_BACKEND"] = str(elastic.get("rdzvBackend") or "c10d")
        env["PET_NNODES"] = f"{lo}:{hi}"
        if elastic.get("maxRestarts") is not None:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if elastic.get("nProcPerNode") is not None:
            env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
        if elastic.get("rdzvId") is not None:
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
        if elastic.get("rdzvConf"):
            env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}"
                                            for c in elastic["rdzvConf"])
        if elastic.get("standalone"):
            env["PET_STANDALONE"] = ""
    else:
        env["PET_NNODES"] = str(total)
    return env
