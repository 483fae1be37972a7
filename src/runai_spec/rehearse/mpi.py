"""Rehearse a rendered MPIJob: the operator's hostfile and launcher env, real mpirun, the Job's back-off."""

# What the cluster does (mpi-operator v0.6.0 mpi_job_controller.go, facts/mpi.py) and what this
# machine does instead:
# - the hostfile is the operator's, byte for byte (`<pod>.<job>.<ns>.svc slots=N`, the launcher
#   first), at a local folder instead of /etc/mpi; the launcher's env is the operator's
#   (OMPI_MCA_orte_default_hostfile pointing there);
# - mpirun reaches each "pod" through its rsh agent, as it does over SSH, but the agent here
#   runs the command on this machine with a clean env (as sshd gives one: only what mpirun
#   forwards with -x reaches the ranks) instead of connecting to the pod's sshd; every pod's
#   hostname is therefore this machine's, and ranks talk over loopback TCP (btl self,tcp);
# - MASTER_ADDR (the launcher's name, resolved by the operator's DNS search path there) is
#   127.0.0.1, and each volume mount is a folder of the rehearsal's;
# - a lost rank ends mpirun (MPI has no re-rendezvous), and the launcher Job's back-off is a new
#   mpirun, at most run_policy.backoffLimit times, as the Job controller restarts the launcher.

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..facts import mpi
from ..plan.launcher.mpi import MASTER_ADDR, MASTER_PORT
from .argv import free_port

AGENT = """#!/bin/sh
# mpirun's rsh agent for the rehearsal: `agent [-o OPT]... HOST COMMAND...` runs COMMAND here
# with a clean env, as sshd would on HOST's pod.
while [ $# -gt 0 ]; do case "$1" in -o) shift 2;; -*) shift;; *) break;; esac; done
host=$1; shift
echo "$host $$" >> "$(dirname "$0")/agents"
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$*"
"""
ATTEMPT_MARK = "--- launcher attempt:"  # launcher.log's line before each mpirun (the Job's pod)
# Loopback for the out-of-band channel and the byte transfer layer (no pod network here);
# OpenMPI refuses root without these two (the rehearsal machine's user may be root).
LOCAL_MCA = {
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}


@dataclass
class Attempt:
    """One run of the launcher (the Job's pod): its mpirun's exit code, and the rank killed."""

    exit_code: int
    killed_rank: int | None = None
    timed_out: bool = False  # stopped at the rehearsal's deadline (no back-off follows)


@dataclass(frozen=True)
class Kill:
    """The MPI rank to SIGKILL, as soon as WHEN() is true (at once without it); AFTER runs once
    it is dead (before the launcher's back-off)."""

    rank: int
    when: Callable[[], bool] | None = None
    after: Callable[[], None] | None = None


@dataclass
class MpiRehearsal:
    hostfile: str
    argv: list[str]
    backoff_limit: int
    attempts: list[Attempt] = field(default_factory=list)
    output: str = ""

    @property
    def succeeded(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].exit_code == 0


@dataclass
class JobParts:
    name: str
    namespace: str
    slots: int
    workers: int
    launcher_as_worker: bool
    command: list[str]
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> volume name
    backoff_limit: int


def job_parts(job: Mapping[str, Any]) -> JobParts:
    """What the rehearsal reads from a rendered MPIJob."""
    if (job.get("apiVersion"), job.get("kind")) != (mpi.API_VERSION, mpi.KIND):
        raise InputError(f"not an MPIJob {mpi.API_VERSION}: {job.get('apiVersion')} {job.get('kind')}")
    spec = job["spec"]
    specs = spec["mpiReplicaSpecs"]
    (container,) = specs[mpi.LAUNCHER]["template"]["spec"]["containers"]
    return JobParts(
        job["metadata"]["name"],
        job["metadata"]["namespace"],
        int(spec.get("slotsPerWorker", mpi.DEFAULT_SLOTS_PER_WORKER)),
        int(specs.get(mpi.WORKER, {}).get("replicas", 0)),
        bool(spec.get("runLauncherAsWorker", False)),
        list(container["command"]),
        {e["name"]: e.get("value", "") for e in container.get("env", []) if "valueFrom" not in e},
        {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])},
        int(spec.get("runPolicy", {}).get("backoffLimit", 6)),
    )


def _local(text: str, mounts: Mapping[str, Path]) -> str:
    """TEXT with a container mount path at its start (or after `=`) made the rehearsal's folder."""
    for mount, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if text == mount or text.startswith(mount + "/"):
            return str(folder) + text[len(mount) :]
        key, eq, value = text.partition("=")
        if eq and (value == mount or value.startswith(mount + "/")):
            return f"{key}={folder}{value[len(mount) :]}"
    return text


MCA_FLAGS = ("--mca", "-mca")
MCA_PREFIX = "OMPI_MCA_"


def _local_transport(argv: Sequence[str]) -> list[str]:
    """ARGV with the value of each `--mca NAME VALUE` that LOCAL_MCA sets made the loopback
    one: mpirun's command line wins over its env, and a preset's `--mca btl ^openib` would
    keep the shared-memory transport on between the "pods" of this one host (MPI's own
    collectives, mpi4py's bcast, crashed in it)."""
    out = list(argv)
    for i in range(len(out) - 2):
        local = LOCAL_MCA.get(f"{MCA_PREFIX}{out[i + 1]}")
        if out[i] in MCA_FLAGS and local is not None:
            out[i + 2] = local
    return out


def _python(argv: Sequence[str]) -> list[str]:
    """The program's `python` is this interpreter (the image's, in the pod)."""
    return [sys.executable if a in ("python", "python3") else a for a in argv]


def _ranks_of(root: int) -> dict[int, int]:
    """{MPI rank: pid} of the processes under ROOT (mpirun) that MPI started."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    ranks: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks.setdefault(int(item.split(b"=", 1)[1]), pid)
    return ranks


def rehearse_mpi(
    job: Mapping[str, Any],
    workdir: Path,
    *,
    volumes: Mapping[str, Path] | None = None,
    kill: Kill | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
    extra_env: Mapping[str, str] | None = None,
    attempt_env: str | None = None,
) -> MpiRehearsal:
    """Run JOB's launcher command with real mpirun over the operator's hostfile; on failure run
    it again, as the launcher Job's back-off does, at most backoffLimit times. KILL: the MPI
    rank to SIGKILL once, in the first attempt (Kill). VOLUMES: a folder for a volume by name
    (else one under WORKDIR).
    EXTRA_ENV: the rehearsal's own variables in mpirun's env (what the command forwards with
    -x reaches the ranks); ATTEMPT_ENV, where given, is set to each attempt's index (0, 1...).
    At TIMEOUT the attempt is stopped (timed_out) and none follows."""
    parts = job_parts(job)
    etc = workdir / "etc-mpi"
    etc.mkdir(parents=True, exist_ok=True)
    hostfile = mpi.hostfile(parts.name, parts.namespace, parts.workers, parts.slots, parts.launcher_as_worker)
    (etc / mpi.HOSTFILE).write_text(hostfile, encoding="utf-8")
    agent = etc / "agent"
    agent.write_text(AGENT, encoding="utf-8")
    agent.chmod(0o755)
    mounts = {m: (volumes or {}).get(v, workdir / "volumes" / v) for m, v in parts.mounts.items()}
    for folder in mounts.values():
        folder.mkdir(parents=True, exist_ok=True)
    env = {k: _local(v, mounts) for k, v in parts.env.items()}
    for key, value in mpi.launcher_env(parts.slots, parts.launcher_as_worker):
        env[key] = value.replace(mpi.CONFIG_MOUNT, str(etc))
    env |= {MASTER_ADDR: "127.0.0.1", MASTER_PORT: str(free_port()), **LOCAL_MCA}
    env["OMPI_MCA_plm_rsh_agent"] = str(agent)
    env |= {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    env |= dict(extra_env or {})
    argv = _local_transport(_python([_local(a, mounts) for a in parts.command]))
    result = MpiRehearsal(hostfile, argv, parts.backoff_limit)
    deadline = time.monotonic() + timeout
    with (workdir / "launcher.log").open("w+", encoding="utf-8") as log:
        for _ in range(parts.backoff_limit + 1):
            if attempt_env is not None:
                env[attempt_env] = str(len(result.attempts))
            attempt = _attempt(argv, env, cwd or workdir, log, None if result.attempts else kill, deadline)
            result.attempts.append(attempt)
            if attempt.killed_rank is not None and kill is not None and kill.after is not None:
                kill.after()
            if attempt.exit_code == 0 or attempt.timed_out:
                break
        log.seek(0)
        result.output = log.read()
    return result


def _attempt(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    log: Any,
    kill: Kill | None,
    deadline: float,
) -> Attempt:
    """One launcher pod: mpirun until it exits (killed at DEADLINE); KILL: the rank to kill."""
    kill_rank, kill_when = (kill.rank, kill.when) if kill is not None else (None, None)
    log.write(f"{ATTEMPT_MARK} {' '.join(argv)}\n")
    log.flush()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    killed = None
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                log.write("--- rehearsal: stopped at the timeout\n")
                return Attempt(proc.returncode, killed, timed_out=True)
            if kill_rank is not None and killed is None and (kill_when is None or kill_when()):
                pid = _ranks_of(proc.pid).get(kill_rank)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed = kill_rank
                    log.write(f"--- rehearsal: SIGKILL rank {kill_rank} (pid {pid})\n")
                    log.flush()
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Attempt(proc.returncode, killed)
