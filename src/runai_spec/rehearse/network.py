"""The pods' network in the rehearsal: a namespace, an address and a hostname per pod.

The job's service names resolve only while that pod's container runs, as in the cluster; where
the machine does not allow namespaces, this machine's loopback (argv.py's `_on_loopback`).

What this models (facts from the sources named):
- training-operator v1.9 `pkg/controller.v1/common/service.go` `CreateNewService`: one Service
  per replica pod, `ClusterIP: None` (headless), named `GenGeneralName(job, rtype, index)`
  (`<job>-master-0`, `<job>-worker-N`, the pod's own name), selecting that one pod by its
  replica-type and replica-index labels, `publishNotReadyAddresses` not set.
- Kubernetes v1.30 `pkg/controller/endpointslice` (via `endpointslice/util` `ShouldPodBeInEndpoints`
  and `podutil.IsPodReady`): without `publishNotReadyAddresses` a headless service publishes
  only the addresses of Ready pods, so cluster DNS answers for `<job>-worker-0` only while that
  pod is Ready. The rendered PyTorch containers have no readiness probe: a pod is Ready while
  its container runs, and not Ready from the moment it exits (a crash, a kill, the kubelet's
  back-off before the restart) until it runs again.
- Kubernetes v1.30 `pkg/kubelet/kubelet_pods.go` (`GeneratePodHostNameAndDomain`,
  `managedHostsFileContent`): the pod's hostname is its name (the operator sets no
  `spec.hostname`), and the kubelet-managed /etc/hosts maps that name to the pod's own IP.
- iproute2 `ip/ipnetns.c` (`ip netns exec`, v6.1): joins the namespace, then in a mount
  namespace of its own mounts a sysfs of that namespace on /sys and bind-mounts each file of
  `/etc/netns/NAME/` over the one of the same name in /etc, and execs the command (no fork:
  the pod's pid stays the container's main process). The pods start the same way, but
  nothing is written outside the rehearsal's folder (issue 23): no `ip netns add` (a mount
  at /run/netns/NAME), no /etc/netns/NAME; each namespace is held by a process of its own
  (`unshare --net`, until its stdin closes: this process's exit, even a kill), the pods join
  it with `nsenter --net=/proc/PID/ns/net`, and their hosts files are bind-mounted from
  `<rehearsal>/network/<pod>/` inside the pod's own mount namespace.

Here: one namespace holds a bridge, each pod's namespace a veth on it with one address of a
private /24, its own UTS namespace with the pod name as hostname, and its own hosts file: its
own name always, every other pod's service name only while some process runs in that pod's
namespace (a watcher thread rewrites the files in place: the bind mounts keep the inode).
Cluster DNS has no stand-in: any other name fails at once (no route, no server).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InputError

MODES = ("auto", "netns", "loopback")
NETWORK_DIR = "network"  # under the rehearsal's folder: each pod's hosts and resolv.conf
SUBNET_BASE = "10.233"
WATCH_EVERY_S = 0.05
# What `ip netns exec` does after joining the namespace (its sysfs on /sys, read-only where
# this one is; the pod's files over /etc's), in the pod's mount namespace only (unshare
# --mount: private propagation), then the pod's hostname (UTS namespace) and HOSTNAME as the
# container runtime sets them. $0 the hostname, $1 the pod's folder.
_POD_SH = (
    'set -e; d="$1"; shift; umount -l /sys 2>/dev/null || :; '
    "mount -t sysfs sysfs /sys 2>/dev/null || mount -t sysfs -o ro sysfs /sys; "
    'mount --bind "$d/hosts" /etc/hosts; '
    'if [ -e /etc/resolv.conf ]; then mount --bind "$d/resolv.conf" /etc/resolv.conf; fi; '
    'echo "$0" > /proc/sys/kernel/hostname; export HOSTNAME="$0"; exec "$@"'
)
# the holder of a namespace: says it is in, then waits for its stdin to close
_HOLD = ("unshare", "--net", "--", "sh", "-c", "echo in; read -r _ || :")
_RESOLV = (
    "# runai-spec rehearse: no cluster DNS here; the job's names are in /etc/hosts\n"
    "options timeout:1 attempts:1\n"
)


@dataclass(frozen=True)
class PodNet:
    short: str  # master-0, worker-0, ...
    hostname: str  # the pod's name, which is also its headless service's name
    folder: str  # <rehearsal>/network/<short>: its hosts and resolv.conf
    address: str


@dataclass(frozen=True)
class NetPlan:
    """Every name, address and file of one rehearsal's network, and (once `Network` holds
    them) the pid of the process that holds each pod's namespace."""

    subnet: str  # e.g. 10.233.57.0/24
    folder: str  # <rehearsal>/network
    pods: tuple[PodNet, ...]
    holders: Mapping[str, int] = field(default_factory=dict)  # short -> pid, while set up

    def pod(self, short: str) -> PodNet:
        return next(p for p in self.pods if p.short == short)

    def wrapper(self, short: str) -> tuple[str, ...]:
        """The argv prefix that starts a pod's container in its namespaces (the network set up:
        `Network.plan`)."""
        pod = self.pod(short)
        if short not in self.holders:
            raise RuntimeError(f"the network of pod {short} is not set up")
        return (
            "nsenter",
            f"--net=/proc/{self.holders[short]}/ns/net",
            "unshare",
            "--uts",
            "--mount",
            "--",
            "sh",
            "-c",
            _POD_SH,
            pod.hostname,
            pod.folder,
        )

    def slot_width(self) -> int:
        return max(max(len(_line(p)), len(_absent(p))) for p in self.pods)

    def hosts_text(self, short: str, running: set[str] | frozenset[str]) -> str:
        """Pod `short`'s /etc/hosts while the pods in `running` run: the kubelet's lines, its
        own name, then one fixed-width slot per other pod (its address and name while it
        runs, a comment while not), so every version of the file has the same length."""
        own = self.pod(short)
        width = self.slot_width()
        lines = [
            "# Kubernetes-managed hosts file (the kubelet's), as runai-spec rehearse writes it",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            _line(own),
            "# the job's headless services: a pod's name resolves only while it runs",
        ]
        for p in self.pods:
            if p.short != short:
                lines.append((_line(p) if p.short in running else _absent(p)).ljust(width))
        return "\n".join(lines) + "\n"


def _line(p: PodNet) -> str:
    return f"{p.address}\t{p.hostname}"


def _absent(p: PodNet) -> str:
    return f"# {p.hostname}: not ready"


def host_routes() -> list[ipaddress.IPv4Network]:
    """This machine's IPv4 routes (/proc/net/route: little-endian hex destination and mask)."""
    out: list[ipaddress.IPv4Network] = []
    with contextlib.suppress(OSError):
        for row in Path("/proc/net/route").read_text().splitlines()[1:]:
            cols = row.split()
            with contextlib.suppress(ValueError, IndexError):
                dest = ipaddress.IPv4Address(int(cols[1], 16).to_bytes(4, "little"))
                mask = ipaddress.IPv4Address(int(cols[7], 16).to_bytes(4, "little"))
                net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
                if net.prefixlen:  # the default route overlaps everything: not a collision
                    out.append(net)
    return out


def pick_subnet(routes: Sequence[ipaddress.IPv4Network], seed: int) -> ipaddress.IPv4Network:
    """A /24 of 10.233.0.0/16 that no route of this machine covers or lies in, picked from
    `seed` (the pid), so that parallel rehearsals' logs do not show the same addresses."""
    for k in range(256):
        net = ipaddress.IPv4Network(f"{SUBNET_BASE}.{(seed + k) % 256}.0/24")
        if not any(net.overlaps(r) for r in routes):
            return net
    raise InputError(
        f"every /24 of {SUBNET_BASE}.0.0/16 is routed on this machine",
        field="--network",
        hint="--network loopback runs the pods on loopback",
    )


def plan_network(
    job_name: str,
    shorts: Sequence[str],
    *,
    folder: Path,
    pid: int | None = None,
    routes: Sequence[ipaddress.IPv4Network] | None = None,
) -> NetPlan:
    """Names and addresses for the pods `shorts` of job `job_name`, their files under
    `folder` (the rehearsal's own): addresses .2, .3, ... of a free /24."""
    pid = os.getpid() if pid is None else pid
    net = pick_subnet(host_routes() if routes is None else routes, pid)
    if len(shorts) > net.num_addresses - 3:
        raise InputError(
            f"{len(shorts)} pods do not fit in one /24",
            field="--network",
            hint="--network loopback runs them on loopback",
        )
    hosts = list(net.hosts())
    pods = tuple(
        PodNet(s, f"{job_name}-{s}", str(folder / s), str(hosts[i + 1])) for i, s in enumerate(shorts)
    )
    return NetPlan(str(net), str(folder), pods)


def unavailable() -> str | None:
    """Why the pods cannot have network namespaces here, or None when they can."""
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (iproute2 / util-linux)"
    if not Path("/etc/hosts").is_file():
        return "no /etc/hosts (each pod's hosts file is mounted over it)"
    try:
        # what a pod's start does, in namespaces that vanish with it
        done = subprocess.run(
            ["unshare", "--net", "--uts", "--mount", "--", "mount", "--bind", "/etc/hosts", "/etc/hosts"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0:
        return "unshare --net --uts --mount failed: " + (
            done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        )
    return None


def resolve_mode(mode: str) -> str:
    """`netns` or `loopback` for `--network MODE`: auto takes netns where it is available;
    netns where it is not is bad input, before anything starts."""
    if mode not in MODES:
        raise InputError(
            f"{mode!r} is not one of {', '.join(MODES)}",
            field="--network",
            hint="--network auto (the default) uses network namespaces where "
            "this machine allows them, else loopback",
        )
    if mode == "loopback":
        return mode
    why = unavailable()
    if why is None:
        return "netns"
    if mode == "netns":
        raise InputError(
            f"network namespaces are not available here: {why}",
            field="--network",
            hint="run as root on Linux with iproute2 (`ip`) "
            "and util-linux (`unshare`), or use --network loopback",
        )
    return "loopback"


# NCCL (src/misc/utils.cc getHostHash) takes two ranks for one host when their hostnames (or
# NCCL_HOSTID) match: with a hostname per pod, NCCL would carry every byte between pods over
# the namespaces' veth bridge (its socket transport), and the bus bandwidth row would measure
# that, not this machine's NVLink as on loopback nor the cluster's fabric
AUTO_ON_GPU = (
    "auto keeps loopback with GPUs: in namespaces of their own, with a hostname "
    "each, NCCL would take the pods for separate hosts and send their traffic over "
    "the namespaces' bridge (--network netns does that on purpose)"
)


def auto_on_gpu(network: str, mode: str, gpus: int) -> tuple[str, str | None]:
    """The mode that runs once the GPUs are known, and why auto changed it (else None)."""
    if network == "auto" and mode == "netns" and gpus:
        return "loopback", AUTO_ON_GPU
    return mode, None


def _ip(holder: int, *args: str) -> None:
    """`ip ARGS` in the network namespace that process `holder` holds."""
    done = subprocess.run(
        ["nsenter", f"--net=/proc/{holder}/ns/net", "ip", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise InputError(
            f"`ip {' '.join(args)}` failed: {done.stderr.strip()}",
            field="--network",
            hint="--network loopback runs the pods on loopback",
        )


def _ns_ids() -> dict[int, str]:
    """{pid: its network namespace's id (`net:[inode]`)} of every process readable here."""
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out[int(entry.name)] = os.readlink(entry / "ns" / "net")
    return out


def _fresh_folder(path: Path) -> None:
    """PATH as a new empty folder: whatever was there (a former rehearsal's) removed, a link
    unlinked, never followed."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


class Network:
    """The namespaces, links and hosts files of one `NetPlan`, set up on entry and removed on
    exit (also after an error or Ctrl-C); while inside, a thread keeps every pod's hosts file
    in step with which pods run. Everything it writes is under the plan's folder."""

    def __init__(self, plan: NetPlan, log: Path | None = None) -> None:
        self.plan = plan  # with the holders' pids once set up
        self.log = log  # where __exit__ writes when each pod's name resolved and stopped to
        self._holders: list[subprocess.Popen[bytes]] = []
        self._ids: dict[str, str] = {}  # short -> net:[inode] of its namespace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.running: frozenset[str] = frozenset()
        self.changes: list[tuple[float, str, bool]] = []  # (monotonic, pod, now running)

    def __enter__(self) -> Network:
        try:
            self._setup()
        except BaseException:
            self._teardown()
            raise
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._teardown()
        if self.log is not None and self.changes:
            start = self.changes[0][0]
            self.log.write_text(
                "".join(
                    f"{t - start:8.2f} s  {self.plan.pod(s).hostname} "
                    f"{'resolves (container running)' if up else 'gone (not ready)'}\n"
                    for t, s, up in self.changes
                )
            )

    def _hold(self) -> int:
        """A new network namespace, held by a process of its own: its pid."""
        proc = subprocess.Popen(_HOLD, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._holders.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline() != b"in\n":
            proc.wait(10)
            why = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise InputError(
                f"`unshare --net` failed: {why or f'exit {proc.returncode}'}",
                field="--network",
                hint="--network loopback runs the pods on loopback",
            )
        return proc.pid

    def _setup(self) -> None:
        plan = self.plan
        prefix = ipaddress.IPv4Network(plan.subnet).prefixlen
        _fresh_folder(Path(plan.folder))
        bridge = self._hold()
        _ip(bridge, "link", "add", "br0", "type", "bridge")
        _ip(bridge, "link", "set", "br0", "up")
        holders: dict[str, int] = {}
        for i, pod in enumerate(plan.pods):
            holders[pod.short] = held = self._hold()
            # both ends live in the rehearsal's namespaces: nothing is added to this machine's
            _ip(bridge, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", str(held))
            _ip(bridge, "link", "set", f"p{i}", "master", "br0", "up")
            _ip(held, "addr", "add", f"{pod.address}/{prefix}", "dev", "eth0")
            _ip(held, "link", "set", "eth0", "up")
            _ip(held, "link", "set", "lo", "up")
            folder = Path(pod.folder)
            folder.mkdir()
            (folder / "hosts").write_text(plan.hosts_text(pod.short, frozenset()))
            (folder / "resolv.conf").write_text(_RESOLV)
            self._ids[pod.short] = os.readlink(f"/proc/{held}/ns/net")
        self.plan = replace(plan, holders=holders)

    def _write_hosts(self, running: frozenset[str]) -> None:
        for pod in self.plan.pods:
            data = self.plan.hosts_text(pod.short, running).encode()
            # in place, same length: the bind mount in each pod keeps this inode
            with contextlib.suppress(OSError):
                fd = os.open(Path(pod.folder) / "hosts", os.O_WRONLY | os.O_NOFOLLOW)
                try:
                    os.pwrite(fd, data, 0)
                finally:
                    os.close(fd)

    def _running_now(self) -> frozenset[str]:
        held = {p.pid for p in self._holders}
        ids = {nid for pid, nid in _ns_ids().items() if pid not in held}
        return frozenset(s for s, nid in self._ids.items() if nid in ids)

    def refresh(self) -> frozenset[str]:
        """Bring every hosts file in step with the pods running now; returns those pods."""
        now = self._running_now()
        if now != self.running:
            stamp = time.monotonic()
            self.changes += [(stamp, s, s in now) for s in sorted(now ^ self.running)]
            self._write_hosts(now)
            self.running = now
        return now

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(WATCH_EVERY_S)

    def _teardown(self) -> None:
        # a process still in a pod's namespace would keep it (and its veth) alive unseen
        ours = set(self._ids.values())
        held = {p.pid for p in self._holders}
        leftover = [pid for pid, nid in _ns_ids().items() if nid in ours and pid not in held]
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # the last process of each namespace gone: the kernel removes it, its links with it
        for proc in self._holders:
            with contextlib.suppress(OSError):
                _close(proc)
        self._holders.clear()


def _close(proc: subprocess.Popen[Any]) -> None:
    """A holder told to go (its stdin closed), killed if it lingers, and reaped."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def pod_network(plan: NetPlan | None, log: Path | None = None) -> Iterator[Network | None]:
    """`Network(plan, log)` around the block, or nothing for loopback (plan None)."""
    if plan is None:
        yield None
        return
    with Network(plan, log) as net:
        yield net
