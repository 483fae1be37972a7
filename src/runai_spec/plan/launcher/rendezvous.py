"""A launcher's rendezvous across pods: the backend, endpoint, id, restarts and timeouts it renders."""

from ...facts.kubeflow import RDZV_BACKEND
from ...load.presets import Preset
from ...records import Record


class RendezvousPlan(Record):
    """The rendezvous of a multi-node job, as the launcher flags render it."""

    backend: str  # c10d or static
    endpoint: str | None  # None: the operator's (PET_MASTER_* for static, PET_RDZV_ENDPOINT)
    rdzv_id: str | None
    max_restarts: int | None  # None: elasticPolicy.maxRestarts, or torchrun's default 0
    join_timeout_s: int | None
    read_timeout_s: int | None
    last_call_timeout_s: int | None


# Kubernetes expands $(VAR) in a container's command from that container's environment,
# including the variables the operator appends (MASTER_ADDR, MASTER_PORT: master.go); an env
# value could not use them, since it only sees variables listed before it.
RDZV_ENDPOINT = "$(MASTER_ADDR):$(MASTER_PORT)"


def rendezvous_plan(preset: Preset, job: str) -> RendezvousPlan | None:
    """The preset's rendezvous for job JOB; None for one-pod layouts."""
    if preset.layout != "multi-node":
        return None
    r = preset.rendezvous
    if r.backend == "static":
        return RendezvousPlan("static", None, None, None, None, None, None)
    # The rendezvous id only has to be the same on every pod of one submission and differ
    # from any other job that reaches the same store. The store lives in memory in the
    # agent on the endpoint's pod (<job>-master-0, or <job>-worker-0 when elastic), so each
    # submission starts from an empty one, and the endpoint is this job's own service: its
    # name is unique in the namespace while the job exists. A submission uid would add
    # nothing and cannot be rendered: the job's UID is known only after the API server
    # stores it, a pod cannot read it (the downward API has no ownerReferences), the
    # operator sets PET_RDZV_ID only from elasticPolicy.rdzvId, and a per-submission value
    # would make every render differ (diff, submit's "unchanged").
    return RendezvousPlan(
        RDZV_BACKEND,
        None if preset.elastic else RDZV_ENDPOINT,
        job,
        None if preset.elastic else r.max_restarts,
        r.join_timeout_seconds,
        r.read_timeout_seconds,
        r.last_call_timeout_seconds,
    )
