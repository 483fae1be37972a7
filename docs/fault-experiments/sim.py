"""Kubelet + training-operator model for fault experiments on one machine (loopback).

Each "pod" is one torchrun agent process in its own session (= container). When it
exits non-zero, the whole process group is killed (container teardown), then:
  OnFailure/Always: kubelet restarts ONLY that container, in place, after the kubelet
    back-off (first, 2x, 4x ... capped 300 s; all times multiplied by --scale);
    restartCount summed over pods >= backoffLimit => operator marks job Failed.
  ExitCode: pod is 'Never'; exit code >= 128 => operator deletes+recreates the pod
    (after --recreate-delay); 1..127 => job Failed.
  Never: any failure => job Failed.
--resubmit N: after a Failed job, resubmit a fresh job (all pods new) up to N times
(the fail-fast + resubmit candidate). Faults: --kill POD (after first checkpoint or
@SECONDS), --preempt (SIGTERM all, grace, SIGKILL, operator recreates all pods).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid


def container_pids(cid):
    """All processes of one "container" (like its cgroup): env marker SIM_CONTAINER_ID."""
    out = []
    mark = f"SIM_CONTAINER_ID={cid}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            pass
    return out

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = ".venv/bin/torchrun"


def free_port():
    s = socket.socket()
    s.bind(("", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--launcher", choices=["static", "c10d", "elastic"], required=True)
    ap.add_argument("--pods", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--nnodes", default=None, help="elastic min:max (default 2:pods)")
    ap.add_argument("--policy", choices=["OnFailure", "Always", "ExitCode", "Never"], default="OnFailure")
    ap.add_argument("--backoff-limit", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.1, help="kubelet back-off scale")
    ap.add_argument("--first-backoff", type=float, default=10.0, help="unscaled first back-off s")
    ap.add_argument("--recreate-delay", type=float, default=2.0, help="ExitCode/preempt pod recreate delay s")
    ap.add_argument("--grace", type=float, default=3.0, help="terminationGracePeriodSeconds (scaled already)")
    ap.add_argument("--max-restarts", type=int, default=3)
    ap.add_argument("--rdzv-conf", default="join_timeout=120,read_timeout=120")
    ap.add_argument("--kill", action="append", default=[], help="POD[@SECONDS]")
    ap.add_argument("--preempt", default=None, help="'checkpoint' or SECONDS")
    ap.add_argument("--busy", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--step-sleep", type=float, default=0.2)
    ap.add_argument("--pg-timeout", type=float, default=30)
    ap.add_argument("--resubmit", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--env", action="append", default=[], help="K=V added to every pod")
    a = ap.parse_args()

    run = os.path.join(HERE, "runs", a.name)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    evfile = os.path.join(run, "events.jsonl")
    open(evfile, "w").close()
    logf = open(os.path.join(run, "sim.log"), "w")
    t0 = time.time()

    def log(msg):
        line = f"[{time.time() - t0:7.2f}] {msg}"
        logf.write(line + "\n")
        logf.flush()
        print(line, flush=True)

    port = free_port()
    if a.launcher == "elastic":
        names = [f"worker-{i}" for i in range(a.pods)]
    else:
        names = ["master-0"] + [f"worker-{i}" for i in range(a.pods - 1)]
    nnodes = a.nnodes or (f"2:{a.pods}" if a.launcher == "elastic" else str(a.pods))

    def pod_env(i, name):
        e = dict(os.environ)
        e.update(PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo", POD_NAME=name,
                 CKPT_DIR=run, STEPS=str(a.steps), CKPT_EVERY=str(a.every),
                 STEP_SLEEP=str(a.step_sleep), BUSY_AFTER_CKPT=str(a.busy),
                 PG_TIMEOUT=str(a.pg_timeout), OMP_NUM_THREADS="1",
                 PET_NPROC_PER_NODE=str(a.nproc), PET_NNODES=nnodes)
        e.update(dict(kv.split("=", 1) for kv in a.env))
        if a.launcher == "elastic":
            # operator v1.9 worker-only elastic: no MASTER_*, RANK, WORLD_SIZE, PET_NODE_RANK
            e.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"127.0.0.1:{port}",
                     PET_RDZV_ID=a.name, PET_MAX_RESTARTS=str(a.max_restarts))
            for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
                e.pop(k, None)
        else:
            e.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                     WORLD_SIZE=str(a.pods * a.nproc), RANK=str(i),
                     PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(port),
                     PET_NODE_RANK=str(i))
        return e

    def pod_cmd(i, name):
        c = [TORCHRUN]
        # is_host: on loopback every agent "matches" the endpoint host; in the cluster
        # only the pod whose hostname is the endpoint host does. Model that explicitly.
        is_host = "1" if i == 0 else "0"
        if a.launcher == "c10d":
            c += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                  f"--rdzv-id={a.name}", f"--max-restarts={a.max_restarts}",
                  f"--rdzv-conf={a.rdzv_conf},is_host={is_host}"]
        elif a.launcher == "elastic":
            c += [f"--rdzv-conf={a.rdzv_conf},is_host={is_host}"]
        c += [os.path.join(HERE, "train.py")]
        return c

    class Pod:
        def __init__(self, i, name):
            self.i, self.name = i, name
            self.proc = None
            self.restarts = 0      # container restartCount (this pod object)
            self.fails = 0
            self.state = "pending"
            self.start_at = time.time()
            self.out = open(os.path.join(run, f"{name}.log"), "a")

        def start(self):
            self.out.write(f"===== container start t={time.time() - t0:.2f} restartCount={self.restarts}\n")
            self.out.flush()
            self.cid = uuid.uuid4().hex
            env = pod_env(self.i, self.name)
            env["SIM_CONTAINER_ID"] = self.cid
            self.proc = subprocess.Popen(pod_cmd(self.i, self.name), env=env,
                                         stdout=self.out, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=run)
            self.state = "running"
            log(f"{self.name}: container started (restartCount={self.restarts}) pid={self.proc.pid}")

        def killpg(self, sig=signal.SIGKILL, main_only=False):
            """SIGKILL: every process of the container. SIGTERM: PID 1 only (the kubelet
            signals the container's main process; torchrun forwards it to its workers)."""
            if self.proc is None:
                return
            pids = [self.proc.pid] if main_only else container_pids(self.cid)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

        def teardown(self):
            self.killpg()
            if self.proc is not None:
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            self.proc = None

    stats = {"kubelet_restarts": 0, "recreations": 0, "resubmits": 0}
    pods = []

    def submit():
        pods.clear()
        for i, n in enumerate(names):
            p = Pod(i, n)
            pods.append(p)
            p.start()

    def stop_all(why):
        log(f"stopping all pods: {why}")
        for p in pods:
            p.teardown()
            p.state = "deleted"

    def backoff(k):
        return min(a.first_backoff * (2 ** (k - 1)), 300.0) * a.scale

    def events():
        out = []
        with open(evfile) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    kills = []
    for k in a.kill:
        pod, _, when = k.partition("@")
        kills.append({"pod": pod, "when": when or "checkpoint", "done": False})
    pre = {"when": a.preempt, "done": a.preempt is None}
    faults = []  # (t, desc, saved_step)

    def trigger(when):
        evs = events()
        if when == "checkpoint":
            return any(e["ev"] == "ckpt" for e in evs)
        return time.time() - t0 >= float(when)

    def saved():
        cks = [e for e in events() if e["ev"] == "ckpt"]
        return cks[-1]["step"] if cks else 0

    outcome = None
    submit()
    deadline = t0 + a.timeout
    while outcome is None:
        if time.time() > deadline:
            outcome = "TIMEOUT"
            stop_all("timeout")
            break
        time.sleep(0.1)
        for k in kills:
            if not k["done"] and trigger(k["when"]):
                k["done"] = True
                p = next(p for p in pods if p.name == k["pod"])
                faults.append((time.time(), f"kill {p.name}", saved()))
                log(f"FAULT: SIGKILL process group of {p.name}")
                p.killpg()
        if not pre["done"] and trigger(pre["when"]):
            pre["done"] = True
            faults.append((time.time(), "preempt", saved()))
            log("FAULT: preemption: SIGTERM all pods")
            for p in pods:
                p.killpg(signal.SIGTERM, main_only=True)
            end = time.time() + a.grace
            while time.time() < end and any(p.proc and p.proc.poll() is None for p in pods):
                time.sleep(0.1)
            for p in pods:
                rc = p.proc.poll() if p.proc else None
                log(f"{p.name}: deleted (exit {rc} before SIGKILL)")
                p.teardown()
            time.sleep(a.recreate_delay)
            log("operator recreates all pods (new pods, restartCount 0)")
            stats["recreations"] += len(pods)
            submit()
            continue
        for p in pods:
            if p.state == "running" and p.proc.poll() is not None:
                rc = p.proc.returncode
                rc = 128 - rc if rc < 0 else rc
                p.teardown()
                log(f"{p.name}: container exited rc={rc}")
                if rc == 0:
                    p.state = "succeeded"
                    continue
                p.fails += 1
                if a.policy in ("OnFailure", "Always"):
                    p.state = "backoff"
                    p.start_at = time.time() + backoff(p.fails)
                    log(f"{p.name}: CrashLoopBackOff {backoff(p.fails):.1f}s")
                elif a.policy == "ExitCode" and rc >= 128:
                    p.state = "recreate"
                    p.start_at = time.time() + a.recreate_delay
                    log(f"{p.name}: retryable exit {rc}: operator deletes and recreates the pod")
                else:
                    p.state = "failed"
                    log(f"{p.name}: {'permanent' if a.policy == 'ExitCode' else 'Never'}: job Failed")
            if p.state in ("backoff", "recreate") and time.time() >= p.start_at:
                if p.state == "backoff":
                    p.restarts += 1
                    stats["kubelet_restarts"] += 1
                    total = sum(q.restarts for q in pods)
                    log(f"{p.name}: kubelet restarts container in place; restarts summed={total}/{a.backoff_limit}")
                    if total >= a.backoff_limit:
                        p.state = "failed"
                        log("operator: backoffLimit reached: job Failed")
                        continue
                else:
                    stats["recreations"] += 1
                    p.restarts = 0
                p.start()
        # job status (operator v1.9): with Master, success = master succeeded;
        # elastic worker-only: success once any worker succeeded.
        if any(p.state == "failed" for p in pods):
            stop_all("job Failed")
            if stats["resubmits"] < a.resubmit:
                stats["resubmits"] += 1
                time.sleep(a.recreate_delay)
                log(f"RESUBMIT #{stats['resubmits']} (fresh job, same checkpoint dir)")
                submit()
                continue
            outcome = "FAILED"
        elif (a.launcher != "elastic" and pods[0].state == "succeeded") or \
             (a.launcher == "elastic" and any(p.state == "succeeded" for p in pods)):
            time.sleep(1)
            outcome = "SUCCEEDED"
            stop_all("job Succeeded")

    # --- analysis
    evs = events()
    res = {"name": a.name, "outcome": outcome, **stats, "wall_s": round(time.time() - t0, 1),
           "restarts_per_pod": {p.name: p.restarts for p in pods}}
    if faults:
        ft, desc, sv = faults[0]
        res["fault"] = desc
        res["saved_step_at_fault"] = sv
        ckh = {e["step"]: e["hash"] for e in evs if e["ev"] == "ckpt"}
        after = [e for e in evs if e["t"] > ft]
        resumes = [e for e in after if e["ev"] == "resume"]
        prog = [e for e in after if (e["ev"] == "ckpt" and e["step"] > sv) or e["ev"] == "done"]
        res["recover_s"] = round(prog[0]["t"] - ft, 1) if prog else None
        bad = [e for e in resumes if e["step"] != sv and e["step"] not in ckh or
               (e["step"] in ckh and e["hash"] != ckh[e["step"]]) or e["step"] < sv]
        res["resumes_after_fault"] = len(resumes)
        res["resume_steps"] = sorted({e["step"] for e in resumes})
        res["resume_ok"] = bool(resumes) and not bad
    dones = [e for e in evs if e["ev"] == "done"]
    res["done_ranks"] = len(dones)
    res["final_hash_equal"] = len({e["hash"] for e in dones}) == 1 if dones else None
    log("RESULT " + json.dumps(res))
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
