"""The training operator's model: its env per pod (v1.7, v1.8, v1.9), its webhook's rules, names, nproc."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conftest import ROOT, pytorch_container, pytorch_containers
from runai_spec.errors import InputError
from runai_spec.facts import kubeflow
from runai_spec.facts.kubeflow import (
    CONTAINER,
    DEFAULT_PORT,
    MASTER,
    NAME_MAX,
    PORT_NAME,
    WORKER,
    injected_nproc,
    operator_env,
    operator_problems,
    pod_name,
    torchrun_procs,
)
from runai_spec.load.yaml import load_documents


def example(name: str) -> dict[str, Any]:
    (job,) = load_documents(ROOT / "examples" / name / "manifest.yaml")
    return job


def test_pod_and_service_names_follow_gen_general_name() -> None:
    assert pod_name("train", MASTER, 0) == "train-master-0"
    assert pod_name("train", WORKER, 3) == "train-worker-3"
    assert kubeflow.master_addr("train") == "train-master-0"


def test_v1_9_env_of_a_master_and_workers_job() -> None:
    job = example("multi-node")
    name = job["metadata"]["name"]
    port = str(pytorch_container(job)["ports"][0]["containerPort"])
    nproc = int(job["spec"]["nprocPerNode"])
    master, worker = operator_env(job, MASTER, 0), operator_env(job, WORKER, 0, version="1.9")
    assert master == {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": port,
        "MASTER_ADDR": f"{name}-master-0",
        "PET_MASTER_PORT": port,
        "PET_MASTER_ADDR": f"{name}-master-0",
        "WORLD_SIZE": str(2 * nproc),
        "RANK": "0",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_NNODES": "2",
    }
    assert (worker["RANK"], worker["PET_NODE_RANK"]) == ("1", "1")  # the Master is rank 0


def test_v1_9_env_of_an_elastic_worker_only_job() -> None:
    job = example("elastic")
    name = job["metadata"]["name"]
    elastic = job["spec"]["elasticPolicy"]
    env = operator_env(job, WORKER, 1)
    assert "MASTER_ADDR" not in env and "RANK" not in env
    # v1.8+: spec.nprocPerNode reaches Worker-only jobs too; v1.7 only set it with a Master
    assert env["PET_NPROC_PER_NODE"] == str(job["spec"]["nprocPerNode"])
    assert "PET_NPROC_PER_NODE" not in operator_env(job, WORKER, 1, version="1.7")
    assert env["PET_RDZV_ENDPOINT"].startswith(f"{name}-worker-0:")
    assert env["PET_NNODES"] == f"{elastic['minReplicas']}:{elastic['maxReplicas']}"
    assert env["PET_RDZV_BACKEND"] == kubeflow.RDZV_BACKEND


def test_port_defaults_when_the_container_names_none() -> None:
    job = copy.deepcopy(example("multi-node"))
    for container in pytorch_containers(job):
        container["ports"] = [{"name": "other", "containerPort": 1}]
    assert operator_env(job, MASTER, 0)["MASTER_PORT"] == str(DEFAULT_PORT)


def test_an_operator_version_not_modelled_is_refused() -> None:
    with pytest.raises(InputError, match="not modelled"):
        operator_env(example("multi-node"), MASTER, 0, version="1.6")


GOLDEN = ROOT / "tests" / "golden"
EXAMPLES = ("single-gpu", "single-node", "multi-node", "elastic")


def operator_envs(version: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in EXAMPLES:
        job = example(name)
        for rtype, n, _ in kubeflow.replica_specs(job):
            for i in range(n):
                # a list of pairs: the order is the operator's order and is compared too
                out[kubeflow.pod_name(job["metadata"]["name"], rtype, i)] = [
                    [k, v] for k, v in operator_env(job, rtype, i, version=version).items()
                ]
    return out


@pytest.mark.parametrize("version", kubeflow.OPERATOR_VERSIONS)
def test_operator_env_per_version_matches_its_golden(version: str) -> None:
    path = GOLDEN / f"operator-env-{version}.json"
    got = json.dumps(operator_envs(version), indent=1) + "\n"
    assert path.read_text() == got, (
        f'refresh with: PYTHONPATH=src python -c \'import sys; sys.path.insert(0, "tests"); '
        f'import test_core_kubeflow as t; print(t.json.dumps(t.operator_envs("{version}"), '
        f"indent=1))' > {path.relative_to(ROOT)}"
    )


def test_v1_7_orders_nproc_before_the_node_rank() -> None:
    keys = list(operator_env(example("multi-node"), MASTER, 0, version="1.7"))
    assert keys.index("PET_NPROC_PER_NODE") == keys.index("PET_NODE_RANK") - 1
    keys = list(operator_env(example("multi-node"), MASTER, 0, version="1.8"))
    assert keys.index("PET_NPROC_PER_NODE") == keys.index("PET_NODE_RANK") + 1


def test_the_rendered_examples_pass_the_webhook_rules() -> None:
    for name in ("single-gpu", "single-node", "multi-node", "elastic"):
        job = example(name)
        assert operator_problems(job) == []
        containers = job["spec"]["pytorchReplicaSpecs"][MASTER if name != "elastic" else WORKER]["template"][
            "spec"
        ]["containers"]
        assert containers[0]["name"] == CONTAINER
        assert containers[0]["ports"][0]["name"] == PORT_NAME


def test_webhook_rules_name_master_and_container() -> None:
    job = copy.deepcopy(example("multi-node"))
    job["metadata"]["name"] = "a" * (NAME_MAX + 1)
    job["spec"]["pytorchReplicaSpecs"][MASTER]["replicas"] = 2
    pytorch_container(job, WORKER)["name"] = "x"
    problems = operator_problems(job)
    assert [p.split(":")[0] for p in problems] == [
        "metadata.name",
        "spec.pytorchReplicaSpecs.Master.replicas",
        "spec.pytorchReplicaSpecs.Worker",
    ]


def test_nproc_comes_from_the_flag_else_the_operator_else_one() -> None:
    job = example("multi-node")
    nproc = job["spec"]["nprocPerNode"]
    assert injected_nproc(job) == nproc
    assert torchrun_procs(job, ["torchrun", "train.py"]) == nproc
    assert torchrun_procs(job, ["torchrun", "--nproc-per-node=3", "train.py"]) == "3"
    worker_only = copy.deepcopy(example("elastic"))
    # v1.7 read nprocPerNode on the Master branch only; v1.8+ whenever it is set
    assert injected_nproc(worker_only, "1.7") is None
    assert torchrun_procs(worker_only, ["torchrun", "train.py"], "1.7") == 1
    assert injected_nproc(worker_only) == worker_only["spec"]["nprocPerNode"]
    assert torchrun_procs(worker_only, ["torchrun", "train.py"], "1.8") == nproc


def test_the_plan_carries_the_sites_operator_version_and_sigterm_checkpointing() -> None:
    from pydantic import ValidationError

    from runai_spec.load.site import Site

    assert Site(cluster="c", registries=["r"]).operator_version == kubeflow.OPERATOR_VERSION
    with pytest.raises(ValidationError, match="operator_version"):
        Site(cluster="c", registries=["r"], operator_version="1.6")
