"""The MPI example (issue 39 items 1, 2): examples/mpi-multi-node renders its golden once the
engineers' proposal beside it is signed (here with a throwaway key), validates against
mpi-operator's published CRD and its validation rules, and the proposal is the shipped files
plus the MPI change only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import ALL_EXAMPLES, EXAMPLES, PROPOSED_EXAMPLES, ROOT, run
from mpi_presets import EXAMPLE, PRESET, PROPOSAL, mpi_presets, mpijob_schema
from runai_spec.facts import mpi
from runai_spec.pipeline.smoke import PREFLIGHT

PROFILE = str(EXAMPLE / "profile.yaml")


@pytest.fixture
def signed(presets_dir: Path, _engineer_key: Path) -> Path:
    return mpi_presets(presets_dir, _engineer_key)


def test_the_example_renders_its_golden_and_the_crd_takes_it(signed: Path) -> None:
    result = run("render", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (EXAMPLE / "manifest.yaml").read_text(encoding="utf-8")
    (job,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert (job["apiVersion"], job["kind"]) == (mpi.API_VERSION, mpi.KIND)
    assert [e.message for e in jsonschema.Draft7Validator(mpijob_schema()).iter_errors(job)] == []
    assert mpi.operator_problems(job) == []
    # the same topology placement as the PyTorchJob preset it is made from
    assert (
        job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"]
        == "scc.example.org/ib-leaf"
    )


def test_the_smoke_test_is_the_jobs_mpirun_with_preflight_py_as_its_program(signed: Path) -> None:
    """item 3: the smoke MPIJob keeps the job's mpirun line (the preset's flags, the -x list) and
    starts preflight.py (which reads OMPI_COMM_WORLD_*), never restarted, its ranks meeting at
    its own launcher."""
    result = run("render", "--smoke", PROFILE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (EXAMPLE / "smoke.yaml").read_text(encoding="utf-8")
    config_map, smoke = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert config_map["kind"] == "ConfigMap" and (smoke["apiVersion"], smoke["kind"]) == (
        mpi.API_VERSION,
        mpi.KIND,
    )
    assert [e.message for e in jsonschema.Draft7Validator(mpijob_schema()).iter_errors(smoke)] == []
    assert mpi.operator_problems(smoke) == []
    job = yaml.safe_load((EXAMPLE / "manifest.yaml").read_text(encoding="utf-8"))
    launcher, worker = (smoke["spec"]["mpiReplicaSpecs"][r] for r in mpi.REPLICA_TYPES)
    (command,) = (c["command"] for c in launcher["template"]["spec"]["containers"])
    (real,) = (
        c["command"] for c in job["spec"]["mpiReplicaSpecs"][mpi.LAUNCHER]["template"]["spec"]["containers"]
    )
    head = real[: real.index("train.py")]  # mpirun -np 16, the preset's flags, -x ..., python -u
    assert command[: len(head)] == head and command[len(head)] == PREFLIGHT
    assert command[command.index("--world-size") + 1] == "16"
    (env,) = (
        {e["name"]: e.get("value") for e in c["env"]} for c in launcher["template"]["spec"]["containers"]
    )
    assert env["MASTER_ADDR"] == mpi.launcher_name(smoke["metadata"]["name"]) == "llm-7b-mpi-smoke-launcher"
    assert launcher["restartPolicy"] == "Never" and smoke["spec"]["runPolicy"]["backoffLimit"] == 0
    # every pod has preflight.py: the ranks mpirun starts over SSH run it from their own pod
    for role in (launcher, worker):
        assert {"name": "runai-spec-preflight", "mountPath": "/opt/runai-spec", "readOnly": True} in role[
            "template"
        ]["spec"]["containers"][0]["volumeMounts"]


def test_the_example_validates_clean_against_the_signed_proposal(signed: Path) -> None:
    result = run("validate", "--crd", str(ROOT.parent / "shared/schemas/kubeflow.org_mpijobs.yaml"), PROFILE)
    assert result.exit_code == 0, result.output
    assert "error:" not in result.stderr and "warning:" not in result.stderr, result.stderr


def test_without_the_engineers_signature_the_example_is_refused(presets_dir: Path) -> None:
    result = run("validate", PROFILE)
    assert result.exit_code != 0, result.output
    assert PRESET in result.stderr, result.stderr


def _mapping(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


def test_the_proposal_is_the_shipped_files_plus_the_mpi_change() -> None:
    """A shipped site.yaml or h200-2x8-ib.yaml changed without the proposal fails here: refresh
    the proposal (and the goldens, `runai-spec render`) from the new files."""
    shipped, proposed = _mapping(ROOT / "presets" / "site.yaml"), _mapping(PROPOSAL / "site.yaml")
    added = {"mpi_operator": "v0.6.0", "launchers": ["torchrun", "accelerate", "mpi"]}
    grants, topology = shipped["grants"], shipped["topology"]
    placement = {**topology["placement"], PRESET: topology["placement"]["h200-2x8-ib"]}
    assert {k: v for k, v in proposed.items() if k not in added} == {
        **shipped,
        "grants": {**grants, "nlp-lab": [*grants["nlp-lab"], PRESET]},
        "topology": {**topology, "placement": placement},
    }
    assert {k: proposed[k] for k in added} == added
    lines = set((ROOT / "presets" / "site.yaml").read_text(encoding="utf-8").splitlines())
    changed = [
        ln for ln in (PROPOSAL / "site.yaml").read_text(encoding="utf-8").splitlines() if ln not in lines
    ]
    assert changed and all("PROPOSED" in ln for ln in changed), changed
    base, preset = _mapping(ROOT / "presets" / "h200-2x8-ib.yaml"), _mapping(PROPOSAL / f"{PRESET}.yaml")
    mpi_fields = {"description", "launchers", "mpi"}
    assert {k: v for k, v in preset.items() if k not in mpi_fields} == {
        k: v for k, v in base.items() if k not in mpi_fields
    }
    assert preset["launchers"] == ["torchrun", "mpi"]
    assert not (ROOT / "presets" / f"{PRESET}.yaml").exists()  # a proposal, not a shipped preset


def test_only_the_proposed_example_is_left_out_of_the_shipped_examples() -> None:
    assert [EXAMPLE.name] == PROPOSED_EXAMPLES
    assert sorted([*EXAMPLES, *PROPOSED_EXAMPLES]) == ALL_EXAMPLES
