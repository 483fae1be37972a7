"""DeepSpeed over MPI as such scripts often start (issue 39 items 4, 5): under mpirun there is no
RANK or LOCAL_RANK (OpenMPI sets OMPI_COMM_WORLD_*), so deepspeed.init_distributed runs
mpi_discovery (through mpi4py), which sets MASTER_ADDR to rank 0's first `hostname -I` address
(DeepSpeed 0.19.8 deepspeed/comm/comm.py). With --fixed the script first sets RANK, WORLD_SIZE and
LOCAL_RANK from OMPI_COMM_WORLD_*, as docs/mpi.md advises: with those and the rendered MASTER_ADDR
and MASTER_PORT, init_distributed skips mpi_discovery."""

import argparse
import os
import sys

import deepspeed
import deepspeed.comm.torch  # noqa: F401 - the module, patched below by its sys.modules name
import torch
import torch.distributed as dist

# DeepSpeed's CPU accelerator compiles a shared-memory op (C++) at its first init_distributed, for
# minutes on a loaded CPU machine: not built here; it has no part in the address choice.
setattr(sys.modules["deepspeed.comm.torch"], "build_shm_op", lambda: None)  # noqa: B010 - deepspeed.comm.torch is torch

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
args = parser.parse_args()
if args.fixed:
    for name, mpi_name in (("RANK", "RANK"), ("WORLD_SIZE", "SIZE"), ("LOCAL_RANK", "LOCAL_RANK")):
        os.environ[name] = os.environ[f"OMPI_COMM_WORLD_{mpi_name}"]
deepspeed.init_distributed(dist_backend="gloo")
total = torch.ones(1)
dist.all_reduce(total)
assert int(total.item()) == dist.get_world_size() == int(os.environ["OMPI_COMM_WORLD_SIZE"])
print(f"rank {dist.get_rank()} master {os.environ['MASTER_ADDR']}", flush=True)
dist.barrier()
dist.destroy_process_group()
