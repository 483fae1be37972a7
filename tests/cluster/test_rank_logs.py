"""Issue 11 item 6: a log per rank that outlives the pods. The render keeps each rank's
streams apart on the checkpoint volume (torchrun --log-dir/--tee) and prefixes each pod log
line with its rank; `logs --out DIR` splits the pod log per rank; the rehearsal runs exactly
the rendered launcher, its volume path mapped onto this machine."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from conftest import BASE_PROFILE, ROOT, example_job, pytorch_containers
from kube_helpers import NAME, NS, PROFILE, run
from kubeapi import KubeAPI
from runai_spec.cluster.logs import split_ranks
from runai_spec.facts.kubeflow import POD_NAME_ENV
from runai_spec.facts.torchrun import NCCL_DEBUG_FILE, RANK_PREFIX, RANK_PREFIX_ENV
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.plan.plan import plan_workload
from runai_spec.rehearse import plan_pods
from runai_spec.rehearse.checks import command_note
from runai_spec.rehearse.spec import RehearsalSpec
from runai_spec.render import render_plan
from runai_spec.render.manifests import dump

pytest_plugins = ("kube_fixtures",)
REGISTRY = PresetRegistry(ROOT / "presets")


def job_for(preset: str, **changes: Any) -> dict[str, Any]:
    data = {**copy.deepcopy(BASE_PROFILE), "preset": preset, **changes}
    plan = plan_workload(parse_profile(dump([data]), "p.yaml"), REGISTRY.get(preset), REGISTRY.site())
    return render_plan(plan)[-1]


def test_every_torchrun_pod_logs_each_rank_on_the_checkpoint_volume() -> None:
    for name in ("single-node", "multi-node", "elastic"):
        job = example_job(name)
        for c in pytorch_containers(job):
            assert c["command"][0] == "torchrun"
            assert "--log-dir=/checkpoints/logs/$(POD_NAME)" in c["command"]
            assert "--tee=3" in c["command"]
            # the downward API gives $(POD_NAME); it comes first so that later values may use it
            assert c["env"][0] == {
                "name": POD_NAME_ENV[0],
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
            }
            assert {"name": RANK_PREFIX_ENV, "value": RANK_PREFIX} in c["env"]
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert "/checkpoints" in mounts  # the folder is on the PVC, not in the container


def test_the_single_gpu_python_job_has_no_torchrun_and_no_rank_logs() -> None:
    (c,) = pytorch_containers(example_job("single-gpu"))
    assert c["command"][0] == "python"
    assert not any(a.startswith("--log-dir") for a in c["command"])
    assert all(e["name"] != POD_NAME_ENV[0] for e in c.get("env", []))


def test_nccl_debug_gives_each_rank_its_own_file_next_to_its_logs() -> None:
    job = job_for("h200-2x8-ib", diagnostics={"nccl_debug": True, "reason": "hang at step 1"})
    for c in pytorch_containers(job):
        env = {e["name"]: e.get("value") for e in c["env"]}
        # NCCL expands %h (host) and %p (pid): one file per rank process
        assert env[NCCL_DEBUG_FILE] == "/checkpoints/logs/$(POD_NAME)/nccl.%h.%p.log"
        names = [e["name"] for e in c["env"]]
        assert names.index(POD_NAME_ENV[0]) < names.index(NCCL_DEBUG_FILE)


def test_the_rehearsal_points_nccl_debug_file_at_its_volume_folder(tmp_path: Path) -> None:
    # On the H200 (NCCL 2.28.9) the rendered /checkpoints/... path, absent without a mount
    # namespace, left every NCCL INFO line on the rank's stdout and no file: the cluster,
    # where torchrun's --log-dir has made the folder on the volume, writes the file. The
    # rehearsal maps the variable onto its volume folder as it maps --log-dir.
    job = job_for("h200-2x8-ib", diagnostics={"nccl_debug": True, "reason": "hang at step 1"})
    plans, _ = plan_pods([job], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    for p in plans:
        folder = tmp_path / "volumes" / "team-a-ckpt" / "logs" / f"demo-{p.name}"
        assert p.env[NCCL_DEBUG_FILE] == f"{folder}/nccl.%h.%p.log"
        assert p.nccl_debug_file == folder / "nccl.%h.%p.log" and p.rank_logs == folder
    note = command_note(plans)
    assert note is not None and "NCCL_DEBUG_FILE (diagnostics.nccl_debug) likewise" in note.message
    # without the switch nothing is set, and the row says nothing of it
    plain, _ = plan_pods([job_for("h200-2x8-ib")], RehearsalSpec(procs_per_pod=1), root=tmp_path / "plain")
    assert all(NCCL_DEBUG_FILE not in p.env and p.nccl_debug_file is None for p in plain)


def test_a_profile_cannot_set_pod_name_itself(write_profile: Any) -> None:
    path = write_profile({**BASE_PROFILE, "env": {"POD_NAME": "x"}})
    result = run("validate", str(path))
    assert result.exit_code == 1
    assert "POD_NAME is injected" in result.stderr and "per-rank log folder" in result.stderr


def test_the_rehearsal_runs_the_rendered_log_flags_on_its_volume_folder(tmp_path: Path) -> None:
    job = example_job("multi-node")
    claim = next(
        v["persistentVolumeClaim"]["claimName"]
        for v in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    )
    plans, _ = plan_pods([job], RehearsalSpec(procs_per_pod=2), root=tmp_path)
    for p in plans:
        here = tmp_path / "volumes" / claim / "logs" / f"{NAME}-{p.name}"
        assert p.rank_logs == here and p.added_flags == ()
        assert f"--log-dir={here}" in p.argv and "--tee=3" in p.argv
        assert not any(a.startswith("--redirects") for a in p.argv)  # nothing of its own
        assert p.env[RANK_PREFIX_ENV] == RANK_PREFIX and p.env["POD_NAME"] == f"{NAME}-{p.name}"


def test_a_render_without_log_flags_still_gets_the_rehearsals_own(tmp_path: Path) -> None:
    job = example_job("multi-node")
    for c in pytorch_containers(job):
        c["command"] = [a for a in c["command"] if not a.startswith(("--log-dir", "--tee"))]
    plans, _ = plan_pods([job], RehearsalSpec(procs_per_pod=2), root=tmp_path)
    for p in plans:
        assert p.added_flags[:2] == ("--log-dir", str(tmp_path / p.name / "ranks"))
        assert p.rank_logs == tmp_path / p.name / "ranks"


def test_split_ranks_keeps_each_ranks_bytes_and_leaves_the_agents_lines(tmp_path: Path) -> None:
    log = tmp_path / "pod.log"
    log.write_bytes(
        b"agent: starting\n[rank0]:step 1 \xff\n[rank1]:step 1\r\n[rank0]:[rank1]: forged\n[rank10]:x"
    )
    assert split_ranks(log, tmp_path / "pod") == (0, 1, 10)
    assert (tmp_path / "pod" / "rank-0.log").read_bytes() == b"step 1 \xff\n[rank1]: forged\n"
    assert (tmp_path / "pod" / "rank-1.log").read_bytes() == b"step 1\r\n"
    assert (tmp_path / "pod" / "rank-10.log").read_bytes() == b"x"
    assert sorted(p.name for p in (tmp_path / "pod").iterdir()) == ["rank-0.log", "rank-1.log", "rank-10.log"]


def test_split_ranks_writes_nothing_for_a_log_without_rank_lines(tmp_path: Path) -> None:
    log = tmp_path / "pod.log"
    log.write_text("python -u train.py: one process\n")
    assert split_ranks(log, tmp_path / "pod") == ()
    assert not (tmp_path / "pod").exists()


def test_logs_out_writes_each_pod_log_and_its_ranks(api: KubeAPI, kubeconfig: Path, tmp_path: Path) -> None:
    assert run("submit", PROFILE).exit_code == 0
    api.kube.add_pod(NAME, NS, "master", 0)
    api.kube.add_pod(NAME, NS, "worker", 0)
    api.kube.logs[(NS, f"{NAME}-master-0", False)] = "agent\n[rank0]:loss 1\n[rank1]:loss 2\n"
    api.kube.logs[(NS, f"{NAME}-worker-0", False)] = "[rank2]:NCCL error\n[rank3]:ok\n"
    out = tmp_path / "logs"
    result = run("logs", PROFILE, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / f"{NAME}-master-0.log").read_text().startswith("agent\n")
    assert (out / f"{NAME}-master-0" / "rank-1.log").read_text() == "loss 2\n"
    assert (out / f"{NAME}-worker-0" / "rank-2.log").read_text() == "NCCL error\n"
    assert sorted(p.name for p in (out / f"{NAME}-worker-0").iterdir()) == ["rank-2.log", "rank-3.log"]
    assert f"2 rank(s) apart in {out / f'{NAME}-worker-0'}/rank-<k>.log" in result.stderr
