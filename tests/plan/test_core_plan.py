"""Topology, launcher, env and labels for each layout (DESIGN.md section 4)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conftest import BASE_PROFILE, ROOT, pytorch_container
from runai_spec.facts.kubeflow import (
    CONTAINER,
    MASTER,
    PRESET_ANNOTATION,
    PRESET_SHA_ANNOTATION,
    PROFILE_SHA_ANNOTATION,
    WORKER,
)
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.site import Site
from runai_spec.plan.plan import plan_workload
from runai_spec.render import render_plan
from runai_spec.render.manifests import dump

REGISTRY = PresetRegistry(ROOT / "presets")


def job_for(preset: str, site: Site | None = None, **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data.update(preset=preset, **changes)
    loaded = parse_profile(dump([data]), "p.yaml")
    plan = plan_workload(loaded, REGISTRY.get(preset), site or REGISTRY.site())
    (job,) = render_plan(plan)
    return job


def pod(job: dict[str, Any], role: str = MASTER) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
    return spec


def env(job: dict[str, Any], role: str = MASTER) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pytorch_container(job, role)["env"] if "value" in e}


def test_single_gpu_is_python_with_local_rank_zero() -> None:
    job = job_for("h200-1gpu")
    assert pytorch_container(job)["command"][:3] == ["python", "-u", "train.py"]
    assert env(job)["LOCAL_RANK"] == "0"
    assert job["spec"]["nprocPerNode"] == "1"
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {MASTER}


def test_single_node_is_standalone_torchrun_with_one_process_per_gpu() -> None:
    job = job_for("h200-8gpu")
    command = pytorch_container(job)["command"]
    assert command[:7] == [
        "torchrun",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=8",
        "--log-dir=/checkpoints/logs/$(POD_NAME)",
        "--tee=3",
        "train.py",
    ]
    assert pytorch_container(job)["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "LOCAL_RANK" not in env(job)


def test_multi_node_master_trains_and_torchrun_reads_the_operator_variables() -> None:
    job = job_for("h200-2x8-ib")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert (specs[MASTER]["replicas"], specs[WORKER]["replicas"]) == (1, 1)
    for role in (MASTER, WORKER):
        container = pytorch_container(job, role)
        assert container["name"] == CONTAINER
        # c10d on the Master's service, so that a pod the kubelet restarts in place rejoins
        assert container["command"][:9] == [
            "torchrun",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
            "--rdzv-id=demo",
            "--max-restarts=2",
            "--rdzv-conf=join_timeout=900,read_timeout=600",
            "--log-dir=/checkpoints/logs/$(POD_NAME)",
            "--tee=3",
            "train.py",
        ]
        assert not any(a.startswith("--nnodes") or a.startswith("--node") for a in container["command"])
        assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in container["env"]
        assert pod(job, role)["terminationGracePeriodSeconds"] == 300
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert container["resources"]["limits"]["nvidia.com/rdma_ib"] == 8
        meta = specs[role]["template"]["metadata"]
        assert "k8s.v1.cni.cncf.io/networks" in meta["annotations"]
        assert pod(job, role)["schedulerName"] == "runai-scheduler"
    assert job["spec"]["nprocPerNode"] == "8"
    assert "elasticPolicy" not in job["spec"]


def test_elastic_is_worker_only_with_c10d_bounds() -> None:
    job = job_for("h200-elastic-2to4x8-ib", batch={"local": 4, "grad_accum": 1, "global": 128})
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {WORKER}
    assert job["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 4,
        "maxRestarts": 10,
    }
    # Without a Master the operator injects no PET_NPROC_PER_NODE from nprocPerNode: the
    # launcher must say it, or torchrun starts one process on an 8-GPU pod.
    assert pytorch_container(job, WORKER)["command"][:7] == [
        "torchrun",
        "--nproc-per-node=8",
        "--rdzv-id=demo",
        "--rdzv-conf=join_timeout=900,read_timeout=600",
        "--log-dir=/checkpoints/logs/$(POD_NAME)",
        "--tee=3",
        "train.py",
    ]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 9


def test_nproc_rule_catches_a_worker_only_job_whose_torchrun_would_start_one_process() -> None:
    from runai_spec.check.launcher import check_nproc
    from runai_spec.check.rules import Context

    data = copy.deepcopy(BASE_PROFILE)
    data.update(preset="h200-elastic-2to4x8-ib", batch={"local": 4, "grad_accum": 1, "global": 128})
    loaded = parse_profile(dump([data]), "p.yaml")
    approved = REGISTRY.get("h200-elastic-2to4x8-ib")
    plan = plan_workload(loaded, approved, REGISTRY.site())
    ctx = Context(loaded, approved, REGISTRY.site(), plan, tuple(render_plan(plan)))
    assert list(check_nproc(ctx)) == []
    bare = plan._replace(launcher=("torchrun",))
    bare_ctx = ctx._replace(manifests=tuple(render_plan(bare)))
    # operator 1.8+ sets PET_NPROC_PER_NODE from nprocPerNode for Worker-only jobs too
    assert list(check_nproc(bare_ctx)) == []
    old_site = REGISTRY.site().model_copy(update={"operator_version": "1.7"})
    findings = list(check_nproc(bare_ctx._replace(site=old_site)))
    assert [(f.rule, f.message) for f in findings] == [
        ("nproc-gpus", "torchrun would start 1 process(es) per pod on 8 GPUs")
    ]


def test_run_ai_adoption_labels_and_namespace() -> None:
    job = job_for("h200-2x8-ib")
    labels = job["metadata"]["labels"]
    assert labels["runai/queue"] == "team-a" and labels["project"] == "team-a"
    assert labels["priorityClassName"] == "high"
    assert labels["kai.scheduler/preemptibility"] == "non-preemptible"
    assert job["metadata"]["namespace"] == "runai-team-a"
    assert job_for("h200-1gpu")["metadata"]["labels"]["kai.scheduler/preemptibility"] == "preemptible"


def test_site_can_map_a_project_to_another_namespace() -> None:
    site = REGISTRY.site().model_copy(update={"namespaces": {"team-a": "shared-ml"}})
    assert job_for("h200-1gpu", site=site)["metadata"]["namespace"] == "shared-ml"


def test_provenance_annotations() -> None:
    job = job_for("h200-8gpu")
    notes = job["metadata"]["annotations"]
    assert notes[PRESET_ANNOTATION] == "h200-8gpu"
    assert notes[PRESET_SHA_ANNOTATION] == REGISTRY.get("h200-8gpu").sha256
    assert len(notes[PROFILE_SHA_ANNOTATION]) == 64


@pytest.mark.parametrize("preset", ["h200-1gpu", "h200-8gpu", "h200-2x8-ib"])
def test_volumes_checkpoint_pvc_and_memory_shm(preset: str) -> None:
    job = job_for(preset, data=[{"source": "datasets-shared", "path": "/data"}])
    volumes = {v["name"]: v for v in pod(job)["volumes"]}
    assert volumes["checkpoint"]["persistentVolumeClaim"]["claimName"] == "team-a-ckpt"
    assert volumes["data-0"]["persistentVolumeClaim"] == {"claimName": "datasets-shared", "readOnly": True}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["name"]: m["mountPath"] for m in pytorch_container(job)["volumeMounts"]}
    assert mounts == {"checkpoint": "/checkpoints", "data-0": "/data", "dshm": "/dev/shm"}
