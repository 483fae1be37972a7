"""The generated admission policy, evaluated with a real CEL implementation (cel-expr-python,
the Python binding of cel-cpp) against every example and smoke render and tampered ones."""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cel_eval import Evaluator
from conftest import EXAMPLES, ROOT, example_job
from runai_spec import admission
from runai_spec.manifests import parse
from runai_spec.presets import PresetRegistry

pytest.importorskip("cel_expr_python.cel")

TODAY = dt.date(2027, 1, 1)
Job = dict[str, Any]


class Policy:
    """The generated policy and its parameters as the API server evaluates them (cel_eval),
    for a namespace -> project map (the namespaces' queue label)."""

    def __init__(self, documents: list[dict[str, Any]], namespaces: dict[str, str]) -> None:
        policy, binding, params = documents
        assert binding["spec"]["paramRef"]["name"] == params["metadata"]["name"]
        self.evaluator = Evaluator(policy["spec"])
        self.params = params
        self.namespaces = namespaces

    def denials(self, job: Job, *, old: Job | None = None) -> dict[str, str]:
        """{validation name: message} of every failing validation; {} = admitted."""
        namespace = job["metadata"]["namespace"]
        labels = {"runai/queue": self.namespaces[namespace]} if namespace in self.namespaces else {}
        failures = self.evaluator.failures(job, params=self.params, namespace_labels=labels, old=old)
        out: dict[str, str] = {}
        for failure in failures or []:
            assert not failure.error, failure  # an evaluation error would be a bug of ours
            assert failure.expressed, failure  # every messageExpression gives one line
            assert failure.reason == "Forbidden", failure
            out[admission.validations(SITE)[failure.index].name] = failure.message
        return out


REGISTRY = PresetRegistry(ROOT / "presets", today=TODAY)
SITE = REGISTRY.site()
PROJECTS = {"runai-nlp-lab": "nlp-lab", "runai-vision-lab": "vision-lab"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(admission.policy_documents(REGISTRY), PROJECTS)


def smoke_jobs() -> list[Job]:
    profiles = [str(ROOT / "examples" / e / "profile.yaml") for e in EXAMPLES]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "runai_spec", "render", "--smoke", *profiles],
                          capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return [m for m in parse(done.stdout, "smoke") if m["kind"] == "PyTorchJob"]


def pods(job: Job) -> list[dict[str, Any]]:
    return [r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()]


def container(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["spec"]["containers"][0]
    return found


# -- admitted ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_render_is_admitted(policy: Policy, name: str) -> None:
    assert policy.denials(example_job(name)) == {}


def test_every_smoke_render_is_admitted(policy: Policy) -> None:
    jobs = smoke_jobs()
    assert len(jobs) == len(EXAMPLES)
    for job in jobs:
        assert job["metadata"]["labels"][admission.SMOKE_LABEL] == "true"
        assert policy.denials(job) == {}, job["metadata"]["name"]


def test_a_job_whose_quantities_are_strings_is_admitted(policy: Policy) -> None:
    job = example_job("multi-node")
    for template in pods(job):
        resources = container(template)["resources"]
        for part in ("requests", "limits"):
            resources[part] = {k: str(v) for k, v in resources[part].items()}
    assert policy.denials(job) == {}


# -- denied ------------------------------------------------------------------------------
def _more_gpu(job: Job) -> None:
    for template in pods(job):
        container(template)["resources"]["limits"]["nvidia.com/gpu"] += 1


def _more_worker(job: Job) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] += 1


def _priority(job: Job) -> None:
    job["metadata"]["labels"]["priorityClassName"] = "system-cluster-critical"
    for template in pods(job):
        template["metadata"]["labels"]["priorityClassName"] = "system-cluster-critical"


def _pod_priority(job: Job) -> None:
    for template in pods(job):
        template["spec"]["priorityClassName"] = "system-cluster-critical"


def _template_priority(job: Job) -> None:
    pods(job)[-1]["metadata"]["labels"]["priorityClassName"] = "very-high"


def _network_removed(job: Job) -> None:
    for template in pods(job):
        template["metadata"].pop("annotations")


def _network_added(job: Job) -> None:
    for template in pods(job):
        template["metadata"]["annotations"] = {"k8s.v1.cni.cncf.io/networks": "runai-ib/ib-sriov-rail1"}


def _host_network(job: Job) -> None:
    pods(job)[0]["spec"]["hostNetwork"] = True


def _socket_ifname(job: Job) -> None:
    container(pods(job)[-1]).setdefault("env", []).append({"name": "NCCL_SOCKET_IFNAME", "value": "eth0"})


def _sha(job: Job) -> None:
    job["metadata"]["annotations"]["runai-spec/preset-sha256"] = "0" * 64


def _unknown(job: Job) -> None:
    job["metadata"]["annotations"]["runai-spec/preset"] = "h200-64gpu"


def _no_preset(job: Job) -> None:
    del job["metadata"]["annotations"]["runai-spec/preset"]


def _privileged(job: Job) -> None:
    container(pods(job)[0])["securityContext"]["privileged"] = True


def _host_path(job: Job) -> None:
    pods(job)[0]["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})


def _sys_admin(job: Job) -> None:
    container(pods(job)[0])["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")


def _ld_preload(job: Job) -> None:
    container(pods(job)[0])["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x.so"})


def _ld_library_path(job: Job) -> None:
    container(pods(job)[0])["env"].append({"name": "LD_LIBRARY_PATH", "value": "/opt/nccl/lib"})


def _torch_nccl(job: Job) -> None:
    container(pods(job)[0])["env"].append({"name": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
                                           "value": "6000"})


def _preemptible(job: Job) -> None:
    job["metadata"]["labels"]["kai.scheduler/preemptibility"] = "preemptible"


def _node_pool(job: Job) -> None:
    job["metadata"]["labels"]["runai/node-pool"] = "h200"


def _shm(job: Job) -> None:
    pods(job)[0]["spec"]["volumes"][-1]["emptyDir"]["sizeLimit"] = "1Ti"


def _cpu(job: Job) -> None:
    container(pods(job)[0])["resources"]["requests"]["cpu"] = "128"


def _extra_resource(job: Job) -> None:
    container(pods(job)[0])["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = 1


def _restart(job: Job) -> None:
    job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Always"


def _backoff(job: Job) -> None:
    job["spec"]["runPolicy"]["backoffLimit"] = 100


def _scheduling_policy(job: Job) -> None:
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "system-cluster-critical"}


def _sidecar(job: Job) -> None:
    pods(job)[0]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})


def _queue(job: Job) -> None:
    job["metadata"]["labels"]["runai/queue"] = "vision-lab"


def _scheduler(job: Job) -> None:
    pods(job)[0]["spec"]["schedulerName"] = "default-scheduler"


def _node_name(job: Job) -> None:
    pods(job)[0]["spec"]["nodeName"] = "h200-node-7"


def _env_from(job: Job) -> None:
    container(pods(job)[0])["envFrom"] = [{"configMapRef": {"name": "mine"}}]


def _nproc(job: Job) -> None:
    job["spec"]["nprocPerNode"] = "16"


MASTER = "spec.pytorchReplicaSpecs.Master.template."
ROLE = re.compile(r"pytorchReplicaSpecs\.(Master|Worker)\.")
TAMPER_EVERY_ROLE = {_more_gpu, _pod_priority, _network_removed, _network_added}

TAMPERED: list[tuple[str, Callable[[Job], None], str, str, str]] = [
    # (example, change, validation, message starts with, message contains)
    ("multi-node", _more_gpu, "resources",
     MASTER + "spec.containers.resources: ", "nvidia.com/gpu=8"),
    ("multi-node", _more_worker, "replicas", "spec.pytorchReplicaSpecs: ", "Worker=1"),
    ("multi-node", _priority, "priority",
     "metadata.labels.priorityClassName: must be high", "h200-2x8-ib"),
    ("multi-node", _pod_priority, "priority",
     MASTER + "spec.priorityClassName: must be unset", "h200-2x8-ib"),
    ("multi-node", _template_priority, "priority",
     "spec.pytorchReplicaSpecs.Worker.template.metadata.labels.priorityClassName: must be high", ""),
    ("multi-node", _network_removed, "network",
     MASTER + "metadata.annotations: the network attachment must be "
     "k8s.v1.cni.cncf.io/networks=runai-ib/ib-sriov-rail1,", "h200-2x8-ib"),
    ("single-node", _network_added, "network",
     MASTER + "metadata.annotations: the network attachment must be unset",
     "h200-8gpu"),
    ("multi-node", _host_network, "hostNetwork",
     MASTER + "spec.hostNetwork: must not be true", ""),
    ("multi-node", _socket_ifname, "reserved-env",
     "spec.pytorchReplicaSpecs.Worker.template.spec.containers.env: NCCL_SOCKET_IFNAME reserved", ""),
    ("multi-node", _sha, "preset-sha256",
     "metadata.annotations.runai-spec/preset-sha256: not the approved sha256 of preset h200-2x8-ib", ""),
    ("multi-node", _unknown, "preset-approved",
     "metadata.annotations.runai-spec/preset: h200-64gpu is not an approved preset", ""),
    ("multi-node", _no_preset, "preset-annotation", "metadata.annotations.runai-spec/preset: missing", ""),
    ("multi-node", _privileged, "privileged",
     MASTER + "spec.containers.securityContext.privileged", ""),
    ("multi-node", _host_path, "host-path", MASTER + "spec.volumes", ""),
    ("multi-node", _sys_admin, "capabilities",
     MASTER + "spec.containers.securityContext.capabilities.add: "
     "must be IPC_LOCK", ""),
    ("multi-node", _ld_preload, "reserved-env", "spec.pytorchReplicaSpecs.Master", "LD_PRELOAD"),
    ("multi-node", _ld_library_path, "reserved-env", "spec.pytorchReplicaSpecs.Master",
     "LD_LIBRARY_PATH"),
    ("single-node", _torch_nccl, "reserved-env", "spec.pytorchReplicaSpecs.Master",
     "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"),
    ("multi-node", _preemptible, "preemptibility",
     "metadata.labels.kai.scheduler/preemptibility: must be non-preemptible", ""),
    ("multi-node", _node_pool, "node-pool", "metadata.labels.runai/node-pool: must be h200-ib", ""),
    ("multi-node", _shm, "shared-memory", MASTER + "spec.volumes", "256Gi"),
    ("multi-node", _cpu, "resources", "spec.pytorchReplicaSpecs.Master", "cpu=96"),
    ("multi-node", _extra_resource, "resources", "spec.pytorchReplicaSpecs.Master", ""),
    ("multi-node", _restart, "restart-policy",
     "spec.pytorchReplicaSpecs.Master.restartPolicy: must be OnFailure", ""),
    ("multi-node", _backoff, "run-policy", "spec.runPolicy: ", "backoffLimit=5"),
    ("multi-node", _scheduling_policy, "run-policy", "spec.runPolicy: ", ""),
    ("multi-node", _sidecar, "containers",
     MASTER + "spec.containers: exactly one container", ""),
    ("multi-node", _queue, "queue", "metadata.labels.runai/queue: must be nlp-lab", ""),
    ("multi-node", _scheduler, "scheduler", MASTER + "spec.schedulerName", ""),
    ("multi-node", _node_name, "node-name", MASTER + "spec.nodeName", ""),
    ("multi-node", _env_from, "env-from", MASTER + "spec.containers.envFrom", ""),
    ("single-node", _nproc, "nproc-per-node", "spec.nprocPerNode: must be 8 (preset h200-8gpu)", ""),
    ("elastic", _more_worker, "replicas", "spec.pytorchReplicaSpecs: Worker=5", "Worker=4"),
]


@pytest.mark.parametrize(("name", "change", "rule", "starts", "contains"), TAMPERED,
                         ids=[f"{t[0]}-{t[1].__name__.strip('_')}" for t in TAMPERED])
def test_each_tampered_render_is_denied_naming_the_field(
        policy: Policy, name: str, change: Callable[[Job], None], rule: str, starts: str,
        contains: str) -> None:
    job = example_job(name)
    change(job)
    denied = policy.denials(job)
    assert list(denied) == [rule], denied
    message = denied[rule]
    if change in TAMPER_EVERY_ROLE:  # the API server's maps have no order: either role is named
        message = ROLE.sub("pytorchReplicaSpecs.Master.", message)
    assert message.startswith(starts), message
    assert contains in message


def test_the_preset_s_own_reserved_value_is_allowed() -> None:
    """A reserved variable is the preset's to set: exactly its value passes, another fails."""
    docs = admission.policy_documents(REGISTRY)
    docs[2]["data"]["h200-2x8-ib.env"] = "NCCL_IB_HCA=mlx5"
    policy = Policy(docs, PROJECTS)
    job = example_job("multi-node")
    for template in pods(job):
        container(template)["env"].append({"name": "NCCL_IB_HCA", "value": "mlx5"})
    assert policy.denials(job) == {}
    container(pods(job)[0])["env"][-1]["value"] = "mlx5_0"
    assert list(policy.denials(job)) == ["reserved-env"]
    container(pods(job)[0])["env"][-1] = {"name": "NCCL_DEBUG", "value": "WARN"}
    assert policy.denials(job) == {}


@pytest.mark.parametrize("name", [
    "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_NCCL_BLOCKING_WAIT",
    "UCX_TLS", "NVSHMEM_REMOTE_TRANSPORT", "FI_PROVIDER", "SHARP_COLL_ENABLE_SAT",
    "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "MELLANOX_VISIBLE_DEVICES", "LD_PRELOAD",
    "LD_LIBRARY_PATH", "LD_BIND_NOW", "MY_FLAG", "TORCH_HOME", "FIX", "SHARPNESS"])
def test_admission_reserves_exactly_what_validate_refuses(policy: Policy, name: str) -> None:
    """One list (launcher.py): the CEL policy denies a variable iff the rule refuses it."""
    from runai_spec.policy import transport_variable

    job = example_job("multi-node")
    container(pods(job)[0])["env"].append({"name": name, "value": "x"})
    assert ("reserved-env" in policy.denials(job)) == transport_variable(name)


def test_an_expired_approval_is_denied_naming_the_date() -> None:
    registry = PresetRegistry(ROOT / "presets", today=dt.date(2028, 1, 1))
    with pytest.raises(Exception, match="expired"):
        admission.policy_documents(registry)  # the site's own approval expired too


def test_an_expired_preset_approval_is_denied(presets_dir: Path) -> None:
    ledger = presets_dir / "approvals.yaml"
    text = ledger.read_text()
    # only h200-2x8-ib's approval expires; the rest stay valid
    head, rest = text.split("h200-2x8-ib.yaml:", 1)
    ledger.write_text(head + "h200-2x8-ib.yaml:" + rest.replace('"2027-12-31"', '"2026-12-31"', 1))
    registry = PresetRegistry(presets_dir, today=TODAY)
    docs = admission.policy_documents(registry)
    data = docs[2]["data"]
    assert data["h200-2x8-ib.expired"] == "2026-12-31"
    assert "h200-2x8-ib.sha256" not in data
    denied = Policy(docs, PROJECTS).denials(example_job("multi-node"))
    assert denied == {"preset-approved": "metadata.annotations.runai-spec/preset: the approval of "
                                         "preset h200-2x8-ib expired on 2026-12-31"}


def test_a_project_not_granted_the_preset_is_denied() -> None:
    grants = {"vision-lab": ["h200-1gpu", "h200-8gpu"], "*": ["h200-1gpu"]}
    policy = Policy(admission.policy_documents(REGISTRY, grants), PROJECTS)
    denied = policy.denials(example_job("multi-node"))
    assert denied == {"project-granted": "metadata.namespace: project nlp-lab (namespace "
                                         "runai-nlp-lab) is not granted preset h200-2x8-ib"}
    assert policy.denials(example_job("single-gpu")) == {}   # granted to every project
    assert policy.denials(example_job("single-node")) == {}  # vision-lab is granted h200-8gpu
    job = example_job("single-node")
    job["metadata"]["namespace"] = "runai-nlp-lab"
    for labels in [job["metadata"]["labels"], *(t["metadata"]["labels"] for t in pods(job))]:
        labels["runai/queue"] = "nlp-lab"
    assert list(policy.denials(job)) == ["project-granted"]  # nlp-lab is not
    data = admission.params_data(REGISTRY, grants)
    assert data["h200-1gpu.projects"] == "*"
    assert data["h200-8gpu.projects"] == "vision-lab"
    assert data["h200-2x8-ib.projects"] == ""


def test_no_grants_in_the_site_grants_every_preset_to_every_project(presets_dir: Path,
                                                                     engineer_key: Path) -> None:
    site = presets_dir / "site.yaml"
    text = site.read_text(encoding="utf-8")
    site.write_text(text[:text.index("grants:")], encoding="utf-8")
    PresetRegistry(presets_dir).approve("site", engineer_key)
    data = admission.params_data(PresetRegistry(presets_dir))
    assert {k: v for k, v in data.items() if k.endswith(".projects")} == {
        f"{name}.projects": "*" for name in REGISTRY.names()}


def test_a_namespace_of_another_project_is_denied(policy: Policy) -> None:
    job = example_job("multi-node")
    job["metadata"]["namespace"] = "runai-vision-lab"
    # vision-lab is not granted the multi-node preset either (the shipped site's grants)
    assert list(policy.denials(job)) == ["project-granted", "queue"]


def test_the_shipped_grants_reach_the_parameters() -> None:
    data = admission.params_data(REGISTRY)
    assert data["h200-1gpu.projects"] == "*"
    assert "vision-lab" not in data["h200-2x8-ib.projects"]


def test_an_update_that_changes_nothing_is_not_judged_again() -> None:
    """An approval that expired must not block the operator's own writes to a running job."""
    docs = admission.policy_documents(REGISTRY)
    del docs[2]["data"]["h200-2x8-ib.sha256"]
    policy = Policy(docs, PROJECTS)
    old = example_job("multi-node")
    new = copy.deepcopy(old)
    new["metadata"]["resourceVersion"] = "2"
    assert policy.denials(new, old=old) == {}
    _more_gpu(new)
    assert "preset-approved" in policy.denials(new, old=old)


# -- the generated documents ---------------------------------------------------------------
def test_policy_documents_are_the_three_objects_and_name_their_kubernetes_version() -> None:
    policy, binding, params = admission.policy_documents(REGISTRY)
    assert (policy["kind"], binding["kind"], params["kind"]) == (
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["annotations"][admission.REQUIRES_ANNOTATION] == ">=1.30"
    spec = policy["spec"]
    assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "runai/queue", "operator": "Exists"}]}
    assert spec["matchConstraints"]["resourceRules"] == [{
        "apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
        "resources": ["pytorchjobs"]}]
    ref = binding["spec"]["paramRef"]
    assert ref == {"name": params["metadata"]["name"], "namespace": params["metadata"]["namespace"],
                   "parameterNotFoundAction": "Deny"}
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert all(isinstance(v, str) for v in params["data"].values())
    for validation in spec["validations"]:
        assert set(validation) == {"expression", "message", "messageExpression", "reason"}


def test_approving_a_preset_changes_the_parameters_not_the_policy(presets_dir: Path,
                                                                    engineer_key: Path) -> None:
    before = admission.policy_documents(PresetRegistry(presets_dir, today=TODAY))
    preset = presets_dir / "h200-8gpu.yaml"
    preset.write_text(preset.read_text().replace('cpu: "96"', 'cpu: "64"'))
    registry = PresetRegistry(presets_dir, today=TODAY)
    registry.approve("h200-8gpu", engineer_key, expires="2027-12-31")
    after = admission.policy_documents(PresetRegistry(presets_dir, today=TODAY))
    assert after[:2] == before[:2]
    changed = {k for k in after[2]["data"] if after[2]["data"][k] != before[2]["data"].get(k)}
    assert changed == {"h200-8gpu.sha256", "h200-8gpu.resources", "h200-8gpu.approved-by",
                       "h200-8gpu.approved-at"}


def test_write_policy_writes_parseable_files_that_round_trip(tmp_path: Path) -> None:
    paths = admission.write_policy(REGISTRY, tmp_path / "out")
    assert [p.name for p in paths] == ["policy.yaml", "params.yaml"]
    docs = [d for p in paths for d in yaml.safe_load_all(p.read_text())]
    assert docs == admission.policy_documents(REGISTRY)
    assert paths[0].read_text().startswith("# Generated by `runai-spec presets policy`")
    assert admission.write_policy(REGISTRY, tmp_path / "out") == paths  # idempotent


def test_the_policy_names_the_keys_the_renderer_and_the_smoke_test_write() -> None:
    from runai_spec import smoke
    job = example_job("multi-node")
    assert admission.PRESET_ANNOTATION in job["metadata"]["annotations"]
    assert admission.PRESET_SHA_ANNOTATION in job["metadata"]["annotations"]
    assert smoke.SMOKE_LABEL == admission.SMOKE_LABEL
    assert container(pods(job)[0])["name"] == admission.CONTAINER


def test_the_params_are_what_the_renderer_renders_from_each_preset() -> None:
    """Each example's rendered shape is its preset's parameters, field by field."""
    data = admission.params_data(REGISTRY)
    for name in EXAMPLES:
        job = example_job(name)
        preset = job["metadata"]["annotations"]["runai-spec/preset"]
        limits = container(pods(job)[0])["resources"]["limits"]
        assert data[f"{preset}.resources"] == "\n".join(
            f"{k}={v}" for k, v in sorted(limits.items()))
        assert data[f"{preset}.replicas"] == "\n".join(
            f"{k}={v['replicas']}" for k, v in sorted(job["spec"]["pytorchReplicaSpecs"].items()))


def test_a_smoke_job_may_not_outlast_or_outrestart_the_preset(policy: Policy) -> None:
    job = next(j for j in smoke_jobs() if j["metadata"]["name"] == "llm-7b-fsdp-smoke")
    job["spec"]["runPolicy"]["backoffLimit"] = 3
    assert list(policy.denials(job)) == ["run-policy"]
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    del job["spec"]["runPolicy"]["activeDeadlineSeconds"]
    assert list(policy.denials(job)) == ["run-policy"]
    job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 1800
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    assert list(policy.denials(job)) == ["restart-policy"]


def test_a_value_of_the_wrong_type_is_denied_not_an_evaluation_error(policy: Policy) -> None:
    job = example_job("single-node")
    job["spec"]["nprocPerNode"] = {"n": 8}
    job["spec"]["runPolicy"]["activeDeadlineSeconds"] = [1]
    assert set(policy.denials(job)) == {"nproc-per-node", "run-policy"}
