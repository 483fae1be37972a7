"""A plain MPI + torch script, as a researcher writes one for an MPIJob: rank and world size from
OpenMPI's OMPI_COMM_WORLD_*, gloo over env:// (MASTER_ADDR, MASTER_PORT forwarded by mpirun),
resume from the checkpoint rank 0 saves after every step. Each rank's start goes to starts.log
beside the checkpoint too (mpirun's forwarded output may interleave ranks within a line)."""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint-dir", required=True)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--step-seconds", type=float, default=0.5)
args = parser.parse_args()
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
start = int(torch.load(checkpoint)["step"]) if checkpoint.exists() else 0
report = f"rank {rank} world {dist.get_world_size()} start {start}"
print(report, flush=True)
with (Path(args.checkpoint_dir) / "starts.log").open("a", encoding="utf-8") as starts:
    starts.write(report + "\n")  # one short append: whole, whatever the other ranks write
for step in range(start, args.steps):
    total = torch.ones(1)
    dist.all_reduce(total)
    assert int(total.item()) == world
    dist.barrier()
    if rank == 0:
        partial = checkpoint.with_suffix(".partial")
        torch.save({"step": step + 1}, partial)
        partial.rename(checkpoint)
        print(f"saved step {step + 1}", flush=True)
    time.sleep(args.step_seconds)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
