"""The MPI operator's facts in one place: MPIJob v2beta1's names, defaults, hostfile and rules."""

# A model of someone else's behaviour: each fact names the kubeflow/mpi-operator file it follows
# (tag v0.6.0, the release Run:ai's docs require). Read again at v0.7.0 and v0.8.0: the same
# v2beta1 defaults (default.go), launcher env and suffixes (mpi_job_controller.go); the hostfile
# gains `.<cluster domain>` after `.svc` where the operator runs with --cluster-domain (v0.7.0's
# cmd/mpi-operator/app/options/options.go, empty by default): hostfile's cluster_domain.

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from .kubeflow import is_dns1035_label

# The mpi-operator releases this model follows (site.yaml mpi_operator), `none` for a site
# without one, and `training-operator-v1`: training-operator 1.x serves an older MPIJob
# kubeflow.org/v1 under the same CRD name (mpijobs.kubeflow.org), so a site runs one or the
# other and runai-spec renders v2beta1 only.
MpiOperator = Literal["none", "training-operator-v1", "v0.6.0", "v0.7.0", "v0.8.0"]
NO_OPERATOR: MpiOperator = "none"
TRAINING_OPERATOR_V1: MpiOperator = "training-operator-v1"
OPERATOR_VERSIONS: tuple[str, ...] = get_args(MpiOperator)[2:]

# pkg/apis/kubeflow/v2beta1/types.go
API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
PLURAL = "mpijobs"
CRD_NAME = f"{PLURAL}.kubeflow.org"
LAUNCHER = "Launcher"  # MPIReplicaTypeLauncher
WORKER = "Worker"  # MPIReplicaTypeWorker
REPLICA_TYPES = (LAUNCHER, WORKER)  # the hostfile's order when the launcher is a worker
# manifests/base/kubeflow.org_mpijobs.yaml: the CRD serves a status subresource and no scale
# (`kubectl scale mpijob` is refused by the API server; the Workers' replicas change only
# through an update of the MPIJob, which the admission policy judges)
SCALE_SUBRESOURCE = False
# pkg/apis/kubeflow/v2beta1/default.go: the values the operator fills when a field is unset
DEFAULT_SLOTS_PER_WORKER = 1
DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
DEFAULT_LAUNCHER_CREATION_POLICY = "AtStartup"
DEFAULT_IMPLEMENTATION = "OpenMPI"
DEFAULT_CLEAN_POD_POLICY = "None"
LauncherCreationPolicy = Literal["AtStartup", "WaitForWorkersReady"]
# The implementations the CRD takes; runai-spec renders OpenMPI's mpirun only (Intel's and
# MPICH's Hydra take other flags and env: left for a later issue).
IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
MpiImplementation = Literal["OpenMPI"]

# pkg/controller/mpi_job_controller.go
CONFIG_MOUNT = "/etc/mpi"  # configMountPath: the ConfigMap `<job>-config` in the launcher
HOSTFILE = "hostfile"  # hostfileName
LAUNCHER_SUFFIX = "-launcher"
WORKER_SUFFIX = "-worker"
CONFIG_SUFFIX = "-config"
SSH_CONNECT_ARGS = "-o ConnectionAttempts=10"
# The labels on the job's pods (defaultLabels; newWorker adds the replica index, the launcher
# Job's pod has none): the job name under the training operator's key, no replica-type label
# but a role, `launcher` or `worker` (v2beta1/constants.go JobRoleLabel).
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
LAUNCHER_ROLE = "launcher"
WORKER_ROLE = "worker"
# The job's status conditions (types.go JobConditionType; the controller's setCondition
# replaces a type in place and appends it). Running stays True beside Succeeded or Failed (the
# controller never sets it False on completion), so the job's phase is the first of these
# that holds, never simply the last condition.
PHASES = ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created")
# What the controller appends to the launcher's first container for OpenMPI (ompiEnvVars and
# openMPISlotsEnv), in its order; a profile or preset variable of the same name is overridden.
OPENMPI_ENV = (
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_set_default_slots",
)
# emptied in the launcher unless it runs as a worker (nvidiaDisableEnvVars)
NVIDIA_DISABLED_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
# The prefixes of the variables the operator or the engineers own for the MPI transport:
# OpenMPI's MCA parameters, Intel MPI's and Hydra's (DESIGN 4.8).
OPERATOR_ENV_PREFIXES = ("OMPI_MCA_", "I_MPI_", "HYDRA_")

# OpenMPI's launcher (Debian's openmpi-bin 4.1: orterun's options). runai-spec adds it with the
# world size and the preset's approved flags; these are the ones that change where and how many
# ranks run, or how they talk (MCA parameters), refused in a researcher's command: distinctive
# names only (a script's own `-n` or `-x` stays its own; mpirun stops reading at the program).
PROGRAM = "mpirun"
PROGRAMS = ("mpirun", "mpiexec", "orterun")
NP_FLAG = "-np"
RESERVED_FLAGS = (
    r"--?(?:np|mca|gmca|hostfile|machinefile|map-by|bind-to|rank-by|oversubscribe|"
    r"allow-run-as-root|tune|display-map|report-bindings)"
)

# DeepSpeed 0.19.8 (PyPI's sdist) deepspeed/launcher/multinode_runner.py OpenMPIRunner: the
# transport it forces (UCX_TLS=tcp in its exports, btl ^openib, btl_tcp_if_include eth0 unless
# its launcher args name that MCA parameter): the engineers' settings under DESIGN 4.8; and the
# file whose lines deepspeed/launcher/runner.py exports to every rank (DEEPSPEED_ENVIRONMENT_NAME,
# $DS_ENV_FILE or .deepspeed_env, read in ~ and in the working directory). The audit layer
# (audit/runai_spec_script.py, stdlib only) spells the same facts for the ranks.
DEEPSPEED_OPENMPI_TRANSPORT = ("-x UCX_TLS=tcp", "--mca btl ^openib", "--mca btl_tcp_if_include eth0")
DEEPSPEED_ENV_FILE = ".deepspeed_env"
DEEPSPEED_ENV_FILE_VAR = "DS_ENV_FILE"  # names another file in its place
DEEPSPEED_RUNNERS = ("deepspeed", "deepspeed.launcher.runner")  # its command, its module
DEEPSPEED_OPENMPI = "openmpi"  # the runner's --launcher that runs OpenMPIRunner


def launcher_name(job: str) -> str:
    return f"{job}{LAUNCHER_SUFFIX}"


def worker_name(job: str, index: int) -> str:
    """workerName(): the worker pod `<job>-worker-<index>`."""
    return f"{job}{WORKER_SUFFIX}-{index}"


def hostfile(
    job: str, namespace: str, workers: int, slots: int, launcher_as_worker: bool, cluster_domain: str = ""
) -> str:
    """The ConfigMap's hostfile for OpenMPI (newConfigMap): the launcher first when it runs as
    a worker, then each worker, as `<pod>.<job>.<namespace>.svc slots=<n>` (`.svc.<domain>` for
    an operator from v0.7.0 run with --cluster-domain)."""
    pods = [launcher_name(job)] if launcher_as_worker else []
    pods += [worker_name(job, i) for i in range(workers)]
    svc = f"svc.{cluster_domain}" if cluster_domain else "svc"
    return "".join(f"{pod}.{job}.{namespace}.{svc} slots={slots}\n" for pod in pods)


def launcher_env(slots: int, launcher_as_worker: bool) -> tuple[tuple[str, str], ...]:
    """The variables the controller appends to the launcher's container (OpenMPI)."""
    values = ("true", f"{CONFIG_MOUNT}/{HOSTFILE}", SSH_CONNECT_ARGS, str(slots))
    env = tuple(zip(OPENMPI_ENV, values, strict=True))
    return env if launcher_as_worker else env + tuple((n, "") for n in NVIDIA_DISABLED_ENV)


def operator_problems(job: Mapping[str, Any]) -> list[str]:
    """The operator's validation, which the CRD schema does not carry (v0.6.0
    pkg/apis/kubeflow/validation/validation.go ValidateMPIJob): the name (and its last
    worker's pod name) a DNS-1035 label, slotsPerWorker and sshAuthMountPath set, a known
    implementation, runPolicy.cleanPodPolicy set, a Launcher of exactly 1 replica, Workers of
    at least 1, restartPolicy Never or OnFailure, and a container in every replica."""
    problems = []
    name = str(job.get("metadata", {}).get("name", ""))
    spec = job.get("spec", {})
    specs = spec.get("mpiReplicaSpecs", {})
    workers = specs.get(WORKER, {}).get("replicas") or 1
    for what, label in (("metadata.name", name), ("the last worker's name", worker_name(name, workers - 1))):
        if not is_dns1035_label(label):
            problems.append(f"{what}: {label!r} is not a DNS-1035 label")
    if spec.get("slotsPerWorker") is None:
        problems.append("spec.slotsPerWorker: must have number of slots per worker")
    if not spec.get("sshAuthMountPath"):
        problems.append("spec.sshAuthMountPath: must have a mount path for SSH credentials")
    if spec.get("mpiImplementation") not in IMPLEMENTATIONS:
        implementation = spec.get("mpiImplementation")
        problems.append(f"spec.mpiImplementation: {implementation!r} is not one of {IMPLEMENTATIONS}")
    if not spec.get("runPolicy", {}).get("cleanPodPolicy"):
        problems.append("spec.runPolicy.cleanPodPolicy: must have clean Pod policy")
    if LAUNCHER not in specs:
        problems.append(f"spec.mpiReplicaSpecs.{LAUNCHER}: must have {LAUNCHER} replica spec")
    elif specs[LAUNCHER].get("replicas", 1) != 1:
        problems.append(f"spec.mpiReplicaSpecs.{LAUNCHER}.replicas: must be 1")
    for role, replica in specs.items():
        if role == WORKER and replica.get("replicas", 0) <= 0:  # default.go: 0 where unset
            problems.append(f"spec.mpiReplicaSpecs.{WORKER}.replicas: must be greater than or equal to 1")
        if replica.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"spec.mpiReplicaSpecs.{role}.restartPolicy: must be Never or OnFailure")
        if not replica.get("template", {}).get("spec", {}).get("containers"):
            problems.append(f"spec.mpiReplicaSpecs.{role}: must define at least one container")
    return problems


def operator_env_name(name: str) -> bool:
    """Whether variable NAME is the MPI transport's (the operator's or the engineers')."""
    return name.startswith(OPERATOR_ENV_PREFIXES)


def reserved_flag(arg: str) -> bool:
    return re.match(f"^(?:{RESERVED_FLAGS})(=|$)", arg) is not None
