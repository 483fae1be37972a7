"""FSDP2 + DCP as the guide recommends: saves every EVERY steps into <CKPT>/step-<k>, resumes
from the latest complete one (a folder with DCP's .metadata); CPU and gloo are enough."""

import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

CKPT = os.environ.get("CKPT", "/checkpoints")
STEPS, EVERY = 8, 2
LOCAL = int(os.environ.get("LOCAL_BATCH", "8"))  # 4 local x 2 accumulation


def latest_complete() -> str | None:
    if not os.path.isdir(CKPT):
        return None
    done = [
        d
        for d in os.listdir(CKPT)
        if d.startswith("step-") and os.path.exists(os.path.join(CKPT, d, ".metadata"))
    ]
    return max(done, key=lambda d: int(d.split("-")[1]), default=None)


dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
step = 0
found = latest_complete()
if found is not None:
    msd, osd = get_state_dict(model, optim)
    state: dict[str, Any] = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(CKPT, found))  # type: ignore[attr-defined]
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    step = int(found.split("-")[1])
while step < STEPS:
    loss = model(torch.randn(LOCAL, 16)).pow(2).mean()
    loss.backward()
    optim.step()
    optim.zero_grad()
    step += 1
    if step % EVERY == 0:
        msd, osd = get_state_dict(model, optim)
        # dcp.save as the guide writes it (torch re-exports it without __all__)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(CKPT, f"step-{step}"))  # type: ignore[attr-defined]
    time.sleep(0.2)
dist.destroy_process_group()
