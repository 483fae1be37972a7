"""Env names the profile does not own (red team, issue 12 follow-up, items 1, 2 and 5): what the
preset, runai-spec or the operator sets is reserved in `env` and `secret_env`, each finding
names the owner and points at the profile's own line; the transport list is one list that
`validate` and the admission policy both read."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from runai_spec.check.catalogue import RULES
from runai_spec.check.env import OPERATOR_ENV_NAMES, TRANSPORT_WHAT, env_owners, transport_variable
from runai_spec.facts.kubeflow import CONTAINER, OPERATOR_VERSIONS, WORKER, operator_env
from runai_spec.facts.torchrun import NCCL_DIAGNOSTICS, TRANSPORT_ENV_NAMES, TRANSPORT_ENV_PREFIXES
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.workload import prepare_workload


def findings(
    path: Path, rule: str, registry: PresetRegistry | None = None
) -> list[tuple[str, int | None, str]]:
    workload = prepare_workload(path, registry) if registry else prepare_workload(path)
    return [(f.path, f.line, f.message) for f in workload.findings if f.rule == rule]


def test_every_variable_the_rendered_container_gets_besides_the_profile_has_an_owner(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    """The multi-node render: each env entry that is not the profile's own is in env_owners,
    and so is every variable the operator appends to its pods (golden operator_env)."""
    workload = prepare_workload(write_profile(base_profile))
    owners = env_owners(workload.plan)
    (job,) = [m for m in workload.manifests if m.get("kind") == "PyTorchJob"]
    for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
        container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == CONTAINER)
        rendered = {e["name"] for e in container["env"]} - set(base_profile["env"])
        assert rendered <= set(owners), rendered - set(owners)
        for version in OPERATOR_VERSIONS:
            assert set(operator_env(job, role, 0, version)) <= set(owners)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in owners
    assert "PYTHONUNBUFFERED" in OPERATOR_ENV_NAMES


def test_the_operator_names_cover_every_modelled_release() -> None:
    elastic = {
        "metadata": {"name": "j"},
        "spec": {
            "nprocPerNode": "8",
            "elasticPolicy": {"rdzvId": "x", "maxRestarts": 3},
            "pytorchReplicaSpecs": {
                WORKER: {"replicas": 2, "template": {"spec": {"containers": [{"name": CONTAINER}]}}}
            },
        },
    }
    for version in OPERATOR_VERSIONS:
        assert set(operator_env(elastic, WORKER, 1, version)) <= OPERATOR_ENV_NAMES
    assert {"MASTER_ADDR", "PET_NNODES", "PET_RDZV_ENDPOINT", "PET_STANDALONE"} <= OPERATOR_ENV_NAMES


def test_a_preset_variable_that_is_no_transport_setting_is_reserved_naming_the_preset(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], presets_dir: Path, engineer_key: Path
) -> None:
    """A preset's network.env silently replaced the profile's value of the same name."""
    preset = presets_dir / "h200-2x8-ib.yaml"
    data = yaml.safe_load(preset.read_text())
    data["network"]["env"] = {"OMP_NUM_THREADS": "12"}
    preset.write_text(yaml.safe_dump(data, sort_keys=False))
    registry = PresetRegistry(presets_dir)
    registry.approve("h200-2x8-ib", engineer_key)
    base_profile["env"] = {"MY_FLAG": "1", "OMP_NUM_THREADS": "4"}
    base_profile["secret_env"] = {"OMP_NUM_THREADS": {"secret": "s", "key": "k"}}
    path = write_profile(base_profile)
    got = findings(path, "reserved-env", PresetRegistry(presets_dir))
    assert [(f, m.split(":")[0]) for f, _, m in got] == [
        (
            "env.OMP_NUM_THREADS",
            "OMP_NUM_THREADS is set by the preset (presets/h200-2x8-ib.yaml network.env.OMP_NUM_THREADS)",
        ),
        (
            "secret_env.OMP_NUM_THREADS",
            "OMP_NUM_THREADS is set by the preset (presets/h200-2x8-ib.yaml network.env.OMP_NUM_THREADS)",
        ),
    ]
    text = path.read_text().splitlines()
    assert [line for _, line, _ in got] == [
        own_line(text, "env", "OMP_NUM_THREADS"),
        own_line(text, "secret_env", "OMP_NUM_THREADS"),
    ]


def own_line(text: list[str], section: str, name: str) -> int:
    """The line (1-based) of NAME under the top-level SECTION of a profile's text."""
    start = text.index(f"{section}:")
    return next(i + 1 for i, line in enumerate(text) if i > start and line.strip().startswith(f"{name}:"))


@pytest.mark.parametrize("name", ["NCCL_IB_HCA", "PYTHONUNBUFFERED", "RANK", "NCCL_DEBUG"])
def test_a_secret_env_finding_names_secret_env_on_its_own_line(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], name: str
) -> None:
    base_profile["secret_env"] = {name: {"secret": "s", "key": "k"}}
    path = write_profile(base_profile)
    own = own_line(path.read_text().splitlines(), "secret_env", name)
    workload = prepare_workload(path)
    (finding,) = [f for f in workload.findings if f.path.endswith(f".{name}")]
    assert (finding.path, finding.line) == (f"secret_env.{name}", own)
    assert finding.lines()[0].startswith(f"error: {path}:{own}: secret_env.{name}: ")


@pytest.mark.parametrize(
    "name",
    [
        "LD_LIBRARY_PATH",
        "FI_PROVIDER",
        "FI_EFA_USE_DEVICE_RDMA",
        "SHARP_COLL_ENABLE_SAT",
        "MELLANOX_VISIBLE_DEVICES",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "TORCH_NCCL_ENABLE_MONITORING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "NCCL_IB_HCA",
        "UCX_TLS",
        "LD_PRELOAD",
    ],
)
def test_the_transport_variables_are_the_preset_s(name: str) -> None:
    assert transport_variable(name)


@pytest.mark.parametrize(
    "name", [*NCCL_DIAGNOSTICS, "MY_FLAG", "LD_BIND_NOW", "TORCH_HOME", "FIX", "SHARPNESS", "NCCL"]
)
def test_other_variables_are_not_transport_variables(name: str) -> None:
    assert not transport_variable(name)


def test_each_transport_family_says_what_it_configures_and_the_rule_lists_it() -> None:
    assert set(TRANSPORT_WHAT) == {*TRANSPORT_ENV_PREFIXES, *TRANSPORT_ENV_NAMES}
    doc = inspect.getdoc(RULES["nccl-transport-env"].check) or ""
    for item in (*TRANSPORT_ENV_NAMES, *(f"{p}*" for p in TRANSPORT_ENV_PREFIXES)):
        assert f"`{item}`" in doc, item


# Issue 23 (third red-team pass), item 12: the transport-adjacent families, and the device
# plugin's NVIDIA_VISIBLE_DEVICES, in the one list the admission policy reads too.
ISSUE_23_TRANSPORT = [
    "GLOO_DEVICE_TRANSPORT",
    "UCC_TLS",
    "UCC_CLS",
    "TORCH_UCC_BLOCKING_WAIT",
    "IBV_DRIVERS",
    "IBV_FORK_SAFE",
    "MLX5_SINGLE_THREADED",
    "RDMAV_FORK_SAFE",
    "HCOLL_ENABLE_MCAST_ALL",
    "OMPI_MCA_btl",
    "OMPI_MCA_pml",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_DISABLE_REQUIRE",
    "NVIDIA_REQUIRE_CUDA",
    "CUDA_MPS_PIPE_DIRECTORY",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    "NVIDIA_VISIBLE_DEVICES",
]


@pytest.mark.parametrize("name", ISSUE_23_TRANSPORT)
def test_transport_adjacent_variables_are_one_finding_naming_what_they_configure(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], name: str
) -> None:
    assert transport_variable(name)
    base_profile["env"] = {name: "x"}
    path = write_profile(base_profile)
    workload = prepare_workload(path)
    (finding,) = [f for f in workload.findings if f.path == f"env.{name}"]
    assert finding.rule == "nccl-transport-env" and finding.severity == "error"
    assert finding.message.startswith(f"{name} configures ")


@pytest.mark.parametrize(
    "name",
    [
        "WANDB_PROJECT",
        "HF_HOME",
        "TOKENIZERS_PARALLELISM",
        "OMP_NUM_THREADS",
        "NVIDIA_TF32_OVERRIDE",
        "CUDA_LAUNCH_BLOCKING",
        "UCCX",
        "MLX5",
        "PYTORCH_CUDA_ALLOC_CONF",
    ],
)
def test_ordinary_application_variables_stay_the_researcher_s(
    base_profile: dict[str, Any], write_profile: Callable[..., Path], name: str
) -> None:
    # a list of engineer-owned families, not an allow-list (launcher.py says why)
    assert not transport_variable(name)
    base_profile["env"] = {name: "1"}
    assert not [
        f
        for f in prepare_workload(write_profile(base_profile)).findings
        if f.path == f"env.{name}" and f.severity == "error"
    ]


def test_the_reserved_list_is_plain_prefixes_and_names() -> None:
    # admission.py renders it into CEL's startsWith and ==: no pattern may hide in it
    for item in (*TRANSPORT_ENV_PREFIXES, *TRANSPORT_ENV_NAMES):
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", item), item
