"""Tiny DDP training script for the fault experiments.

Checkpoints (rank 0, atomic rename) to $CKPT_DIR/ckpt.pt every $CKPT_EVERY steps,
resumes from it on start, and appends JSON events to $CKPT_DIR/events.jsonl.
$BUSY_AFTER_CKPT: rank 0 sleeps that many seconds right after the job's first
checkpoint (once per job, marker file), to model a long save/eval on rank 0.
"""

import hashlib
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

D = os.environ["CKPT_DIR"]
STEPS = int(os.environ.get("STEPS", "30"))
EVERY = int(os.environ.get("CKPT_EVERY", "5"))
SLEEP = float(os.environ.get("STEP_SLEEP", "0.2"))
BUSY = float(os.environ.get("BUSY_AFTER_CKPT", "0"))
POD = os.environ.get("POD_NAME", "?")
RANK = int(os.environ["RANK"])
WS = int(os.environ["WORLD_SIZE"])


def ev(kind, **kw):
    rec = {"t": time.time(), "ev": kind, "pod": POD, "rank": RANK, "ws": WS,
           "pid": os.getpid(), "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"), **kw}
    with open(os.path.join(D, "events.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


def h(model):
    m = hashlib.sha256()
    for p in model.state_dict().values():
        m.update(repr(p.detach().cpu().flatten().double().tolist()).encode())
    return m.hexdigest()[:12]


stop = {"flag": False}


def on_term(signum, frame):
    stop["flag"] = True


signal.signal(signal.SIGTERM, on_term)

dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "30"))))
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = 0
path = os.path.join(D, "ckpt.pt")
if os.path.exists(path):
    ck = torch.load(path, map_location="cpu")
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    start = ck["step"]
ev("resume", step=start, hash=h(model))
ddp = DDP(model)
for step in range(start, STEPS):
    time.sleep(SLEEP)
    g = torch.Generator().manual_seed(step * 1000 + RANK)
    x = torch.randn(4, 8, generator=g)
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    done = step + 1
    if done % EVERY == 0 and RANK == 0:
        tmp = path + ".tmp"
        torch.save({"step": done, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
        os.replace(tmp, path)
        ev("ckpt", step=done, hash=h(model))
        marker = os.path.join(D, "busy.done")
        if BUSY > 0 and not os.path.exists(marker):
            open(marker, "w").close()
            ev("busy", secs=BUSY)
            time.sleep(BUSY)
            ev("busy_end")
    if stop["flag"]:
        ev("sigterm_exit", step=done)
        sys.exit(143)
ev("done", step=STEPS, hash=h(model))
dist.destroy_process_group()
