"""The rehearse package without torch: operator env, argv rewriting, restart policy, lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, example_job
from runai_spec.rehearse import (
    MULTICAST_OFF,
    PodOutcome,
    operator_env,
    operator_verdict,
    parse_lines,
    plan_pods,
    set_nproc,
    split_command,
)
from runai_spec.rehearse.spec import RehearsalSpec


def test_operator_env_with_master_counts_processes_not_pods() -> None:
    job = example_job("multi-node")
    env = operator_env(job, "Worker", 0)
    assert env["WORLD_SIZE"] == "16" and env["RANK"] == "1" and env["PET_NODE_RANK"] == "1"
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8"
    assert env["MASTER_ADDR"] == "llm-7b-fsdp-master-0" and env["MASTER_PORT"] == "23456"


def test_operator_env_elastic_worker_only_sets_no_rank() -> None:
    job = example_job("elastic")
    env = operator_env(job, "Worker", 1)
    assert "RANK" not in env and "MASTER_ADDR" not in env and "WORLD_SIZE" not in env
    assert env["PET_NNODES"] == "2:4" and env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_RDZV_ENDPOINT"].endswith("-worker-0:23456")


def test_split_command_finds_the_entry_point() -> None:
    t = split_command(
        ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=8", "train.py", "--config", "x"]
    )
    assert t.kind == "torchrun" and t.entry == ("train.py", "--config", "x")
    p = split_command(["python", "-u", "train.py", "--lr", "1"])
    assert p.kind == "python" and p.head == ("python", "-u") and p.entry[0] == "train.py"
    assert set_nproc(t.head, 2)[-1] == "--nproc-per-node=2"


def test_plan_pods_maps_the_cluster_onto_loopback(tmp_path: Path) -> None:
    pods, world = plan_pods([example_job("multi-node")], RehearsalSpec(procs_per_pod=2), root=tmp_path)
    assert world == 4 and [p.name for p in pods] == ["master-0", "worker-0"]
    for pod in pods:
        assert pod.env["MASTER_ADDR"] == "127.0.0.1" == pod.env["PET_MASTER_ADDR"]
        assert pod.env["PET_NPROC_PER_NODE"] == "2" and pod.env["WORLD_SIZE"] == "4"
        assert all(pod.env[k] == v for k, v in MULTICAST_OFF.items())
        assert "--plan-world-size" in pod.argv and "train.py" not in pod.argv
    assert pods[0].env["MASTER_PORT"] == pods[1].env["MASTER_PORT"]


def test_parse_lines_tolerates_prefixes_and_glued_lines() -> None:
    text = '[default0]:PREFLIGHT {"check": "a", "rank": 0}PREFLIGHT {"check": "b", "rank": 1}\n'
    assert [r["check"] for r in parse_lines(text)] == ["a", "b"]


def test_preflight_imports_nothing_from_the_package_and_rehearse_no_torch() -> None:
    src = ROOT / "src" / "runai_spec"
    torchless = [
        *sorted((src / "rehearse").glob("*.py")),
        src / "pipeline" / "checklist.py",
        src / "pipeline" / "smoke.py",
    ]
    assert len(torchless) > 4  # the rehearse package's modules were found
    for path, banned in [(src / "preflight.py", "runai_spec"), *((p, "torch") for p in torchless)]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                name = ("." * node.level) + (node.module or "")
                assert not (path.name == "preflight.py" and node.level), name
                assert not name.startswith(banned), (path, name)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith(banned) for a in node.names), path


@pytest.mark.parametrize(
    ("policy", "backoff", "refused"),
    [
        ("OnFailure", 3, None),
        ("OnFailure", 2, "reach the backoffLimit of 2"),
        ("Never", 3, "restartPolicy Never on master-0, worker-0"),
        ("ExitCode", 3, "treats master-0 (exit 1) as a permanent error"),
    ],
)
def test_the_restart_follows_the_operators_restart_policy(
    policy: str, backoff: int, refused: str | None
) -> None:
    job = example_job("multi-node")
    job["spec"]["runPolicy"]["backoffLimit"] = backoff
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["restartPolicy"] = policy
    failed = [
        PodOutcome("master-0", 0, 1, False, False, Path("m.log"), 0),  # torchrun gave up
        PodOutcome("worker-0", 1, -9, False, True, Path("w.log"), 0),
    ]  # SIGKILL: 137
    why, _ = operator_verdict(job, {"master-0": "Master", "worker-0": "Worker"}, failed)
    assert (why is None) if refused is None else (why is not None and refused in why)


def test_a_python_without_torch_is_bad_input_before_anything_is_written(tmp_path: Path) -> None:
    from runai_spec.errors import InputError
    from runai_spec.rehearse import rehearse_manifests

    # stands in for an environment without torch: fails the import as such a Python would
    python = tmp_path / "python-without-torch"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(InputError) as caught:
        rehearse_manifests(
            [example_job("single-gpu")], RehearsalSpec(python=str(python), logs_dir=tmp_path / "logs")
        )
    assert caught.value.field == "torch" and "pip install torch" in (caught.value.hint or "")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("example", "static"),
    [("multi-node", False), ("elastic", False), ("single-node", False), ("single-gpu", False)],
)
def test_the_static_rendezvous_is_recognised_in_the_rendered_job(example: str, static: bool) -> None:
    from runai_spec.facts.torchrun import split_command
    from runai_spec.rehearse.job import find_job
    from runai_spec.rehearse.restarts import static_rendezvous

    text = (ROOT / "examples" / example / "manifest.yaml").read_text()
    job = find_job(list(yaml.safe_load_all(text)))
    assert static_rendezvous(job) is static
    # the old launcher (bare torchrun, as the multi-node preset rendered it before issue 11)
    # is still detected static
    if example == "multi-node":
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            container = spec["template"]["spec"]["containers"][0]
            launcher = split_command(container["command"])
            assert any(a.startswith("--rdzv-backend=c10d") for a in launcher.head)
            container["command"] = ["torchrun", *launcher.entry]
        job["spec"]["runPolicy"]["backoffLimit"] = 3
        assert static_rendezvous(job) is True
