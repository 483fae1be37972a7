"""The gate of an MPIJob (issue 39 item 4): the policy derived from a preset's MPI renders admits
the rendered MPIJob, whatever number of variables its profile forwards with mpirun's `-x`, and
denies each tamper of the MPIJob's own fields (slots, replicas, mpirun's flags, OpenMPI's MCA
variables, the SSH mount path, the workers' daemon) naming the field; the policy matches
mpi-operator's v2beta1 MPIJobs, and the workload guard leaves them to it."""

from __future__ import annotations

import copy
import datetime as dt
import shutil
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, make_key
from mpi_presets import PRESET, mpi_presets, mpi_profile
from outputs.admission.admission_policy import PROJECTS, Job, Policy
from runai_spec.facts import mpi
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission
from runai_spec.outputs.admission.fields import crd_fields, shipped_fields
from runai_spec.pipeline.smoke import smoke_workload
from runai_spec.pipeline.workload import prepare_workload

pytest.importorskip("cel_expr_python.cel")

TODAY = dt.date(2027, 1, 1)
CRD = ROOT.parent / "shared" / "schemas" / "kubeflow.org_mpijobs.yaml"
LAUNCHER, WORKER = mpi.LAUNCHER, mpi.WORKER


def _scratch(prefix: str) -> Path:
    """A folder of the process's cached registry and job, removed when the process ends."""
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder


@lru_cache(maxsize=1)
def _registry() -> PresetRegistry:
    """presets/ with the MPI preset alone approved beside the site (the shipped presets' four
    families are the other suites'; with them the policy is over the size `presets policy`
    allows: docs/admission.md)."""

    folder = _scratch("runai-spec-mpi-gate-")
    shutil.copytree(ROOT / "presets", folder / "presets")
    presets = mpi_presets(folder / "presets", make_key(folder, "engineer"))
    for other in presets.glob("h200-*.yaml"):
        if other.stem != PRESET:
            other.unlink()
    return PresetRegistry(presets, today=TODAY)


@lru_cache(maxsize=1)
def _documents() -> list[dict[str, Any]]:
    return admission.policy_documents(_registry())


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(copy.deepcopy(_documents()), PROJECTS)


def render(tmp: Path, **fields: Any) -> Job:
    """The MPI profile's MPIJob (FIELDS over the profile), rendered with no finding."""
    tmp.mkdir(parents=True, exist_ok=True)
    workload = prepare_workload(mpi_profile(tmp, **fields), _registry())
    assert [f.rule for f in workload.errors] == []
    (job,) = [m for m in workload.manifests if m.get("kind") == mpi.KIND]
    return copy.deepcopy(dict(job))


@lru_cache(maxsize=1)
def _job() -> str:

    return yaml.safe_dump(render(_scratch("runai-spec-mpi-job-")))


def job() -> Job:
    loaded: Job = yaml.safe_load(_job())
    return loaded


def pod(j: Job, role: str) -> dict[str, Any]:
    spec: dict[str, Any] = j["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
    return spec


def launcher(j: Job) -> dict[str, Any]:
    container: dict[str, Any] = pod(j, LAUNCHER)["containers"][0]
    return container


def _forwarded(j: Job) -> int:
    """The index of the first `-x` of the launcher's mpirun line."""
    return int(launcher(j)["command"].index("-x"))


def test_the_rendered_mpijob_is_admitted(policy: Policy) -> None:
    j = job()
    assert j["apiVersion"] == mpi.API_VERSION and launcher(j)["command"][0] == mpi.PROGRAM
    assert policy.denials(j) == {}


def smoke(tmp: Path, **fields: Any) -> Job:
    """The MPI profile's smoke MPIJob (FIELDS over the profile)."""
    tmp.mkdir(parents=True, exist_ok=True)
    workload = prepare_workload(mpi_profile(tmp, **fields), _registry())
    (found,) = [m for m in smoke_workload(workload) if m.get("kind") == mpi.KIND]
    return copy.deepcopy(dict(found))


@pytest.mark.parametrize(
    "env", [{}, pytest.param({"HF_HOME": "/data/hf", "OMP_NUM_THREADS": "4"}, marks=pytest.mark.long)]
)
def test_the_smoke_mpijob_is_admitted_and_its_mpirun_line_judged(
    policy: Policy, tmp_path: Path, env: dict[str, str]
) -> None:
    """The smoke test's launcher runs the job's own mpirun line (the preset's flags, the -x run)
    with preflight.py: admitted whatever its profile forwards; a flag added is denied."""
    j = smoke(tmp_path, env=env)
    assert j["metadata"]["labels"]["runai-spec/smoke"] == "true"
    assert launcher(j)["command"][-1] != launcher(job())["command"][-1]
    assert policy.denials(j) == {}
    _insert(lambda j: 3, "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0")(j)
    assert policy.denials(j) == {"shape": f"{WHERE}[4]: must be 'pml' (preset {PRESET}; and more)"}


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"env": {}}, id="no-variable"),
        pytest.param(
            {
                "env": {"HF_HOME": "/data/hf", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "4"},
                "secret_env": {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}},
            },
            id="four-variables",
        ),
        pytest.param({"command": ["./run.sh", "--epochs", "3"]}, id="wrapper-script", marks=pytest.mark.long),
    ],
)
def test_a_render_forwarding_any_number_of_variables_is_admitted(
    policy: Policy, tmp_path: Path, fields: dict[str, Any]
) -> None:
    j = render(tmp_path, **fields)
    names = launcher(j)["command"][_forwarded(j) + 1 :: 2]
    for name in (*fields.get("env", {}), *fields.get("secret_env", {})):
        assert name in names
    assert policy.denials(j) == {}


def _insert(at: Callable[[Job], int], *items: str) -> Callable[[Job], None]:
    def change(j: Job) -> None:
        command = launcher(j)["command"]
        command[at(j) : at(j)] = list(items)

    return change


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Job], None]:
    def change(j: Job) -> None:
        node = j
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def _add_env(name: str, value: str, forward: bool) -> Callable[[Job], None]:
    def change(j: Job) -> None:
        launcher(j)["env"].append({"name": name, "value": value})
        if forward:
            _insert(_forwarded, "-x", name)(j)

    return change


WHERE = f"spec.mpiReplicaSpecs.{LAUNCHER}.template.spec.containers[pytorch].command"
ENV = f"spec.mpiReplicaSpecs.{LAUNCHER}.template.spec.containers[pytorch].env"
# tamper: (change, the start of the denial)
TAMPERS: dict[str, tuple[Callable[[Job], None], str]] = {
    "slots": (_set(("spec", "slotsPerWorker"), 16), "spec.slotsPerWorker: must be '8'"),
    "worker-replicas": (
        _set(("spec", "mpiReplicaSpecs", WORKER, "replicas"), 4),
        f"spec.mpiReplicaSpecs.{WORKER}.replicas: must be '1'",
    ),
    "launcher-replicas": (
        _set(("spec", "mpiReplicaSpecs", LAUNCHER, "replicas"), 2),
        f"spec.mpiReplicaSpecs.{LAUNCHER}.replicas: must be '1'",
    ),
    "ssh-auth-mount-path": (
        _set(("spec", "sshAuthMountPath"), "/root/.ssh"),
        "spec.sshAuthMountPath: must be '/home/mpiuser/.ssh'",
    ),
    "implementation": (_set(("spec", "mpiImplementation"), "Intel"), "spec.mpiImplementation: must be"),
    "launcher-not-a-worker": (_set(("spec", "runLauncherAsWorker"), False), "spec.runLauncherAsWorker:"),
    "mpirun-np": (lambda j: launcher(j)["command"].__setitem__(2, "64"), f"{WHERE}[2]: must be '16'"),
    "mpirun-flag-added": (
        _insert(lambda j: 3, "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"),
        f"{WHERE}[4]: must be 'pml'",
    ),
    "mpirun-flag-changed": (
        lambda j: launcher(j)["command"].__setitem__(8, "tcp,self"),
        f"{WHERE}[8]: must be '^openib'",
    ),
    "mpirun-flag-before-the-forwarded": (
        _insert(_forwarded, "--oversubscribe"),
        f"{WHERE}: must be the preset's launcher",
    ),
    "mpirun-flag-as-argument": (
        lambda j: launcher(j)["command"].append("--mca"),
        f"{WHERE}[",
    ),
    "ompi-mca-forwarded": (_add_env("OMPI_MCA_btl_tcp_if_include", "eth0", True), f"{ENV}: OMPI_MCA_btl_tcp"),
    "ompi-mca-env": (_add_env("OMPI_MCA_pml", "ucx", False), f"{ENV}: OMPI_MCA_pml: not an entry"),
    "forward-set-a-value": (_insert(_forwarded, "-x", "UCX_TLS=tcp"), f"{WHERE}["),
    "forward-an-unlisted-variable": (
        _insert(_forwarded, "-x", "HOME"),
        f"{WHERE}[12]: must name one of the container's variables",
    ),
    "forward-dropped": (
        lambda j: launcher(j)["command"].__delitem__(slice(11, 13)),
        f"{WHERE}: must forward",
    ),
    "worker-command": (
        lambda j: pod(j, WORKER)["containers"][0].__setitem__("command", ["bash", "-c", "sleep infinity"]),
        f"spec.mpiReplicaSpecs.{WORKER}.template.spec.containers[pytorch].command",
    ),
    "worker-runs-mpirun": (
        lambda j: pod(j, WORKER)["containers"][0].__setitem__("command", launcher(j)["command"]),
        f"spec.mpiReplicaSpecs.{WORKER}.template.spec.containers[pytorch].command",
    ),
    "pod-namespace": (
        _set(("spec", "mpiReplicaSpecs", WORKER, "template", "metadata", "namespace"), "kube-system"),
        f"spec.mpiReplicaSpecs.{WORKER}.template.metadata.namespace:",
    ),
    "smoke-label": (
        lambda j: j["metadata"]["labels"].__setitem__("runai-spec/smoke", "true"),
        "metadata.name: must be the value of metadata.labels.app.kubernetes.io/name before '-smoke'",
    ),
}
CI = ("slots", "worker-replicas", "mpirun-flag-added", "ompi-mca-forwarded", "ssh-auth-mount-path")


@pytest.mark.parametrize("kind", [k if k in CI else pytest.param(k, marks=pytest.mark.long) for k in TAMPERS])
def test_each_tamper_is_denied_naming_the_field(policy: Policy, kind: str) -> None:
    change, start = TAMPERS[kind]
    j = job()
    change(j)
    assert j != job(), kind
    denied = policy.denials(j)
    assert list(denied) == ["shape"], (kind, denied)
    assert denied["shape"].startswith(start), (kind, denied["shape"])
    assert f"(preset {PRESET}" in denied["shape"]


@pytest.mark.long
def test_the_second_implementation_admits_and_denies_alike(policy: Policy) -> None:
    """cel-python (pure Python, seconds a job) on the admitted job and a tamper of the run."""
    assert policy.denials(job(), python=True) == {}
    j = job()
    TAMPERS["ompi-mca-forwarded"][0](j)
    assert list(policy.denials(j, python=True)) == ["shape"]


def test_the_policy_matches_mpi_operator_s_mpijobs_and_the_scale_policy_what_is_served() -> None:
    """pytorchjobs and mpijobs (v2beta1) in the project namespaces; the scale policy matches a
    kind's scale subresource only where its CRD serves one (mpi-operator v0.6.0's: none)."""
    docs = _documents()
    rules = docs[0]["spec"]["matchConstraints"]["resourceRules"]
    assert [(r["apiVersions"], r["resources"]) for r in rules] == [
        (["v1"], ["pytorchjobs"]),
        (["v2beta1"], ["mpijobs"]),
    ]
    crd = _crd()
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == mpi.API_VERSION.split("/")[1]]
    assert ("scale" in served.get("subresources", {})) is mpi.SCALE_SUBRESOURCE
    scale = docs[2]["spec"]["matchConstraints"]["resourceRules"]
    assert [r["resources"] for r in scale] == [["pytorchjobs/scale"]]


def test_the_shipped_mpijob_field_list_is_mpi_operator_s_crd() -> None:
    crd = _crd()
    fields = shipped_fields((mpi.API_VERSION, mpi.KIND))
    assert crd_fields(crd, mpi.API_VERSION.split("/")[1]) == fields
    assert "sshAuthMountPath" in fields["spec"] and "mpiReplicaSpecs" in fields["spec"]


@lru_cache(maxsize=1)
def _crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.load(
        CRD.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return crd


def test_the_roles_pod_templates_are_written_once_their_commands_each() -> None:
    """The Launcher's and Workers' pod templates are alike but for their container's command:
    the template's checks are written once and run for each role (a message names the role
    from the loop), each role's command is checked on its own."""
    policy = str(_documents()[0])
    container = "template.spec.containers[pytorch]"
    for role in (LAUNCHER, WORKER):
        assert f"spec.mpiReplicaSpecs.{role}.{container}.command" in policy
        assert f"spec.mpiReplicaSpecs.{role}.{container}.image" not in policy


@pytest.mark.long
def test_a_preset_s_own_variables_are_forwarded_after_the_run(tmp_path: Path) -> None:
    """A preset with network.env forwards its variables (pinned `-x NCCL_...`) after the
    profile's run: the run's length is found where they follow, with any number of the
    profile's variables, in the job and its smoke test."""
    shutil.copytree(ROOT / "presets", tmp_path / "presets")
    network = yaml.safe_load((ROOT / "presets" / "h200-2x8-ib.yaml").read_text(encoding="utf-8"))["network"]
    network["env"] = {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0"}
    presets = mpi_presets(tmp_path / "presets", make_key(tmp_path, "engineer"), network=network)
    for other in presets.glob("h200-*.yaml"):
        if other.stem != PRESET:
            other.unlink()
    registry = PresetRegistry(presets, today=TODAY)
    policy = Policy(admission.policy_documents(registry), PROJECTS)
    for env in ({}, {"HF_HOME": "/data/hf", "OMP_NUM_THREADS": "4"}):
        workload = prepare_workload(mpi_profile(tmp_path, env=env), registry)
        assert [f.rule for f in workload.errors] == []
        (j,) = [dict(m) for m in workload.manifests if m.get("kind") == mpi.KIND]
        (s,) = [dict(m) for m in smoke_workload(workload) if m.get("kind") == mpi.KIND]
        command = launcher(j)["command"]
        assert command[command.index("NCCL_IB_HCA") - 2 - 2 * len(env)] == "none"  # the run first
        assert policy.denials(copy.deepcopy(j)) == {} and policy.denials(copy.deepcopy(s)) == {}
        tampered = copy.deepcopy(j)
        launcher(tampered)["command"][command.index("NCCL_IB_HCA")] = "NCCL_IB_GID_INDEX"
        assert list(policy.denials(tampered)) == ["shape"]


@pytest.mark.long
def test_the_costliest_mpijob_validate_accepts_costs_a_tenth_of_each_limit() -> None:
    """Issue 41 item 8 for the MPIJob family: the MPI example's profile at validate's bounds
    (the mpirun line reads the arguments by the launcher role's variables), estimated as
    benchmarks/bench_policy_cost.py does."""
    import importlib
    import sys

    from mpi_presets import PROFILE
    from runai_spec.outputs.admission.rules import HEADROOM, PER_CALL_LIMIT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    bench = importlib.import_module("bench_policy_cost")
    name, job = bench.heavy(PROFILE, _registry(), mpi.KIND)
    costs: dict[str, int] = bench.Costs(_documents()[0], _documents()[-1]).of(job, PROJECTS)
    top = max(costs, key=lambda k: costs[k])
    assert costs[top] * HEADROOM <= PER_CALL_LIMIT, (name, top, costs[top])
    assert sum(costs.values()) * HEADROOM <= bench.BUDGET, (name, sum(costs.values()))
