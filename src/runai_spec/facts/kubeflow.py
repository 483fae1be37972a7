"""The training operator's facts in one place: names, keys, ports, its env and its rules."""

# A model of someone else's behaviour: each fact names the kubeflow/training-operator file it
# follows (release-1.9 unless a comment says otherwise). Keys that runai-spec itself writes
# live here too, so every module that writes or reads a label spells it the same way.

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, get_args

from ..errors import InputError
from .torchrun import split_flag

# The training-operator releases operator_env() models (site.yaml operator_version), and the
# one a site gets when it names none.
OperatorVersion = Literal["1.7", "1.8", "1.9"]
OPERATOR_VERSIONS: tuple[str, ...] = get_args(OperatorVersion)
OPERATOR_VERSION: OperatorVersion = "1.9"

# pkg/apis/kubeflow.org/v1/pytorch_types.go
API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
PLURAL = "pytorchjobs"
CRD_NAME = f"{PLURAL}.kubeflow.org"
CONTAINER = "pytorch"  # PytorchJobDefaultContainerName
PORT_NAME = "pytorchjob-port"  # PytorchJobDefaultPortName
DEFAULT_PORT = 23456  # PytorchJobDefaultPort
MASTER = "Master"  # PyTorchJobReplicaTypeMaster
WORKER = "Worker"  # PyTorchJobReplicaTypeWorker
REPLICA_TYPES = (MASTER, WORKER)  # the order the operator numbers ranks in
RDZV_BACKEND: Final = "c10d"  # elasticPolicy.rdzvBackend when unset (elastic.go)
# The pod's own name from the downward API (env valueFrom.fieldRef), for $(POD_NAME) in args
POD_NAME_ENV = ("POD_NAME", "metadata.name")
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource, which nproc must match


def kubelet_literal(text: str) -> str:
    """TEXT written so that the kubelet passes it on as it is. The kubelet expands `$(NAME)`
    in a container's command, args and env values (Kubernetes
    `third_party/forked/golang/expansion/expand.go`, modelled in rehearse/kubelet.py), so a
    researcher's `$(X).py` would take the value of X, a flag of the profile's own choosing:
    every `$` becomes `$$`, which expand.go reads back as one `$`. Only the researcher's text is
    written so; the tool's own `$(MASTER_ADDR)` and `$(POD_NAME)` are meant to expand."""
    return text.replace("$", "$$")


# Pod labels the operator sets (pkg/apis/kubeflow.org/v1/common_types.go).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

# What runai-spec writes on every object it renders, and reads back (submit, delete, diff).
MANAGED_BY = "runai-spec"  # the managed-by label's value and the server-side apply manager
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
PROJECT_LABEL = "project"
ANNOTATION_PREFIX = "runai-spec/"
VERSION_ANNOTATION = f"{ANNOTATION_PREFIX}version"
PRESET_ANNOTATION = f"{ANNOTATION_PREFIX}preset"
PRESET_SHA_ANNOTATION = f"{ANNOTATION_PREFIX}preset-sha256"
PROFILE_SHA_ANNOTATION = f"{ANNOTATION_PREFIX}profile-sha256"
SITE_SHA_ANNOTATION = f"{ANNOTATION_PREFIX}site-sha256"
DIAGNOSTICS_ANNOTATION = f"{ANNOTATION_PREFIX}diagnostics"
SMOKE_LABEL = f"{ANNOTATION_PREFIX}smoke"  # label and annotation of a smoke test's objects
SMOKE_SUFFIX = "-smoke"  # the smoke test of workload X is the job X-smoke
SMOKE_MOUNT = "/opt/runai-spec"  # where the smoke job's pods mount preflight.py (the tool's)
PREFLIGHT_SHA_ANNOTATION = f"{ANNOTATION_PREFIX}preflight-sha256"

# Kubernetes names (k8s.io/apimachinery pkg/util/validation/validation.go): the job name must
# be a DNS-1035 label (the webhook's NameIsDNS1035Label), and so must every pod and service
# name derived from it, which caps all of them at 63 characters.
DNS1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1035 = re.compile(DNS1035_PATTERN)
DNS1123 = re.compile(DNS1123_PATTERN)
NAME_MAX = 63


def is_dns1035_label(name: str) -> bool:
    return bool(DNS1035.match(name)) and len(name) <= NAME_MAX


def short_pod_name(replica_type: str, index: int) -> str:
    """`master-0`, `worker-N`: a pod's name without its job's (what rehearse and the restart
    model call a pod)."""
    return f"{replica_type.lower()}-{index}"


def pod_name(job: str, replica_type: str, index: int) -> str:
    """`<job>-master-0`, `<job>-worker-N`: each pod and its headless service
    (pkg/common/util/util.go GenGeneralName)."""
    return f"{job}-{short_pod_name(replica_type, index)}"


def name_room(job: str, longest_pod: str) -> int:
    """The longest name job JOB could have and keep LONGEST_POD, a pod name derived from it
    (`<job>-worker-N`, `<job>-smoke-worker-N`), within a DNS label: what "shorten the name to
    at most N characters" says."""
    return NAME_MAX - (len(longest_pod) - len(job))


# The operator's variables that say where the rendezvous is (envvar.go, elastic.go): what the
# rehearsal maps onto this machine's loopback and reads back.
MASTER_ADDR_ENVS = ("MASTER_ADDR", "PET_MASTER_ADDR")
MASTER_PORT_ENVS = ("MASTER_PORT", "PET_MASTER_PORT")
RDZV_ENDPOINT_ENV = "PET_RDZV_ENDPOINT"
RDZV_BACKEND_ENV = "PET_RDZV_BACKEND"
RDZV_CONF_ENV = "PET_RDZV_CONF"


def master_addr(job: str) -> str:
    """MASTER_ADDR: the service of the Master's pod (master.go)."""
    return pod_name(job, MASTER, 0)


# Set per process by the operator (operator_env), torchrun or the GPU device plugin: a value
# written in the profile would be overridden or, worse, win. (NVIDIA_VISIBLE_DEVICES, the
# device plugin's, is in launcher.TRANSPORT_ENV_NAMES: the list the admission policy reads.)
INJECTED_ENV = re.compile(
    r"^(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK|"
    r"LOCAL_WORLD_SIZE|GROUP_RANK|PET_.*|TORCHELASTIC_.*|"
    r"CUDA_VISIBLE_DEVICES|POD_NAME)$"
)


# --- torchrun's processes per pod (the nproc rule) ------------------------------------

NPROC_FLAG = "--nproc-per-node"  # torchrun's flag; PET_NPROC_PER_NODE is its default


# The operator's defaults (pkg/apis/kubeflow.org/v1/pytorch_defaults.go, v1.7.0-v1.9.0,
# applied by the controller's Scheme.Default at every reconcile): an unset spec.nprocPerNode
# becomes "auto" unless the deprecated elasticPolicy.nProcPerNode is set (torchrun's "auto":
# one process per GPU, else per CPU).
DEFAULT_NPROC = "auto"


def defaulted_nproc(job: Mapping[str, Any]) -> Any:
    """spec.nprocPerNode after the operator's defaulting (setDefaultNprocPerNode)."""
    spec = job.get("spec", {})
    value = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    if value is None and (elastic is None or elastic.get("nProcPerNode") is None):
        return DEFAULT_NPROC
    return value


def injected_nproc(job: Mapping[str, Any], version: str = OPERATOR_VERSION) -> Any:
    """PET_NPROC_PER_NODE as operator `version` sets it (the last one wins), or None: from
    spec.nprocPerNode as defaulted ("auto" when unset), v1.8.0+ envvar.go whenever set, v1.7.0
    on the Master branch only; then from the deprecated elasticPolicy.nProcPerNode
    (elastic.go)."""
    spec = job.get("spec", {})
    replicas = spec.get("pytorchReplicaSpecs") or {}
    value = defaulted_nproc(job) if (MASTER in replicas or version != "1.7") else None
    elastic = spec.get("elasticPolicy")
    if elastic is not None and elastic.get("nProcPerNode") is not None:
        value = elastic["nProcPerNode"]
    return value


def nproc_flags(command: Sequence[str]) -> list[str]:
    """The values of every `--nproc-per-node=N` in a container's argv."""
    return [value for name, value in map(split_flag, command) if name == NPROC_FLAG and value is not None]


def torchrun_procs(job: Mapping[str, Any], command: Sequence[str], version: str = OPERATOR_VERSION) -> Any:
    """How many processes torchrun starts in a pod: its last flag, else the operator's
    PET_NPROC_PER_NODE, else 1."""
    flags = nproc_flags(command)
    if flags:
        return flags[-1]
    injected = injected_nproc(job, version)
    return injected if injected is not None else 1


def nproc_int(job: Mapping[str, Any]) -> int:
    """getNprocPerNodeInt() (envvar.go): 1 unless spec.nprocPerNode is an integer string
    ("auto", the default, counts 1)."""
    value = job.get("spec", {}).get("nprocPerNode")
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


# --- the operator's env (envvar.go, master.go, elastic.go) -------------------------------


def replica_specs(job: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(type, replicas, spec) for Master then Worker, as the operator numbers them."""
    specs = job.get("spec", {}).get("pytorchReplicaSpecs") or {}
    out = []
    for rtype in REPLICA_TYPES:
        spec = specs.get(rtype)
        if spec is not None:
            out.append((rtype, int(spec.get("replicas", 1)), spec))
    if not out:
        raise InputError("the PyTorchJob has no Master or Worker replicas", field="spec.pytorchReplicaSpecs")
    return out


def pytorch_container(spec: Mapping[str, Any], replica_type: str) -> Mapping[str, Any]:
    """The container the operator configures: the one named `pytorch`."""
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    for c in containers:
        if c.get("name") == CONTAINER:
            return dict(c)
    raise InputError(
        f"the {replica_type} template has no container named {CONTAINER!r}",
        field=f"spec.pytorchReplicaSpecs.{replica_type}.template.spec.containers",
    )


def container_port(container: Mapping[str, Any]) -> int:
    """getPortFromPyTorchJob() (envvar.go): the port named pytorchjob-port, else the default."""
    for p in container.get("ports") or []:
        if p.get("name") == PORT_NAME:
            return int(p["containerPort"])
    return DEFAULT_PORT


def operator_env(
    job: Mapping[str, Any], replica_type: str, index: int, version: str = OPERATOR_VERSION
) -> dict[str, str]:
    """The variables training-operator `version` appends, in its order, to the containers
    of pod `replica_type`/`index`: setPodEnv in pkg/controller.v1/pytorch/envvar.go,
    master.go and elastic.go at tags v1.7.0, v1.8.0, v1.9.0 (v1.8.0 and v1.9.0 identical).
    setPodEnv loops over every container of the pod template, so a sidecar gets them as well
    as `pytorch`. spec.nprocPerNode is read as defaulted ("auto" when unset).
    From v1.7.0 PYTHONUNBUFFERED is "1" (v1.6.0 set "0"). v1.7.0 sets PET_NPROC_PER_NODE
    only with a Master, between RANK and PET_NODE_RANK; v1.8.0+ sets it whenever
    spec.nprocPerNode is set, after PET_NODE_RANK (so also for Worker-only jobs)."""
    if version not in OPERATOR_VERSIONS:
        raise InputError(
            f"training operator {version} is not modelled", hint="supported: " + ", ".join(OPERATOR_VERSIONS)
        )
    name = job["metadata"]["name"]
    spec = job.get("spec", {})
    replicas = replica_specs(job)
    by_type = {rtype: (n, s) for rtype, n, s in replicas}
    total = sum(n for _, n, _ in replicas)
    nproc = defaulted_nproc(job)
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if MASTER in by_type:
        port = container_port(pytorch_container(by_type[MASTER][1], MASTER))
        rank = index + 1 if replica_type == WORKER else index
        env.update(
            {
                "MASTER_PORT": str(port),
                "PET_MASTER_PORT": str(port),
                "MASTER_ADDR": master_addr(name),
                "PET_MASTER_ADDR": master_addr(name),
                "WORLD_SIZE": str(total * nproc_int(job)),
                "RANK": str(rank),
            }
        )
        if version == "1.7" and nproc is not None:
            env["PET_NPROC_PER_NODE"] = str(nproc)
        env["PET_NODE_RANK"] = str(rank)
    if version != "1.7" and nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        worker = by_type.get(WORKER)
        lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if lo is None and hi is None:  # pytorch_defaults.go setElasticPolicy (the controller)
            lo = hi = worker[0] if worker else None
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        host = elastic.get("rdzvHost") or pod_name(name, WORKER, 0)
        port = elastic.get("rdzvPort") or (
            container_port(pytorch_container(worker[1], WORKER)) if worker else DEFAULT_PORT
        )
        env["PET_RDZV_ENDPOINT"] = f"{host}:{port}"
        env["PET_RDZV_BACKEND"] = str(elastic.get("rdzvBackend") or RDZV_BACKEND)
        env["PET_NNODES"] = f"{lo}:{hi}"
        if elastic.get("maxRestarts") is not None:
            env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
        if elastic.get("nProcPerNode") is not None:
            # in v1.8+ the operator may append it twice; a dict keeps the last (this) value
            env.pop("PET_NPROC_PER_NODE", None)
            env["PET_NPROC_PER_NODE"] = str(elastic["nProcPerNode"])
        if elastic.get("rdzvId") is not None:
            env["PET_RDZV_ID"] = str(elastic["rdzvId"])
        if elastic.get("rdzvConf"):
            env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
        if elastic.get("standalone"):
            env["PET_STANDALONE"] = ""
    else:
        env["PET_NNODES"] = str(total)
    return env


# --- the operator's own validation ------------------------------------------------------

OWN_RULE = "runai-spec's layouts, not the operator's"


def operator_problems(job: Mapping[str, Any]) -> list[str]:
    """The operator's validation, which the CRD schema does not carry (v1.8.0/v1.9.0
    pkg/webhooks/pytorch/pytorchjob_webhook.go validatePyTorchJob; v1.7.0
    pkg/apis/kubeflow.org/v1/pytorch_validation.go, the same rules): a DNS-1035 name, a
    Worker when elastic, a Master of exactly 1 replica where there is one, Workers of at
    least 1, an image in every container and a `pytorch` container in every replica. Then
    runai-spec's own rule, marked so: a job that is not elastic has a Master (the operator
    admits a Worker-only job; the layouts never render one)."""
    problems = []
    name = str(job.get("metadata", {}).get("name", ""))
    if not is_dns1035_label(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    specs = job.get("spec", {}).get("pytorchReplicaSpecs", {})
    elastic = "elasticPolicy" in job.get("spec", {})
    if elastic and WORKER not in specs:
        problems.append(f"spec.pytorchReplicaSpecs.{WORKER}: must be configured if elastic policy is used")
    if MASTER in specs:
        if specs[MASTER].get("replicas") != 1:
            problems.append(f"spec.pytorchReplicaSpecs.{MASTER}.replicas: must be exactly 1")
    elif not elastic:
        problems.append(f"spec.pytorchReplicaSpecs: a {MASTER} replica is required ({OWN_RULE})")
    for role, spec in specs.items():
        if role == WORKER and spec.get("replicas") is not None and spec["replicas"] < 1:
            problems.append(f"spec.pytorchReplicaSpecs.{WORKER}.replicas: must be at least 1")
        containers = spec.get("template", {}).get("spec", {}).get("containers", [])
        if any(not c.get("image") for c in containers):
            problems.append(f"spec.pytorchReplicaSpecs.{role}: a container without an image")
        if not any(c.get("name") == CONTAINER for c in containers):
            problems.append(f"spec.pytorchReplicaSpecs.{role}: no container named {CONTAINER!r}")
    return problems
