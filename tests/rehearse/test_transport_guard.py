"""The transport guard (issue 39 item 5): DeepSpeed's OpenMPI runner (its mpirun transport flags,
.deepspeed_env, DS_ENV_FILE) and the `hostname -I` master address (mpi_discovery) where the preset
attaches a second network, in `validate` and in the own-script audit (DeepSpeed 0.19.8:
deepspeed/launcher/runner.py, launcher/multinode_runner.py, comm/comm.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, needs_torch, run
from mpi_presets import mpi_presets, mpi_profile
from runai_spec.rehearse.argv import install_audit_layer
from runai_spec.rehearse.filesystem import AUDIT_ENV, AUDIT_KEY_ENV
from runai_spec.rehearse.script_checks import read_audit
from runai_spec.rehearse.script_records import ScriptRun
from runai_spec.rehearse.script_rows import master_address_row, transport_env_row


@pytest.fixture
def signed(presets_dir: Path, _engineer_key: Path) -> Path:
    return mpi_presets(presets_dir, _engineer_key)


def test_validate_refuses_deepspeeds_openmpi_runner_naming_the_transport_it_forces(
    signed: Path, tmp_path: Path
) -> None:
    command = ["deepspeed", "--launcher=openmpi", "train.py"]
    result = run("validate", str(mpi_profile(tmp_path, launcher="torchrun", command=command)))
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.stderr.splitlines() if "OpenMPI runner" in ln)
    for forced in ("-x UCX_TLS=tcp", "--mca btl ^openib", "--mca btl_tcp_if_include eth0", ".deepspeed_env"):
        assert forced in line, line
    plain = run(
        "validate", str(mpi_profile(tmp_path, launcher="torchrun", command=["deepspeed", "train.py"]))
    )
    assert "OpenMPI runner" not in plain.stderr  # the pdsh runner: refused as a launcher only


def test_validate_refuses_ds_env_file_and_warns_of_a_deepspeed_env_beside_the_profile(
    signed: Path, tmp_path: Path
) -> None:
    result = run("validate", str(mpi_profile(tmp_path, env={"DS_ENV_FILE": "/workspace/ds.env"})))
    assert result.exit_code == 1 and "env.DS_ENV_FILE: DS_ENV_FILE names the file" in result.stderr
    (tmp_path / ".deepspeed_env").write_text("UCX_TLS=tcp\n", encoding="utf-8")
    beside = run("validate", str(mpi_profile(tmp_path)))
    assert beside.exit_code == 0, beside.output
    assert (
        f"warning: {tmp_path / 'profile.yaml'}" in beside.stderr
        and ".deepspeed_env is DeepSpeed's" in beside.stderr
    )


def _run(second_network: bool) -> ScriptRun:
    return ScriptRun(world=4, plan_world=16, checkpoint_dir="/c", gpus=0, restarted=False, timed_out=False,
                     second_network=second_network)  # fmt: skip


def test_the_master_address_row_fails_only_where_a_second_network_is_attached() -> None:
    chose = [{"event": "master-address", "rank": 0, "how": "mpi_discovery", "where": "train.py:9"}]
    failed = master_address_row(chose, _run(True))
    assert failed is not None and failed.status == "fail" and failed.failed_ranks == (0,)
    assert "OMPI_COMM_WORLD_*" in failed.message and "train.py:9" in failed.message
    noted = master_address_row(chose, _run(False))
    assert noted is not None and noted.status == "note"
    assert master_address_row([{"event": "start", "rank": 0}], _run(True)) is None


def test_the_runners_transport_fails_the_transport_env_row() -> None:
    records = [
        {"event": "deepspeed-env", "rank": 1, "path": "/workspace/.deepspeed_env", "where": "t.py:3"},
        {"event": "transport-flags", "rank": 0, "argv": ["mpirun", "-x", "UCX_TLS=tcp"], "where": "t.py:5"},
    ]
    row = transport_env_row(records)
    assert row is not None and row.status == "fail" and row.failed_ranks == (0, 1)
    assert "DeepSpeed's OpenMPI runner's transport" in row.message and ".deepspeed_env" in row.message


SCRIPT = """
import os, subprocess
os.environ["OMPI_MCA_btl"] = "tcp"
subprocess.run(["hostname", "-I"], capture_output=True)
subprocess.run(["true", "-x", "UCX_TLS=tcp"])
open(".deepspeed_env").close()
"""


def test_the_audit_layer_records_them_in_a_rank_mpirun_started(tmp_path: Path) -> None:
    """A process with OpenMPI's rank variables is a rank to the audit layer (no torch needed)."""
    install_audit_layer(tmp_path)
    (tmp_path / ".deepspeed_env").write_text("UCX_TLS=tcp\n", encoding="utf-8")
    mpi_env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}
    env = {"PATH": os.environ["PATH"], AUDIT_ENV: str(tmp_path / "audit"), AUDIT_KEY_ENV: "k" * 64,
           "PYTHONPATH": str(tmp_path / "audit-layer"), **mpi_env}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    records = read_audit(tmp_path / "audit", "k" * 64)
    events = {r["event"]: r for r in records}
    assert {"start", "env-set", "master-address", "transport-flags", "deepspeed-env"} <= set(events), events
    assert {r["rank"] for r in records} == {1} and events["start"]["world_size"] == 4
    assert events["env-set"]["name"] == "OMPI_MCA_btl" and events["master-address"]["how"] == "hostname -I"
    assert events["master-address"]["where"].startswith("<string>:")  # the script's line, not subprocess.py


DEEPSPEED = (
    importlib.util.find_spec("deepspeed") is not None and importlib.util.find_spec("mpi4py") is not None
)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(
    shutil.which("mpirun") is None or not DEEPSPEED, reason="needs mpirun, deepspeed and mpi4py"
)
@pytest.mark.parametrize("fixed", [False, True], ids=["mpi_discovery", "ranks-set-first"])
def test_deepspeeds_mpi_discovery_under_the_mpijobs_mpirun(
    signed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed: bool
) -> None:
    """DeepSpeed 0.19.8 over the rendered mpirun (its CPU accelerator, gloo): init_distributed
    without RANK runs mpi_discovery, and the preset attaches the IB rails: row master-address
    fails naming the script's line; with RANK, WORLD_SIZE, LOCAL_RANK set first, no such row."""
    needs_torch()
    shutil.copy(ROOT / "tests" / "rehearse_fixtures" / "mpi_deepspeed.py", tmp_path / "train.py")
    command = ["train.py", *(["--fixed"] if fixed else [])]
    profile = mpi_profile(tmp_path, command=command, strategy="deepspeed", zero_stage=1)
    monkeypatch.chdir(tmp_path)
    options = ("--procs-per-pod", "2", "--own-script", "--timeout", "120", "--format", "json")
    result = run("rehearse", str(profile), "--logs", str(tmp_path / "logs"), *options)
    report: dict[str, Any] = json.loads(result.stdout or "{}")
    rows = {c["check"]: c for c in report["checks"]}
    assert rows["world-size"]["status"] == rows["shutdown"]["status"] == "pass", report
    if fixed:
        assert "master-address" not in rows, rows.get("master-address")
    else:
        assert rows["master-address"]["status"] == "fail" and result.exit_code == 1
        assert "train.py:" in rows["master-address"]["message"], rows["master-address"]


def _constants(path: Path) -> dict[str, Any]:
    """A self-contained file's top-level literal constants (preflight.py imports torch; the
    audit layer must not be imported here)."""
    import ast

    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], (ast.Name, ast.Tuple)):
            with contextlib.suppress(ValueError):
                value = ast.literal_eval(node.value)
                names = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
                values = value if isinstance(node.targets[0], ast.Tuple) else [value]
                found |= {n.id: v for n, v in zip(names, values, strict=True) if isinstance(n, ast.Name)}
    return found


def test_the_self_contained_files_spell_the_facts_as_facts_mpi_does() -> None:
    """preflight.py and the audit layer import nothing of runai-spec: their copies of OpenMPI's
    rank variables and DeepSpeed's runner facts agree with each other and with facts/mpi.py."""
    from runai_spec.facts import mpi

    src = ROOT / "src" / "runai_spec"
    preflight = _constants(src / "preflight.py")
    script = _constants(src / "audit" / "runai_spec_script.py")
    site = (src / "audit" / "sitecustomize.py").read_text(encoding="utf-8")
    names = (preflight["MPI_RANK"], preflight["MPI_SIZE"], preflight["MPI_LOCAL_RANK"])
    assert names == ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")
    prefix = _constants(src / "audit" / "sitecustomize.py")["_W"]  # sitecustomize builds them from it
    line = site.split("MPI_NAMES = ", 1)[1].split("\n", 1)[0]
    for name in names:
        assert name.startswith(prefix) and f'{{_W}}{name.removeprefix(prefix)}"' in line, (name, line)
    assert script["DEEPSPEED_ENV_FILE"] == mpi.DEEPSPEED_ENV_FILE
    flags = " ".join(mpi.DEEPSPEED_OPENMPI_TRANSPORT).split()
    assert all(token in flags for token in script["RUNNER_TRANSPORT"])
