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
- iproute2 `ip/ipnetns.c` (`ip netns exec`): joins the named namespace, then bind-mounts each
  file of `/etc/netns/NAME/` over the one of the same name in /etc, in a mount namespace of
  its own, and execs the command (no fork: the pod's pid stays the container's main process).

Here: one namespace holds a bridge, each pod's namespace a veth on it with one address of a
private /24, its own UTS namespace with the pod name as hostname, and its own hosts file: its
own name always, every other pod's service name only while some process runs in that pod's
namespace (a watcher thread rewrites the files in place: the bind mounts keep the inode).
Cluster DNS has no stand-in: any other name fails at once (no route, no server).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    pass

MODES = ("auto", "netns", "loopback")
NETNS_RUN = Path("/run/netns")  # where `ip netns add` mounts each namespace
ETC_NETNS = Path("/etc/netns")  # where `ip netns exec` finds the files it mounts over /etc
SUBNET_BASE = "10.233"
WATCH_EVERY_S = 0.05
_SEQ = itertools.count()
# the pod's hostname is its name (UTS namespace), HOSTNAME as the container runtime sets it
_HOSTNAME_SH = 'echo "$0" > /proc/sys/kernel/hostname && export HOSTNAME="$0" && exec "$@"'


@dataclass(frozen=True)
class PodNet:
    short: str  # master-0, worker-0, ...
    hostname: str  # the pod's name, which is also its headless service's name
    netns: str
    address: str


@dataclass(frozen=True)
class NetPlan:
    """Every name and address of one rehearsal's network; `tag` makes them unique per run."""

    tag: str
    subnet: str  # e.g. 10.233.57.0/24
    bridge_netns: str
    pods: tuple[PodNet, ...]

    def pod(self, short: str) -> PodNet:
        return next(p for p in self.pods if p.short == short)

    def wrapper(self, short: str) -> tuple[str, ...]:
        """The argv prefix that starts a pod's container in its namespaces."""
        pod = self.pod(short)
        return (
            "ip",
            "netns",
            "exec",
            pod.netns,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
            _HOSTNAME_SH,
            pod.hostname,
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
    pid: int | None = None,
    routes: Sequence[ipaddress.IPv4Network] | None = None,
) -> NetPlan:
    """Names and addresses for the pods `shorts` of job `job_name`: namespaces named after
    this process and a counter (unique per rehearsal), addresses .2, .3, ... of a free /24."""
    pid = os.getpid() if pid is None else pid
    tag = f"runai-spec-{pid}-{next(_SEQ)}"
    net = pick_subnet(host_routes() if routes is None else routes, pid)
    if len(shorts) > net.num_addresses - 3:
        raise InputError(
            f"{len(shorts)} pods do not fit in one /24",
            field="--network",
            hint="--network loopback runs them on loopback",
        )
    hosts = list(net.hosts())
    pods = tuple(PodNet(s, f"{job_name}-{s}", f"{tag}-{s}", str(hosts[i + 1])) for i, s in enumerate(shorts))
    return NetPlan(tag, str(net), f"{tag}-net", pods)


def unavailable() -> str | None:
    """Why the pods cannot have network namespaces here, or None when they can."""
    if os.geteuid() != 0:
        return "not root (network namespaces need root)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (iproute2 / util-linux)"
    if not os.access("/etc", os.W_OK):
        return "/etc is not writable (`ip netns exec` reads /etc/netns/NAME/hosts)"
    try:
        done = subprocess.run(
            ["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, timeout=10, check=False
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


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
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


class Network:
    """The namespaces, links and hosts files of one `NetPlan`, set up on entry and removed on
    exit (also after an error or Ctrl-C); while inside, a thread keeps every pod's hosts file
    in step with which pods run."""

    def __init__(self, plan: NetPlan, log: Path | None = None) -> None:
        self.plan = plan
        self.log = log  # where __exit__ writes when each pod's name resolved and stopped to
        self._made_ns: list[str] = []
        self._made_dirs: list[Path] = []
        self._made_etc = False  # /etc/netns itself was created here
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

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made_ns.append(name)

    def _setup(self) -> None:
        plan = self.plan
        prefix = ipaddress.IPv4Network(plan.subnet).prefixlen
        self._add_ns(plan.bridge_netns)
        _ip("-n", plan.bridge_netns, "link", "add", "br0", "type", "bridge")
        _ip("-n", plan.bridge_netns, "link", "set", "br0", "up")
        for i, pod in enumerate(plan.pods):
            self._add_ns(pod.netns)
            # both ends live in the rehearsal's namespaces: nothing is added to this machine's
            _ip(
                "-n",
                plan.bridge_netns,
                "link",
                "add",
                f"p{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                pod.netns,
            )
            _ip("-n", plan.bridge_netns, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", pod.netns, "addr", "add", f"{pod.address}/{prefix}", "dev", "eth0")
            _ip("-n", pod.netns, "link", "set", "eth0", "up")
            _ip("-n", pod.netns, "link", "set", "lo", "up")
            folder = ETC_NETNS / pod.netns
            self._made_etc = self._made_etc or not ETC_NETNS.exists()
            folder.mkdir(parents=True, exist_ok=False)
            self._made_dirs.append(folder)
            (folder / "hosts").write_text(plan.hosts_text(pod.short, frozenset()))
            (folder / "resolv.conf").write_text(
                "# runai-spec rehearse: no cluster DNS here; the job's names are in /etc/hosts\n"
                "options timeout:1 attempts:1\n"
            )
            self._ids[pod.short] = f"net:[{os.stat(NETNS_RUN / pod.netns).st_ino}]"

    def _write_hosts(self, running: frozenset[str]) -> None:
        for pod in self.plan.pods:
            data = self.plan.hosts_text(pod.short, running).encode()
            # in place, same length: the bind mount in each pod keeps this inode
            with contextlib.suppress(OSError):
                fd = os.open(ETC_NETNS / pod.netns / "hosts", os.O_WRONLY)
                try:
                    os.pwrite(fd, data, 0)
                finally:
                    os.close(fd)

    def _running_now(self) -> frozenset[str]:
        ids = set(_ns_ids().values())
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
        leftover = [pid for pid, nid in _ns_ids().items() if nid in ours]
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for name in reversed(self._made_ns):
            with contextlib.suppress(InputError):
                _ip("netns", "del", name)
        self._made_ns.clear()
        for folder in self._made_dirs:
            shutil.rmtree(folder, ignore_errors=True)
        self._made_dirs.clear()
        if self._made_etc:
            with contextlib.suppress(OSError):
                ETC_NETNS.rmdir()  # only when empty: a parallel rehearsal's folders stay


@contextlib.contextmanager
def pod_network(plan: NetPlan | None, log: Path | None = None) -> Iterator[Network | None]:
    """`Network(plan, log)` around the block, or nothing for loopback (plan None)."""
    if plan is None:
        yield None
        return
    with Network(plan, log) as net:
        yield net
