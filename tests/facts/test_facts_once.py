"""Each fact of another system in one place (issue 28): the place's value, and its readers agree."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest

from conftest import ROOT
from runai_spec.facts import runai
from runai_spec.facts.kubeflow import (
    MASTER,
    NAME_MAX,
    NPROC_FLAG,
    OPERATOR_VERSION,
    OPERATOR_VERSIONS,
    REPLICA_TYPES,
    WORKER,
    OperatorVersion,
    name_room,
    nproc_flags,
    pod_name,
    short_pod_name,
)
from runai_spec.facts.operator import JobModel
from runai_spec.facts.torchrun import (
    MAX_RESTARTS_FLAG,
    RDZV_ID_FLAG,
    SINGLE_GPU_LAUNCHER,
    flag,
    flag_value,
    python_head,
    set_nproc,
    split_command,
    split_flag,
    without_launcher,
)
from runai_spec.load.site import LabelKeys, Site
from runai_spec.load.yaml import load_documents
from runai_spec.pipeline.checklist import GUIDE_CHECKLIST, GUIDE_CHECKS, PREFLIGHT_ONLY_CHECKS
from runai_spec.plan.launcher import RendezvousPlan, launcher_for
from runai_spec.plan.plan import Plan

SRC = ROOT / "src" / "runai_spec"


# -- the operator versions --------------------------------------------------------------------


def test_the_default_operator_version_is_one_of_the_modelled_versions() -> None:
    assert OPERATOR_VERSION in OPERATOR_VERSIONS
    assert OPERATOR_VERSIONS == get_args(OperatorVersion) == ("1.7", "1.8", "1.9")


def test_every_reader_of_the_operator_version_defaults_to_the_one_table() -> None:
    site = Site(cluster="c", registries=["r"])
    assert site.operator_version == OPERATOR_VERSION
    assert Site.model_json_schema()["properties"]["operator_version"]["enum"] == list(OPERATOR_VERSIONS)
    assert Plan._field_defaults["operator_version"] == OPERATOR_VERSION
    assert JobModel.__dataclass_fields__["version"].default == OPERATOR_VERSION


# -- pod names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replica_type", "index", "short"),
    [(MASTER, 0, "master-0"), (WORKER, 0, "worker-0"), (WORKER, 7, "worker-7")],
)
def test_the_short_pod_name_of_each_replica_kind(replica_type: str, index: int, short: str) -> None:
    assert short_pod_name(replica_type, index) == short
    assert pod_name("llm", replica_type, index) == f"llm-{short}"


def test_the_restart_model_names_pods_by_their_short_names() -> None:
    job: dict[str, Any] = {
        "spec": {"pytorchReplicaSpecs": {MASTER: {"replicas": 1}, WORKER: {"replicas": 2}}}
    }
    assert list(JobModel.of(job).pods) == [
        short_pod_name(MASTER, 0),
        short_pod_name(WORKER, 0),
        short_pod_name(WORKER, 1),
    ]
    assert REPLICA_TYPES == (MASTER, WORKER)


# -- shorten the name to N ---------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "-smoke"])
def test_the_name_room_is_the_longest_name_whose_pods_stay_dns_labels(suffix: str) -> None:
    def longest(name: str) -> str:
        return pod_name(f"{name}{suffix}", WORKER, 15)

    room = name_room("x", longest("x"))
    assert room == NAME_MAX - len(f"{suffix}-worker-15")
    assert len(longest("a" * room)) == NAME_MAX
    assert len(longest("a" * (room + 1))) == NAME_MAX + 1
    assert name_room("a" * 40, longest("a" * 40)) == room  # whatever the name is now


# -- the single-GPU launcher -------------------------------------------------------------------


def test_the_single_gpu_launcher_is_unbuffered_python_wherever_it_is_built() -> None:
    assert SINGLE_GPU_LAUNCHER == ("python", "-u")
    assert launcher_for("single-gpu", 1) == SINGLE_GPU_LAUNCHER
    # a wrapper script ran with no launcher: preflight.py then runs under the same one
    assert python_head(["train.sh", "--lr", "1"]) == SINGLE_GPU_LAUNCHER


# -- torchrun's flag grammar -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (NPROC_FLAG, 8),
        (RDZV_ID_FLAG, "llm"),
        (MAX_RESTARTS_FLAG, 3),
        ("--rdzv-conf", "join_timeout=600,read_timeout=60"),
        ("--rdzv-endpoint", "$(MASTER_ADDR):23456"),
    ],
)
def test_a_built_flag_splits_and_reads_back(name: str, value: object) -> None:
    built = flag(name, value)
    assert built == f"{name}={value}"
    assert split_flag(built) == (name, str(value))
    assert flag_value(["torchrun", built, "train.py"], name) == str(value)
    assert split_flag("--standalone") == ("--standalone", None)


RENDEZVOUS = RendezvousPlan("c10d", "$(MASTER_ADDR):$(MASTER_PORT)", "llm", 3, 600, 60, None)


@pytest.mark.parametrize(
    "launcher",
    [
        launcher_for("single-gpu", 1),
        launcher_for("single-node", 8),
        launcher_for("multi-node", 8, rendezvous=RENDEZVOUS),
        launcher_for("multi-node", 8, elastic=True),
    ],
    ids=["single-gpu", "single-node", "multi-node", "elastic"],
)
def test_every_rendered_launcher_splits_back_from_its_entry_point(launcher: tuple[str, ...]) -> None:
    entry = ("train.py", "--lr", "3e-4", "--nproc-per-node=2")  # the script's own flags stay
    split = split_command([*launcher, *entry])
    assert (split.head, split.entry) == (launcher, entry)
    assert without_launcher([*launcher, *entry]) == list(entry)


def test_the_process_count_is_rewritten_and_read_in_every_spelling() -> None:
    head = ("torchrun", flag(NPROC_FLAG, 8), "--nproc_per_node", "8", "--standalone")
    assert set_nproc(head, 2) == ("torchrun", flag(NPROC_FLAG, 2), "--nproc_per_node", "2", "--standalone")
    assert nproc_flags(launcher_for("single-node", 4)) == ["4"]
    assert nproc_flags(["torchrun", "--nproc_per_node=4", NPROC_FLAG, "4"]) == []  # rendered: `=`


# -- the scheduler's label keys ----------------------------------------------------------------


def test_the_label_key_defaults_are_run_ai_s_in_one_place() -> None:
    site = Site(cluster="c", registries=["r"])
    keys = LabelKeys()
    assert (
        (site.queue_label, site.priority_label, site.preemptibility_label, site.node_pool_label)
        == (keys.queue, keys.priority, keys.preemptibility, keys.node_pool)
        == (runai.QUEUE_LABEL, runai.PRIORITY_LABEL, runai.PREEMPTIBILITY_LABEL, runai.NODE_POOL_LABEL)
    )
    shipped = load_documents(ROOT / "presets" / "site.yaml")[0]
    assert shipped["queue_label"] == runai.QUEUE_LABEL
    assert shipped["preemptibility_label"] == runai.PREEMPTIBILITY_LABEL


# -- the guide's checklist ---------------------------------------------------------------------


def test_the_guide_s_checklist_is_one_ordered_list_of_checks_preflight_reports() -> None:
    from runai_spec.outputs.review import CHECKLIST

    assert tuple(item.text for item in GUIDE_CHECKLIST) == CHECKLIST
    assert GUIDE_CHECKS == (
        "ranks",
        "world-size",
        "device",
        "global-batch",
        "checkpoint",
        "resume",
        "metrics",
        "shutdown",
    )
    reported = set(
        re.findall(r'rep\.(?:passed|failed|skipped)\("([a-z-]+)"', (SRC / "preflight.py").read_text())
    )
    assert reported == set(GUIDE_CHECKS) | set(PREFLIGHT_ONLY_CHECKS)
    assert len(set(GUIDE_CHECKS)) == len(GUIDE_CHECKS)


def test_preflight_replaces_a_module_entry_point_under_torchrun() -> None:
    # torchrun's -m would take preflight.py for a module's name: `No module named preflight.py`
    flags = ["--nproc-per-node=8", "--rdzv-backend=c10d"]
    assert python_head(["torchrun", *flags, "-m", "mypkg.train", "--lr", "1"]) == ("torchrun", *flags)
    assert python_head(["python", "-m", "torch.distributed.run", *flags, "--module", "mypkg.train"]) == (
        "python",
        "-m",
        "torch.distributed.run",
        *flags,
    )
    assert python_head(["torchrun", *flags, "--no-python", "./run.sh"]) == ("torchrun", *flags)
    assert python_head(["python", "-u", "-m", "mypkg.train"]) == ("python", "-u")
