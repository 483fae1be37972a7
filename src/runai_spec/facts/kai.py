"""KAI-Scheduler's evictions and topology keys, as its source (v0.9.9, v0.17.0) reads them."""

# A model of someone else's behaviour (kai-scheduler/KAI-Scheduler, tags v0.9.9 and v0.17.0;
# the two behave the same in everything written here):
# - The pod group of a PyTorchJob (pkg/podgrouper/podgrouper/plugins/kubeflow/pytorch/
#   pytorch_grouper.go GetPodGroupMetadata): minMember is every replica (the Kubeflow
#   grouper's default), or `spec.elasticPolicy.minReplicas` when set, or
#   `spec.runPolicy.schedulingPolicy.minAvailable` when that is set (it wins).
# - One pod of an elastic job (pkg/scheduler/api/podgroup_info/eviction_info.go
#   GetTasksToEvict, called by the preempt and reclaim actions): while a pod set has more
#   active pods than its minimum, a victim job gives up ONE pod
#   (`collectElasticEvictionFromPodSet`: `getTasksFromQueue(taskQueue, 1)`; v0.9.9
#   `getNumOfSubGroupsToEvict`/`getMaxTasksToEvict`); at its minimum the whole gang goes.
#   An eviction deletes the pod (SIGTERM, its grace period, SIGKILL); the training operator
#   v1.9 sees the pod missing and creates it anew (common/pod.go ReconcilePods, "Need to
#   create new pod"): no failure, no restart counted against backoffLimit.
# - The stale gang (pkg/scheduler/actions/stalegangeviction/stalegangeviction.go, with
#   podgroup_info/job_info.go IsStale): a pod group with active pods but fewer than its
#   minimum (pod_status.go activeUsedStatuses: a Pending replacement does not count) is
#   stale; once stale for the grace period, every active pod of the gang is evicted. The
#   grace period: the pod group's `stalenessGracePeriod` (from the annotation
#   STALENESS_ANNOTATION on the job or a pod, defaultgrouper/default_grouper.go
#   calcStalenessGracePeriod), else the scheduler's `--default-staleness-grace-period`,
#   STALENESS_GRACE_DEFAULT_S (cmd/scheduler/app/options/options.go
#   defaultStalenessGracePeriod); negative: never evicted. A job with no active pod left, or
#   with a Succeeded pod, is not stale.
# - Topology-aware placement (defaultgrouper/default_grouper.go GetPodGroupMetadata): read
#   from the TOP OWNER's annotations only (the PyTorchJob, not its pods): TOPOLOGY_ANNOTATION
#   names the cluster's `Topology` object (kai.scheduler/v1alpha1, TOPOLOGY_PLURAL), and
#   REQUIRED_/PREFERRED_PLACEMENT_ANNOTATION a level of it (a node label key, e.g. a rack).

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from .kubeflow import REPLICA_TYPES

# GPU sharing (issue 41 item 3): a pod gets a fraction of a GPU, or GPU memory, from these pod
# annotations with no `nvidia.com/gpu` request at all (pkg/common/constants/constants.go
# GpuFraction, GpuMemory, GpuFractionsNumDevices, RunaiGpuLimit; Run:ai's "GPU fractions").
GPU_SHARING_ANNOTATIONS = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "runai-gpu-limit")

KaiVersion = Literal["v0.9.9", "v0.17.0"]
KAI_VERSIONS: tuple[str, ...] = get_args(KaiVersion)

STALENESS_GRACE_DEFAULT_S = 60.0  # options.go defaultStalenessGracePeriod = 60 * time.Second
STALENESS_ANNOTATION = "kai.scheduler/staleness-grace-period"

TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
REQUIRED_PLACEMENT_ANNOTATION = "kai.scheduler/topology-required-placement"
PREFERRED_PLACEMENT_ANNOTATION = "kai.scheduler/topology-preferred-placement"
# the Topology CRD (pkg/apis/kai/v1alpha1/topology_types.go): cluster-scoped
TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL = "kai.scheduler", "v1alpha1", "topologies"
PLACEMENT_ANNOTATION = {
    "required": REQUIRED_PLACEMENT_ANNOTATION,
    "preferred": PREFERRED_PLACEMENT_ANNOTATION,
}


def min_member(job: Mapping[str, Any], version: str = KAI_VERSIONS[-1]) -> int:
    """The pod group's minMember for a PyTorchJob (pytorch_grouper.go): every replica, or
    elasticPolicy.minReplicas, or runPolicy.schedulingPolicy.minAvailable (which wins)."""
    if version not in KAI_VERSIONS:
        raise ValueError(f"KAI-Scheduler {version!r}: modelled are {', '.join(KAI_VERSIONS)}")
    spec = job.get("spec") or {}
    replicas = spec.get("pytorchReplicaSpecs") or {}
    out = sum(int((replicas.get(t) or {}).get("replicas", 1)) for t in REPLICA_TYPES if t in replicas)
    elastic = (spec.get("elasticPolicy") or {}).get("minReplicas")
    if isinstance(elastic, int):
        out = elastic
    available = ((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("minAvailable")
    return available if isinstance(available, int) else out


def evicts_one(active: int, minimum: int) -> bool:
    """KAI takes one pod of a victim job (not the gang) while it runs above its minimum."""
    return active > minimum


def is_stale(active: int, minimum: int) -> bool:
    """IsStale: some pods active, fewer than the minimum (a Succeeded pod aside)."""
    return 0 < active < minimum
