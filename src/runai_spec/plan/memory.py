"""Model state per GPU (weights, gradients, optimizer) for a strategy: the memory estimate."""

from ..load.profile import Profile
from ..records import Record
from .plan import Plan

BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


class MemoryEstimate(Record):
    """Model state per GPU (weights, gradients, optimizer), in GB (1e9 bytes)."""

    method: str
    shards: int
    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    capacity_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.grads_gb + self.optimizer_gb

    @property
    def share(self) -> float:
        return self.total_gb / self.capacity_gb

    def describe(self) -> str:
        return (
            f"{self.total_gb:.1f} GB per GPU (weights {self.weights_gb:.1f} + gradients "
            f"{self.grads_gb:.1f} + optimizer {self.optimizer_gb:.1f}, {self.method}) "
            f"of {self.capacity_gb:g} GB"
        )


def state_bytes(profile: Profile) -> tuple[float, float, float]:
    """Bytes per parameter for weights, gradients and optimizer state (activations excluded).

    Mixed precision keeps an fp32 master copy in the optimizer; Adam adds two fp32 moments,
    SGD one momentum buffer. bf16 + AdamW is the usual 2 + 2 + 12 = 16 bytes per parameter."""
    assert profile.model is not None
    value = BYTES_PER_VALUE[profile.model.precision]
    master = 4 if value < 4 else 0
    moments = 4 if profile.model.optimizer == "sgd" else 8
    return float(value), float(value), float(master + moments)


def memory_estimate(
    profile: Profile,
    plan: Plan,
    capacity_gb: float,
    strategy: str | None = None,
    zero_stage: int | None = None,
) -> MemoryEstimate | None:
    """Per-GPU model state for a strategy; None when the profile declares no model or the
    strategy's split (tensor, pipeline, hybrid degrees) is not known to the tool."""
    if profile.model is None:
        return None
    strategy = strategy or profile.strategy
    stage = profile.zero_stage if zero_stage is None else zero_stage
    # Elastic jobs may run on the fewest pods: size the shards for that worst case.
    shards = plan.procs_per_pod * (plan.elastic.min_pods if plan.elastic else plan.pods)
    params = profile.model.parameters / 1e9
    w, g, o = (params * b for b in state_bytes(profile))
    if strategy == "ddp" or (strategy == "deepspeed" and not stage):
        return MemoryEstimate("full replica per GPU (DDP)", 1, w, g, o, capacity_gb)
    if strategy == "fsdp" or (strategy == "deepspeed" and stage == 3):
        name = "FSDP full shard" if strategy == "fsdp" else "ZeRO-3"
        return MemoryEstimate(
            f"{name} over {shards} GPUs", shards, w / shards, g / shards, o / shards, capacity_gb
        )
    if strategy == "deepspeed" and stage == 1:
        return MemoryEstimate(f"ZeRO-1 over {shards} GPUs", shards, w, g, o / shards, capacity_gb)
    if strategy == "deepspeed" and stage == 2:
        return MemoryEstimate(f"ZeRO-2 over {shards} GPUs", shards, w, g / shards, o / shards, capacity_gb)
    return None
