"""The c10d rendezvous store of a rehearsed pod: who hosts it, as the cluster decides, said explicitly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..facts.accelerate import MAIN_IP_FLAG, MAIN_PORT_FLAG, NUM_MACHINES_FLAG
from ..facts.accelerate import RDZV_BACKEND_FLAG as ACCELERATE_BACKEND_FLAG
from ..facts.accelerate import RDZV_CONF_FLAG as ACCELERATE_CONF_FLAG
from ..facts.kubeflow import RDZV_BACKEND, RDZV_BACKEND_ENV, RDZV_CONF_ENV, RDZV_ENDPOINT_ENV
from ..facts.torchrun import (
    RDZV_BACKEND_FLAGS,
    RDZV_CONF_FLAGS,
    RDZV_ENDPOINT_FLAGS,
    STANDALONE_FLAG,
    flag_uses,
    flag_value,
    has_flag,
    rdzv_conf_keys,
)


@dataclass(frozen=True)
class StoreHost:
    """The c10d rendezvous store of one pod's torchrun, as the cluster decides who hosts it.

    torch 2.13 `c10d_rendezvous_backend.py` `_create_tcp_store`: `is_host` from the rdzv conf,
    else `_matches_machine_hostname(endpoint host)` (`rendezvous/utils.py`: localhost, a
    loopback address, this machine's hostname or one of its addresses). In the cluster a pod's
    hostname is its name, so only the pod named by the endpoint hosts the store; on loopback
    every agent matches 127.0.0.1 and the first to bind the port would host it."""

    endpoint: str  # as the cluster expands it, e.g. llm-7b-fsdp-master-0:23456
    host: str
    is_host: bool  # what the cluster's hostname match gives this pod
    via: str  # where the rehearsal says it: "--rdzv-conf" (the rendered flag) or "PET_RDZV_CONF"
    explicit: bool  # the rendered conf sets is_host itself: nothing added


def c10d_store_host(head: Sequence[str], env: Mapping[str, str], hostname: str) -> StoreHost | None:
    """Who hosts the c10d store in the cluster, for the pod called `hostname`: None when its
    torchrun does not use a c10d rendezvous (torchrun reads PET_<FLAG> for a missing flag)."""
    if has_flag(head, STANDALONE_FLAG):
        return None
    backend = flag_value(head, *RDZV_BACKEND_FLAGS) or env.get(RDZV_BACKEND_ENV, "static")
    if backend != RDZV_BACKEND:
        return None
    endpoint = flag_value(head, *RDZV_ENDPOINT_FLAGS) or env.get(RDZV_ENDPOINT_ENV, "")
    host = endpoint.rsplit(":", 1)[0].strip("[]") if endpoint else "localhost"
    flag = flag_value(head, *RDZV_CONF_FLAGS)
    conf = flag if flag is not None else env.get(RDZV_CONF_ENV, "")
    matches = host in ("localhost", hostname) or host.startswith(hostname + ".") or host.startswith("127.")
    return StoreHost(
        endpoint,
        host,
        matches,
        RDZV_CONF_FLAGS[0] if flag is not None else RDZV_CONF_ENV,
        "is_host" in rdzv_conf_keys(conf),
    )


def with_is_host(head: list[str], env: dict[str, str], store: StoreHost) -> list[str]:
    """Say `is_host` explicitly, as the cluster's hostname match decides it: in the rendered
    --rdzv-conf where there is one, else in PET_RDZV_CONF (changes `env`). torchrun's
    argparse keeps the last of a repeated flag, so every --rdzv-conf gets it: one left without
    would let every agent on loopback take itself for the store host."""
    if store.explicit:
        return head
    item = f"is_host={int(store.is_host)}"
    if store.via == RDZV_CONF_ENV:
        conf = env.get(RDZV_CONF_ENV, "")
        env[RDZV_CONF_ENV] = f"{conf},{item}" if conf else item
        return head
    out = list(head)
    for use in flag_uses(head, *RDZV_CONF_FLAGS):
        value = f"{use.value},{item}" if use.value else item
        if use.width == 2:
            out[use.index + 1] = value
        else:
            out[use.index] = f"{use.name}={value}"
    return out


def accelerate_store_host(head: Sequence[str], hostname: str) -> StoreHost | None:
    """Who hosts the c10d store of `accelerate launch` (accelerate 1.16.0 prepare_multi_gpu_env:
    several machines meet at --main_process_ip:--main_process_port, its rdzv_endpoint); None on
    one machine (one agent) or with another backend. Its --rdzv_conf replaces PET_RDZV_CONF
    (accelerate's default is ""), so is_host can only go into the flag."""
    machines = flag_value(head, NUM_MACHINES_FLAG)
    backend = flag_value(head, ACCELERATE_BACKEND_FLAG) or "static"
    if machines in (None, "1") or backend != RDZV_BACKEND:
        return None
    host = flag_value(head, MAIN_IP_FLAG) or ""
    endpoint = f"{host}:{flag_value(head, MAIN_PORT_FLAG)}"
    conf = flag_value(head, ACCELERATE_CONF_FLAG) or ""
    matches = host in ("localhost", hostname) or host.startswith(hostname + ".") or host.startswith("127.")
    return StoreHost(endpoint, host, matches, ACCELERATE_CONF_FLAG, "is_host" in rdzv_conf_keys(conf))
