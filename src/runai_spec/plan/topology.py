"""The job's replicas and elastic bounds: how many pods of which replica type."""

from ..load.presets import Preset
from ..records import Record
from .origins import Origin, Sources, derived


class Replica(Record):
    """One replica type of the PyTorchJob."""

    role: str  # one of the workload kind's roles (kubeflow.MASTER or kubeflow.WORKER)
    replicas: int


class ElasticPlan(Record):
    """Elastic bounds (pods) and torchrun restarts."""

    min_pods: int
    max_pods: int
    max_restarts: int


def plan_topology(
    preset: Preset, roles: tuple[str, ...], src: Sources, o: dict[str, Origin]
) -> tuple[ElasticPlan | None, tuple[Replica, ...]]:
    """The preset's elastic bounds and replicas of ROLES (the workload kind's: the lead's,
    then the workers'); their origins into `o`."""
    master, worker = roles
    elastic = None
    if preset.elastic is not None:
        elastic = ElasticPlan(preset.elastic.min, preset.elastic.max, preset.elastic.max_restarts)
        o |= {
            "elastic.min_pods": src.preset("elastic.min"),
            "elastic.max_pods": src.preset("elastic.max"),
            "elastic.max_restarts": src.preset("elastic.max_restarts"),
        }
        replicas: tuple[Replica, ...] = (Replica(worker, preset.nodes),)
        counts = [src.preset("nodes")]
    elif preset.nodes == 1:
        replicas = (Replica(master, 1),)
        counts = [derived("exactly one Master")]
    else:
        replicas = (Replica(master, 1), Replica(worker, preset.nodes - 1))
        counts = [derived("exactly one Master"), derived(f"preset nodes ({preset.nodes}) - 1 Master")]
    for i, count in enumerate(counts):
        o[f"replicas[{i}].role"] = derived(
            "Master trains; Workers join it" if elastic is None else "elastic: Worker-only job"
        )
        o[f"replicas[{i}].replicas"] = count
    return elastic, replicas
