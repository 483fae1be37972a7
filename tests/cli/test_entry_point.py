"""A wrapper script as the entry point (issue 16, item 2): run as an executable, never by
Python; a name that says neither is refused."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runai_spec.facts.kubeflow import pytorch_container, replica_specs
from runai_spec.facts.torchrun import entry_point_kind
from runai_spec.outputs.explain import explain_workload
from runai_spec.pipeline.smoke import smoke_workload
from runai_spec.pipeline.workload import Workload, prepare_workload
from runai_spec.rehearse import plan_pods
from runai_spec.rehearse.spec import RehearsalSpec

LOGS = ["--log-dir=/checkpoints/logs/$(POD_NAME)", "--tee=3"]  # a log per rank, on the volume
LAUNCHERS = {
    "h200-1gpu": [],
    "h200-8gpu": ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=8", "--no-python", *LOGS],
    "h200-2x8-ib": [
        "torchrun",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
        "--rdzv-id=demo",
        "--max-restarts=2",
        "--rdzv-conf=join_timeout=900,read_timeout=600",
        "--no-python",
        *LOGS,
    ],
    "h200-elastic-2to4x8-ib": [
        "torchrun",
        "--nproc-per-node=8",
        "--rdzv-id=demo",
        "--rdzv-conf=join_timeout=900,read_timeout=600",
        "--no-python",
        *LOGS,
    ],
}


def workload(base: dict[str, Any], write: Callable[..., Path], preset: str, command: list[str]) -> Workload:
    base["preset"] = preset
    base["command"] = command
    if preset == "h200-1gpu":
        base["batch"] = {"local": 4, "grad_accum": 2, "global": 8}
    elif preset == "h200-8gpu":
        base["batch"] = {"local": 4, "grad_accum": 2, "global": 64}
    elif preset.startswith("h200-elastic"):
        base["batch"] = {"local": 4, "grad_accum": 2, "global": 256}
    return prepare_workload(write(base))


def commands(w: Workload) -> list[list[str]]:
    job = w.manifests[-1]
    return [list(pytorch_container(spec, role)["command"]) for role, _, spec in replica_specs(job)]


def launcher_findings(w: Workload) -> list[str]:
    return [f"{f.message} / {f.hint}" for f in w.findings if f.rule == "launcher"]


@pytest.mark.parametrize("preset", sorted(LAUNCHERS))
@pytest.mark.parametrize("entry", [["./run.sh", "--lr", "1"], ["bash", "run.sh"], ["/opt/app/run.bash"]])
def test_a_wrapper_script_runs_as_an_executable_in_every_layout(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], preset: str, entry: list[str]
) -> None:
    w = workload(base_profile, write_profile, preset, entry)
    assert launcher_findings(w) == [] and not w.errors, w.findings
    for argv in commands(w):
        assert argv == LAUNCHERS[preset] + entry  # never `python -u ./run.sh`, `torchrun run.sh`
    if preset == "h200-1gpu":
        assert dict(w.plan.env)["LOCAL_RANK"] == "0"


def test_a_python_script_keeps_its_launcher(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    w = workload(base_profile, write_profile, "h200-1gpu", ["train.py"])
    assert commands(w) == [["python", "-u", "train.py"]]
    w = workload(base_profile, write_profile, "h200-2x8-ib", ["train.py"])
    launcher = [a for a in LAUNCHERS["h200-2x8-ib"] if a != "--no-python"]
    assert commands(w) == [[*launcher, "train.py"]] * 2


def test_a_script_without_a_slash_is_refused_with_the_path_form(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    w = workload(base_profile, write_profile, "h200-2x8-ib", ["run.sh", "--lr", "1"])
    assert launcher_findings(w) == [
        "'run.sh' is run as an executable, and without a '/' it is looked up on PATH, not in "
        "the working directory / write ['./run.sh', '--lr', '1'] (relative to working_dir), "
        "its absolute path, or ['bash', 'run.sh', '--lr', '1']"
    ]


@pytest.mark.parametrize("first", ["train", "entrypoint.exe", "./bin/trainer"])
def test_an_entry_point_that_cannot_be_told_is_refused(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], first: str
) -> None:
    w = workload(base_profile, write_profile, "h200-1gpu", [first])
    found = launcher_findings(w)
    assert len(found) == 1 and found[0].startswith(
        f"{first!r}: runai-spec cannot tell whether this is a Python script or an executable"
    )
    assert "[bash, run.sh]" in found[0]


def test_the_kind_is_decided_by_the_name() -> None:
    assert entry_point_kind(["train.py"]) == entry_point_kind(["-m", "pkg"]) == "python"
    assert entry_point_kind(["./run.sh"]) == entry_point_kind(["/bin/bash", "x.sh"]) == "executable"
    assert entry_point_kind(["bash", "train.py"]) is None and entry_point_kind(["run"]) is None


def test_no_python_comes_from_the_profiles_command(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    w = workload(base_profile, write_profile, "h200-2x8-ib", ["./run.sh"])
    origin = w.plan.origins[f"launcher[{w.plan.command.index('--no-python')}]"]
    assert (origin.kind, origin.field) == ("profile", "command[0]")
    assert any(
        "--no-python" in line and "command[0]" in line
        for line in explain_workload(w).annotated().splitlines()
    )


@pytest.mark.parametrize("preset", ["h200-1gpu", "h200-2x8-ib"])
def test_the_smoke_test_and_the_rehearsal_run_preflight_with_python(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], preset: str, tmp_path: Path
) -> None:
    w = workload(base_profile, write_profile, preset, ["./run.sh"])
    smoke_job = smoke_workload(w)[-1]
    for role, _, spec in replica_specs(smoke_job):
        argv = list(pytorch_container(spec, role)["command"])
        assert "--no-python" not in argv and argv[-1] != "./run.sh"
        assert argv[:2] == ["python", "-u"] if preset == "h200-1gpu" else argv[0] == "torchrun"
    pods, _ = plan_pods(
        list(w.manifests), RehearsalSpec(procs_per_pod=1, python=sys.executable), root=tmp_path
    )
    for pod in pods:
        assert "--no-python" not in pod.argv and pod.argv[0] == sys.executable
        assert any(a.endswith("preflight.py") for a in pod.argv)
    own, _ = plan_pods(
        list(w.manifests),
        RehearsalSpec(procs_per_pod=1, python=sys.executable, own_script=True),
        root=tmp_path / "own",
    )
    for pod in own:
        if preset == "h200-1gpu":  # the wrapper script runs itself, as in the pod
            assert list(pod.argv) == ["./run.sh"]
        else:
            assert "--no-python" in pod.argv and pod.argv[-1] == "./run.sh"
