"""KAI-Scheduler's evictions and topology keys, as its source (v0.9.9, v0.12.0, v0.17.0) reads them."""

# A model of someone else's behaviour (kai-scheduler/KAI-Scheduler, tags v0.9.9, v0.12.0 and
# v0.17.0; they behave the same in everything written here unless "By version" says not):
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
# - Several pods of one job per scheduling pass: the preempt, reclaim and consolidation actions
#   call GetTasksToEvict for a victim again while they still need room, one pod each time, so
#   one pass may take k >= 1 pods of an elastic job (evicted_in_pass): down to its minimum one
#   by one, and the whole gang once a pass needs more than that.
# By version (DESIGN section 4, from the audit of the tags): the job annotation
# STALENESS_ANNOTATION is honoured from v0.17.0 (before, every gang gets the scheduler's
# default); the `kai.scheduler/v1alpha1` Topology exists from v0.12.0 (v0.9.9 reads Kueue's,
# `kueue.x-k8s.io/v1alpha1` `topologies`); level aliases from v0.17.0 (not modelled: the
# placement is always a level's node label key, which every version reads).

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from .kubeflow import REPLICA_TYPES

# GPU sharing (issue 41 item 3): a pod gets a fraction of a GPU, or GPU memory, from these pod
# annotations with no `nvidia.com/gpu` request at all (pkg/common/constants/constants.go
# GpuFraction, GpuMemory, GpuFractionsNumDevices, RunaiGpuLimit; Run:ai's "GPU fractions").
GPU_SHARING_ANNOTATIONS = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "runai-gpu-limit")

KaiVersion = Literal["v0.9.9", "v0.12.0", "v0.17.0"]
KAI_VERSIONS: tuple[str, ...] = get_args(KaiVersion)  # oldest first
KAI_VERSION: KaiVersion = "v0.17.0"  # a site that declares none: the newest modelled
STALENESS_ANNOTATION_SINCE = "v0.17.0"
KAI_TOPOLOGY_SINCE = "v0.12.0"
LEVEL_ALIASES_SINCE = "v0.17.0"

STALENESS_GRACE_DEFAULT_S = 60.0  # options.go defaultStalenessGracePeriod = 60 * time.Second
STALENESS_ANNOTATION = "kai.scheduler/staleness-grace-period"

TOPOLOGY_ANNOTATION = "kai.scheduler/topology"
REQUIRED_PLACEMENT_ANNOTATION = "kai.scheduler/topology-required-placement"
PREFERRED_PLACEMENT_ANNOTATION = "kai.scheduler/topology-preferred-placement"
# the Topology CRD (pkg/apis/kai/v1alpha1/topology_types.go): cluster-scoped
TOPOLOGY_GROUP, TOPOLOGY_VERSION, TOPOLOGY_PLURAL = "kai.scheduler", "v1alpha1", "topologies"
# before v0.12.0 KAI reads Kueue's Topology (same shape: spec.levels[].nodeLabel)
KUEUE_TOPOLOGY_GROUP = "kueue.x-k8s.io"
PLACEMENT_ANNOTATION = {
    "required": REQUIRED_PLACEMENT_ANNOTATION,
    "preferred": PREFERRED_PLACEMENT_ANNOTATION,
}


def _since(version: str, first: str) -> bool:
    if version not in KAI_VERSIONS:
        raise ValueError(f"KAI-Scheduler {version!r}: modelled are {', '.join(KAI_VERSIONS)}")
    return KAI_VERSIONS.index(version) >= KAI_VERSIONS.index(first)


def honours_staleness_annotation(version: str) -> bool:
    """Whether KAI VERSION reads STALENESS_ANNOTATION on a job (from v0.17.0)."""
    return _since(version, STALENESS_ANNOTATION_SINCE)


def topology_api(version: str) -> tuple[str, str, str]:
    """(group, version, plural) of the Topology object KAI VERSION reads."""
    group = TOPOLOGY_GROUP if _since(version, KAI_TOPOLOGY_SINCE) else KUEUE_TOPOLOGY_GROUP
    return group, TOPOLOGY_VERSION, TOPOLOGY_PLURAL


def min_member(job: Mapping[str, Any], version: str = KAI_VERSION) -> int:
    """The pod group's minMember for a PyTorchJob (pytorch_grouper.go): every replica, or
    elasticPolicy.minReplicas, or runPolicy.schedulingPolicy.minAvailable (which wins)."""
    _since(version, KAI_VERSIONS[0])
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


def evicted_in_pass(active: int, minimum: int, wanted: int) -> int:
    """Pods of a job with ACTIVE pods and minMember MINIMUM that one scheduling pass evicts
    when it wants WANTED (>= 1) of them: one at a time while the job stays at or above its
    minimum, so WANTED when that holds; else the whole gang (ACTIVE)."""
    if wanted < 1:
        raise ValueError("a pass that evicts evicts at least one pod")
    return wanted if active - wanted >= minimum else active


STALENESS_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def staleness_grace_s(job: Mapping[str, Any], version: str) -> float:
    """The job's staleness grace period: STALENESS_ANNOTATION (a Go duration such as `90s`,
    `2m`; negative: never evicted) where KAI VERSION honours it, else the scheduler's default
    STALENESS_GRACE_DEFAULT_S."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(STALENESS_ANNOTATION)
    if not honours_staleness_annotation(version) or not isinstance(value, str):
        return STALENESS_GRACE_DEFAULT_S
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)([smh])", value.strip())
    return float(m.group(1)) * STALENESS_UNITS[m.group(2)] if m else STALENESS_GRACE_DEFAULT_S


def is_stale(active: int, minimum: int) -> bool:
    """IsStale: some pods active, fewer than the minimum (a Succeeded pod aside)."""
    return 0 < active < minimum
