"""accelerate launch: every topology flag explicit, torchrun's failure semantics kept, its config rendered."""

import json

from ...facts import accelerate as acc
from ...facts.kubeflow import RDZV_BACKEND
from ...facts.torchrun import (
    DISABLE_SHARED_STORE,
    EXECUTABLE_ENTRY,
    entry_point_kind,
    flag,
    shutdown_window,
    split_flag,
)
from ...load.presets import Preset
from ..origins import Entry, Origin, Sources, derived, same
from .base import PYTORCHJOB, LauncherFile, LaunchSetup
from .rendezvous import RDZV_ENDPOINT, RendezvousPlan, rendezvous_plan
from .torchrun import agent_env, rank_log_dir

# The variables torchrun reads where accelerate has no flag (accelerate 1.16.0 _filter_args
# keeps torchrun's defaults for them): the rendezvous id, and on one node the endpoint.
RDZV_ID_ENV = "PET_RDZV_ID"
RDZV_ENDPOINT_ENV = "PET_RDZV_ENDPOINT"
# One node: torchrun --standalone's rendezvous (c10d on a free local port), so that no rank
# waits on the pod's own service name; accelerate has no --standalone flag.
LOCAL_ENDPOINT = "localhost:0"
# The operator's node rank (PET_NODE_RANK, appended to the container's env, so the kubelet
# expands it in the command as it does MASTER_ADDR): accelerate requires --machine_rank.
MACHINE_RANK = "$(PET_NODE_RANK)"
CONFIG_VOLUME = "accelerate-config"
CONFIG_DIR = "/etc/runai-spec/accelerate"
CONFIG_ANNOTATION = "runai-spec/accelerate-config"
# accelerate 1.16.0 commands/launch.py: the flag that names how to launch decides it, and with
# one given the config's distributed_type is never read (_validate_launch_command). --multi_gpu
# runs multi_gpu_launcher with no FSDP or DeepSpeed env, so an accelerate_config's fsdp_config
# or deepspeed_config would do nothing: the profile's strategy picks the flag. --use_fsdp runs
# the same multi_gpu_launcher with ACCELERATE_USE_FSDP and the FSDP_* env (prepare_multi_gpu_env);
# --use_deepspeed runs deepspeed_launcher (utils/launch.py prepare_deepspeed_cmd_env), which on
# several machines starts DeepSpeed's own pdsh runner over ssh unless the multi-node launcher is
# `standard`: torchrun in this process, as the other two (DESIGN 4.7).
USE_FSDP_FLAG = "--use_fsdp"
USE_DEEPSPEED_FLAG = "--use_deepspeed"
DEEPSPEED_MULTINODE_FLAG = "--deepspeed_multinode_launcher"
DEEPSPEED_STANDARD = "standard"  # DEEPSPEED_MULTINODE_LAUNCHERS[1]: torchrun on each node
_STRATEGY_FLAGS = {"fsdp": USE_FSDP_FLAG, "deepspeed": USE_DEEPSPEED_FLAG}

# The preset field each flag renders.
_FLAG_FIELDS = {
    acc.NUM_PROCESSES_FLAG: "gpus_per_pod",
    acc.NUM_MACHINES_FLAG: "nodes",
    acc.MAX_RESTARTS_FLAG: "rendezvous.max_restarts",
    acc.RDZV_BACKEND_FLAG: "rendezvous.backend",
    acc.RDZV_CONF_FLAG: "rendezvous",
}


def _config(setup: LaunchSetup) -> LauncherFile:
    researcher = json.loads(setup.launcher_config) if setup.launcher_config else None
    text = acc.config_text(setup.pods, setup.pods * setup.procs_per_pod, researcher)
    return LauncherFile(CONFIG_VOLUME, CONFIG_DIR, acc.CONFIG_NAME, CONFIG_ANNOTATION, text)


def _distributed(setup: LaunchSetup) -> tuple[str, ...]:
    """How accelerate launches: the profile's strategy's flag (FSDP, DeepSpeed), else --multi_gpu."""
    chosen = _STRATEGY_FLAGS.get(setup.strategy, acc.MULTI_GPU_FLAG)
    if chosen != USE_DEEPSPEED_FLAG:
        return (chosen,)
    # the profile's ZeRO stage, explicit: accelerate's config carries no stage of the profile's,
    # and without one DeepSpeedPlugin runs stage 2 whatever the profile (and its memory
    # estimate) says (facts.accelerate.ZERO_STAGE_FLAG)
    stage = () if setup.zero_stage is None else (flag(acc.ZERO_STAGE_FLAG, setup.zero_stage),)
    if setup.pods > 1:
        return (chosen, *stage, flag(DEEPSPEED_MULTINODE_FLAG, DEEPSPEED_STANDARD))
    return (chosen, *stage)


def _rdzv_conf(r: RendezvousPlan) -> str:
    pairs = (
        ("join_timeout", r.join_timeout_s),
        ("read_timeout", r.read_timeout_s),
        ("last_call_timeout", r.last_call_timeout_s),
    )
    return ",".join(f"{key}={value}" for key, value in pairs if value is not None)


class AccelerateLauncher:
    """`accelerate launch`, PID 1 of every pod, running torchrun in its own process. Every key
    accelerate would otherwise fill with its own defaults (static rendezvous, no restarts) or
    from a config baked into the image is rendered: the topology, c10d, the preset's restarts,
    the tool's config file. Not for elastic presets: accelerate has no MIN:MAX nodes."""

    name = "accelerate"
    workload = PYTORCHJOB
    programs: tuple[str, ...] = (acc.PROGRAM[0],)
    reserved_flags = acc.RESERVED_FLAGS
    reserved_modules: tuple[str, ...] = ("accelerate.commands.launch", "accelerate.commands.accelerate_cli")
    restarts_ranks = True
    forwards_sigterm = True  # torchrun's agent in accelerate's process: PID 1 closes the ranks

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        return rendezvous_plan(preset, job)

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        config = _config(setup)
        head: tuple[str, ...] = (*acc.PROGRAM, flag(acc.CONFIG_FILE_FLAG, config.path), *_distributed(setup))
        head += (
            flag(acc.NUM_MACHINES_FLAG, setup.pods),
            flag(acc.NUM_PROCESSES_FLAG, setup.pods * setup.procs_per_pod),
        )
        r = setup.rendezvous
        if setup.layout != "multi-node" or r is None:
            return (*head, flag(acc.RDZV_BACKEND_FLAG, RDZV_BACKEND), flag(acc.MAX_RESTARTS_FLAG, 0))
        address, _, port = (r.endpoint or RDZV_ENDPOINT).rpartition(":")
        head += (
            flag(acc.MACHINE_RANK_FLAG, MACHINE_RANK),
            flag(acc.MAIN_IP_FLAG, address),
            flag(acc.MAIN_PORT_FLAG, port),
            flag(acc.RDZV_BACKEND_FLAG, r.backend),
            flag(acc.MAX_RESTARTS_FLAG, r.max_restarts or 0),
        )
        conf = _rdzv_conf(r)
        return (*head, flag(acc.RDZV_CONF_FLAG, conf)) if conf and r.backend == RDZV_BACKEND else head

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        argv = self.head(setup)
        if entry_point_kind(setup.entrypoint) == EXECUTABLE_ENTRY:  # a wrapper script
            argv += (acc.NO_PYTHON_FLAG,)
        return (*argv, flag(acc.LOG_DIR_FLAG, self.rank_logs(setup)), flag(acc.TEE_FLAG, 3))

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        return rank_log_dir(setup.checkpoint_dir)

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        # torchrun reads these as its flags' defaults; accelerate has no flag for them
        r = setup.rendezvous
        if setup.layout != "multi-node" or r is None:
            return {RDZV_ENDPOINT_ENV: LOCAL_ENDPOINT}
        if r.backend == RDZV_BACKEND and r.rdzv_id is not None:
            return {RDZV_ID_ENV: r.rdzv_id}
        return {}

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        env: dict[str, Entry] = {}
        r = setup.rendezvous
        if setup.layout == "multi-node" and r is not None and r.backend == RDZV_BACKEND:
            key, value = DISABLE_SHARED_STORE
            why = "c10d: a pod restarted in place must be able to rejoin (torch's shared store deadlocks it)"
            env[key] = same(derived(why), key, value)
        whys = {
            RDZV_ENDPOINT_ENV: "one node: c10d on a free local port, as torchrun --standalone "
            "(accelerate has no flag)",
            RDZV_ID_ENV: "rendezvous id: the job name (accelerate has no flag; torchrun reads PET_RDZV_ID)",
        }
        for key, value in self.rendezvous_env(setup).items():
            env[key] = same(derived(whys[key]), key, value)
        return env | agent_env(setup, src)

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        name = split_flag(arg)[0]
        if arg == acc.NO_PYTHON_FLAG:
            return src.profile("command[0]")
        if name in _FLAG_FIELDS and (setup.layout == "multi-node" or name != acc.NUM_MACHINES_FLAG):
            return src.preset(_FLAG_FIELDS[name])
        if name in (acc.MACHINE_RANK_FLAG, acc.MAIN_IP_FLAG, acc.MAIN_PORT_FLAG):
            return derived(
                "c10d store on the Master's service: the operator's PET_NODE_RANK, MASTER_ADDR "
                "and MASTER_PORT, expanded by the kubelet"
            )
        if name == acc.CONFIG_FILE_FLAG:
            return derived(
                "the tool's accelerate config (a pod annotation): no config baked in the image applies"
            )
        if arg in _STRATEGY_FLAGS.values():
            return src.profile("strategy")
        if name == acc.ZERO_STAGE_FLAG:
            return src.profile("zero_stage")
        if name == DEEPSPEED_MULTINODE_FLAG:
            return derived(
                "DeepSpeed on several pods: torchrun in accelerate's process on each, as the "
                "operator starts them (its default, pdsh, would ssh to hosts of its own hostfile)"
            )
        if name in (acc.LOG_DIR_FLAG, acc.TEE_FLAG):
            return derived(
                "a log per rank (site guide), kept on the checkpoint volume so that "
                "it outlives the pod; the pod log carries every rank's lines too"
            )
        return derived(f"launcher for the {setup.layout} layout (profile launcher: accelerate)")

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        # accelerate has no shutdown key: torchrun's agent reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT
        return shutdown_window(torch_version, grace_s)

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        return (_config(setup),)
