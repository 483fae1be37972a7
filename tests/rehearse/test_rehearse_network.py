"""The rehearsal's pod network (issue 11, item 1): a network namespace, address and hostname
per pod, service names that resolve only while their pod runs, and loopback where the machine
does not allow that."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import NAME, ROOT, example_job, needs_torch
from runai_spec.cli import app
from runai_spec.errors import InputError
from runai_spec.rehearse import PreflightSettings, plan_pods, rehearse_manifests
from runai_spec.rehearse import network as net_module
from runai_spec.rehearse.network import (
    AUTO_ON_GPU,
    Network,
    auto_on_gpu,
    pick_subnet,
    plan_network,
    resolve_mode,
)
from runai_spec.rehearse.process_tree import PID_NAMESPACE, can_pid_namespace
from runai_spec.rehearse.spec import RehearsalSpec

# --- planning (no root needed)


def test_the_subnet_avoids_every_route_of_this_machine() -> None:
    routes = [ipaddress.IPv4Network("10.233.7.0/24"), ipaddress.IPv4Network("10.233.8.0/22")]
    assert str(pick_subnet(routes, 7)) == "10.233.12.0/24"  # 7 routed, 8-11 inside the /22
    assert str(pick_subnet([], 300)) == "10.233.44.0/24"  # the pid picks, modulo 256
    # a route covering the whole /16 leaves nothing: bad input, with the way out
    with pytest.raises(InputError, match="every /24") as exc:
        pick_subnet([ipaddress.IPv4Network("10.0.0.0/8")], 1)
    assert "--network loopback" in str(exc.value.hint)


def test_names_addresses_and_files_are_the_rehearsals_own(tmp_path: Path) -> None:
    a = plan_network(
        NAME, ["master-0", "worker-0", "worker-1"], folder=tmp_path / "network", pid=4242, routes=[]
    )
    assert a.subnet == "10.233.146.0/24"  # 4242 % 256
    assert [(p.hostname, p.address) for p in a.pods] == [
        (f"{NAME}-master-0", "10.233.146.2"),
        (f"{NAME}-worker-0", "10.233.146.3"),
        (f"{NAME}-worker-1", "10.233.146.4"),
    ]
    # no names of this machine (no /run/netns/NAME, no /etc/netns/NAME): each pod's files in
    # the rehearsal's folder, its namespace reached through the pid of the process holding it
    assert [p.folder for p in a.pods] == [
        str(tmp_path / "network" / s) for s in ("master-0", "worker-0", "worker-1")
    ]
    with pytest.raises(RuntimeError, match="not set up"):
        a.wrapper("worker-0")
    held = dataclasses.replace(a, holders={"master-0": 40, "worker-0": 41, "worker-1": 42})
    wrapper = held.wrapper("worker-0")
    assert wrapper[:2] == ("nsenter", "--net=/proc/41/ns/net")
    assert wrapper[2:6] == ("unshare", "--uts", "--mount", "--")
    assert wrapper[-2:] == (f"{NAME}-worker-0", str(tmp_path / "network" / "worker-0"))  # hostname, files


def test_a_pods_hosts_file_names_the_others_only_while_they_run(tmp_path: Path) -> None:
    plan = plan_network(NAME, ["master-0", "worker-0", "worker-1"], folder=tmp_path, pid=1, routes=[])
    idle = plan.hosts_text("worker-0", frozenset())
    running = plan.hosts_text("worker-0", frozenset({"master-0"}))
    lines = [ln.strip() for ln in running.splitlines()]
    # its own name always (the kubelet's managed hosts file), the running master's too
    assert "10.233.1.3\tllm-7b-fsdp-worker-0" in lines
    assert "10.233.1.2\tllm-7b-fsdp-master-0" in lines
    assert "10.233.1.4\tllm-7b-fsdp-worker-1" not in lines
    assert "# llm-7b-fsdp-worker-1: not ready" in lines
    assert "10.233.1.2\tllm-7b-fsdp-master-0" not in [ln.strip() for ln in idle.splitlines()]
    assert "10.233.1.3\tllm-7b-fsdp-worker-0" in [ln.strip() for ln in idle.splitlines()]
    # every version has the same length: rewritten in place, the bind mounts keep seeing it
    sizes = {
        len(plan.hosts_text(s, frozenset(r)))
        for s in ("master-0", "worker-0")
        for r in ([], ["master-0"], ["worker-1"], ["master-0", "worker-0", "worker-1"])
    }
    assert len(sizes) == 1


def test_netns_plan_keeps_the_cluster_env_and_adds_no_is_host(tmp_path: Path) -> None:
    plan = plan_network(NAME, ["master-0", "worker-0"], folder=tmp_path / "network", pid=1, routes=[])
    plan = dataclasses.replace(plan, holders={"master-0": 7, "worker-0": 8})  # as Network sets them
    plans, _ = plan_pods(
        [example_job("multi-node")], RehearsalSpec(procs_per_pod=1), root=tmp_path, network=plan
    )
    for pod in plans:
        # the service name, as the operator sets it: the pod resolves it through /etc/hosts
        assert pod.env["MASTER_ADDR"] == f"{NAME}-master-0"
        # then PID 1 of a PID namespace of its own, where this machine allows it
        assert (
            pod.wrapper == plan.wrapper(pod.name) + (PID_NAMESPACE if pod.pid_namespace else ())
            and pod.port is None
        )
        assert pod.pid_namespace == can_pid_namespace()
        assert not any("is_host" in a for a in pod.argv)
    # loopback exactly as before
    loop, _ = plan_pods([example_job("multi-node")], RehearsalSpec(procs_per_pod=1), root=tmp_path)
    assert all(p.env["MASTER_ADDR"] == "127.0.0.1" and p.wrapper == () for p in loop)


def test_network_modes_and_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net_module, "unavailable", lambda: "not root (network namespaces need root)")
    assert resolve_mode("auto") == "loopback" and resolve_mode("loopback") == "loopback"
    with pytest.raises(InputError, match="not available here: not root") as exc:
        resolve_mode("netns")
    assert exc.value.field == "--network" and "--network loopback" in str(exc.value.hint)
    with pytest.raises(InputError, match="'wifi' is not one of auto, netns, loopback"):
        resolve_mode("wifi")
    monkeypatch.setattr(net_module, "unavailable", lambda: None)
    assert resolve_mode("auto") == "netns" == resolve_mode("netns")
    # with GPUs auto stays on loopback (NCCL would take each pod for a host of its own) and
    # says why; asked for, netns runs
    assert auto_on_gpu("auto", "netns", 4) == ("loopback", AUTO_ON_GPU)
    assert auto_on_gpu("auto", "netns", 0) == ("netns", None)
    assert auto_on_gpu("netns", "netns", 4) == ("netns", None)


def test_netns_where_it_is_unavailable_is_refused_in_two_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(net_module, "unavailable", lambda: "no `ip` on PATH (iproute2 / util-linux)")
    result = CliRunner().invoke(
        app,
        [
            "rehearse",
            str(ROOT / "examples/multi-node/profile.yaml"),
            "--network",
            "netns",
            "--logs",
            str(tmp_path / "logs"),
        ],
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == (
        "error: --network: network namespaces are not available here: no `ip` on PATH (iproute2 / util-linux)"
    )
    assert lines[1].startswith("hint: ") and "--network loopback" in lines[1]
    assert not (tmp_path / "logs").exists()  # refused before anything ran


# --- real namespaces (root, iproute2)

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
    reason="network namespaces need root, iproute2 and unshare",
)


def _host_state() -> tuple[str, str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return links.stdout, spaces.stdout


def _in_pod(plan: net_module.NetPlan, short: str, code: str, *args: str) -> list[str]:
    """What `code` prints, run with Python in pod `short`'s namespaces."""
    done = subprocess.run(
        [*plan.wrapper(short), sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done
    return done.stdout.splitlines()


LOOKUP = (
    "import socket, sys\n"
    "print(socket.gethostname())\n"
    "try:\n"
    "    s = socket.create_connection((sys.argv[1], 29500), timeout=5); s.close()\n"
    "    print('reached')\n"
    "except OSError as e:\n"
    "    print('unreached', type(e).__name__)\n"
)
SERVER = (
    "import socket, time\n"
    "s = socket.create_server(('0.0.0.0', 29500))\n"
    "print('listening', flush=True)\n"
    "time.sleep(60)\n"
)


def _wait(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@needs_netns
def test_two_pods_see_their_hostnames_and_each_other_only_while_running(tmp_path: Path) -> None:
    before = _host_state()
    plan = plan_network(NAME, ["master-0", "worker-0"], folder=tmp_path / "network")
    master, worker = (f"{NAME}-master-0", f"{NAME}-worker-0")
    with Network(plan) as net:
        held = net.plan  # the wrappers name the processes that hold the namespaces
        # nothing runs in master-0: its name does not resolve in worker-0
        assert _in_pod(held, "worker-0", LOOKUP, master) == [worker, "unreached gaierror"]
        server = subprocess.Popen(
            [*held.wrapper("master-0"), sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        assert _wait(lambda: "master-0" in net.running)
        assert _in_pod(held, "worker-0", LOOKUP, master) == [worker, "reached"]
        # the master sees itself by its own name, at its own address
        assert _in_pod(held, "master-0", f"import socket; print(socket.gethostbyname({master!r}))") == [
            plan.pod("master-0").address
        ]
        server.kill()
        server.communicate(timeout=10)  # its end, and its stdout closed
        assert _wait(lambda: "master-0" not in net.running)
        assert _in_pod(held, "worker-0", LOOKUP, master) == [worker, "unreached gaierror"]
        assert [(pod, up) for _, pod, up in net.changes if pod == "master-0"] == [
            ("master-0", True),
            ("master-0", False),
        ]
    # everything it made is gone: namespaces (with their links), the processes holding them
    assert _host_state() == before
    assert not any(Path(f"/proc/{pid}").exists() for pid in held.holders.values())


@needs_netns
def test_the_network_is_removed_when_the_block_fails(tmp_path: Path) -> None:
    before = _host_state()
    plan = plan_network(NAME, ["master-0", "worker-0"], folder=tmp_path / "network")
    with pytest.raises(KeyboardInterrupt), Network(plan) as net:
        holders = dict(net.plan.holders)
        assert all(Path(f"/proc/{pid}/ns/net").exists() for pid in holders.values())
        raise KeyboardInterrupt  # Ctrl-C in the middle of a rehearsal
    assert _host_state() == before
    assert not any(Path(f"/proc/{pid}").exists() for pid in holders.values())


# issue 23 item 11: `ip netns add` mounted each namespace at /run/netns/NAME and `ip netns exec`
# read /etc/netns/NAME/hosts; the rehearsal now makes nothing there, not even for a moment
SYSTEM_NETNS = (Path("/run/netns"), Path("/etc/netns"))


def _system_netns_entries() -> set[str]:
    out: set[str] = set()
    for top in SYSTEM_NETNS:
        if top.exists():
            out.add(str(top))
            for folder, dirs, files in os.walk(top):
                out.update(os.path.join(folder, n) for n in [*dirs, *files])
    return out


@contextmanager
def _watch_system_netns() -> Iterator[set[str]]:
    """While the block runs, every path that appears under /run/netns or /etc/netns (polled
    every few milliseconds: the old rehearsal's entries lived for its whole run)."""
    before = _system_netns_entries()
    appeared: set[str] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            appeared.update(_system_netns_entries() - before)
            stop.wait(0.005)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield appeared
    finally:
        stop.set()
        thread.join(5)
        appeared.update(_system_netns_entries() - before)


@needs_netns
def test_the_netns_mode_creates_nothing_outside_the_rehearsals_folder(tmp_path: Path) -> None:
    folder = tmp_path / "network"
    plan = plan_network(NAME, ["master-0", "worker-0"], folder=folder)
    with _watch_system_netns() as appeared, Network(plan) as net:
        server = subprocess.Popen(
            [*net.plan.wrapper("master-0"), sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        assert _wait(lambda: "master-0" in net.running)
        # the pod's hosts file is the rehearsal's, mounted over /etc/hosts in its namespace only
        assert _in_pod(net.plan, "worker-0", "print(open('/etc/hosts').read())") == (
            (folder / "worker-0" / "hosts").read_text().splitlines() + [""]
        )
        server.kill()
        server.communicate(timeout=10)  # its end, and its stdout closed
    assert appeared == set()
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "master-0",
        "master-0/hosts",
        "master-0/resolv.conf",
        "worker-0",
        "worker-0/hosts",
        "worker-0/resolv.conf",
    ]
    assert "runai-spec" not in Path("/etc/hosts").read_text()  # this machine's stays as it was


# --- a real rehearsal in netns mode


@needs_netns
@pytest.mark.slow
@pytest.mark.torch
def test_the_multi_node_example_passes_in_netns_mode_and_says_so(tmp_path: Path) -> None:
    needs_torch()
    before = _host_state()
    with _watch_system_netns() as appeared:
        result = CliRunner().invoke(
            app,
            [
                "rehearse",
                str(ROOT / "examples/multi-node/profile.yaml"),
                "--procs-per-pod",
                "2",
                "--network",
                "netns",
                "--logs",
                str(tmp_path),
            ],
        )
    assert result.exit_code == 0, result.output
    assert appeared == set()  # nothing under /run/netns or /etc/netns (issue 23 item 11)
    assert (tmp_path / "network" / "master-0" / "hosts").is_file()  # in the rehearsal's folder
    # the table says which mode ran; result.json has the whole row
    assert any("network" in ln and "netns:" in ln for ln in result.stdout.splitlines())
    checks = json.loads((tmp_path / "result.json").read_text())["checks"]
    [row] = [c for c in checks if c["check"] == "network"]
    assert row["details"]["mode"] == "netns", row
    assert f"{NAME}-master-0 10.233." in row["message"]
    # the c10d endpoint names master-0; torch finds that out from the hostnames, unaided
    assert "c10d store host: master-0" in row["message"] and row["details"]["store_hosts"] == ["master-0"]
    pods = json.loads((tmp_path / "pods.json").read_text())["pods"]
    assert {p["env"]["MASTER_ADDR"] for p in pods} == {f"{NAME}-master-0"}
    assert not any("is_host" in a for p in pods for a in p["argv"])
    assert all(c["status"] in ("pass", "note", "skip") for c in checks), checks
    assert _host_state() == before


@needs_netns
@pytest.mark.long
@pytest.mark.torch
@pytest.mark.faults
def test_a_worker_kill_while_rank_0_is_busy_recovers_in_netns_mode(tmp_path: Path) -> None:
    """test_rehearse_c10d's busy-rank-0 kill with real hostnames: torch picks the store host
    itself, and worker-0's name is gone from master-0's hosts file during the back-off."""
    needs_torch()
    from rehearse.test_rehearse_c10d import SETTINGS, c10d_job

    settings = PreflightSettings(**{**SETTINGS.__dict__, "busy_rank0_s": 3.0})
    before = _host_state()
    r = rehearse_manifests(
        [c10d_job()],
        RehearsalSpec(
            settings=settings,
            procs_per_pod=1,
            device="cpu",
            logs_dir=tmp_path,
            timeout_s=150.0,
            kills=["worker-0@checkpoint"],
            backoff_scale=0.1,
            network="netns",
        ),
    )
    [fault] = [c for c in r.checks if c.check == "fault"]
    assert fault.status == "pass" and r.ok, [(c.check, c.status, c.message) for c in r.checks]
    assert fault.details["restarted"] == ["worker-0"] and fault.details["resumed_ranks"] == [0, 1]
    network = r.check("network")
    assert network is not None and network.details["mode"] == "netns"
    assert network.details["store_hosts"] == ["master-0"]
    # worker-0's name left master-0's hosts file with the kill, came back with the restart
    log = (tmp_path / "network.log").read_text().splitlines()
    events = [ln.split(" s  ", 1)[1] for ln in log if "worker-0" in ln]
    up, gone = f"{NAME}-worker-0 resolves (container running)", f"{NAME}-worker-0 gone (not ready)"
    assert events == [up, gone, up, gone], log  # the last: the job's end
    assert _host_state() == before
