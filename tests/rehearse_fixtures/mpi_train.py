"""A plain MPI + torch training script, as a researcher writes one for an MPIJob (issue 39 item 4):
rank and world from OpenMPI's OMPI_COMM_WORLD_*, gloo over env:// (MASTER_ADDR and MASTER_PORT,
which the render forwards with -x), DDP over a DataLoader of the profile's local batch with
gradient accumulation, rank 0 saving {step, model, optimizer} with torch.save after every
optimizer step (a temporary file, then a rename), every rank resuming from it."""

import argparse
import contextlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", required=True)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--local-batch", type=int, default=4)
parser.add_argument("--grad-accum", type=int, default=8)
args = parser.parse_args()
rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
start = 0
if checkpoint.exists():
    state = torch.load(checkpoint)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = int(state["step"])
data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=args.local_batch, sampler=DistributedSampler(data, world, rank))
batches = iter(loader)
for step in range(start, args.steps):
    for micro in range(args.grad_accum):
        x, y = next(batches)
        last = micro == args.grad_accum - 1
        with contextlib.nullcontext() if last else model.no_sync():
            (torch.nn.functional.mse_loss(model(x), y) / args.grad_accum).backward()
    optimizer.step()
    optimizer.zero_grad()
    if rank == 0:
        partial = checkpoint.with_suffix(".partial")
        torch.save(
            {"step": step + 1, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
            partial,
        )
        partial.rename(checkpoint)
    dist.barrier()
dist.destroy_process_group()
