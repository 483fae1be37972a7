"""Accelerate's launcher as accelerate 1.16.0 reads it (`commands/launch.py`, `utils/launch.py`)."""

import json
from collections.abc import Mapping
from typing import Any

# `accelerate launch` (commands/launch.py launch_command_parser) runs torchrun in its own
# process (`_run_torchrun` -> torch.distributed.run.run) with torchrun's namespace built by
# `utils/launch.py` `_filter_args`: torchrun's parser first (its defaults: the operator's PET_*),
# then every key accelerate's own parser has, defaults included. So `--rdzv_backend` (default
# static), `--max_restarts` (0), `--rdzv_conf` (""), `--monitor_interval`, `--tee`, `--log_dir`
# and `--role` always replace the operator's PET_* values; keys accelerate lacks (rdzv_id,
# local_addr, the shutdown timeout) still come from PET_*. The render therefore passes every
# one of them explicitly.
PROGRAM = ("accelerate", "launch")
CONFIG_FILE_FLAG = "--config_file"
MULTI_GPU_FLAG = "--multi_gpu"  # needs >= 2 processes (_validate_launch_command)
NUM_MACHINES_FLAG = "--num_machines"
NUM_PROCESSES_FLAG = "--num_processes"  # the total over all machines, not per machine
MACHINE_RANK_FLAG = "--machine_rank"  # required with num_machines > 1, c10d included
MAIN_IP_FLAG = "--main_process_ip"  # with the port, torchrun's rdzv_endpoint (not same_network)
MAIN_PORT_FLAG = "--main_process_port"
RDZV_BACKEND_FLAG = "--rdzv_backend"
RDZV_CONF_FLAG = "--rdzv_conf"
MAX_RESTARTS_FLAG = "--max_restarts"
LOG_DIR_FLAG = "--log_dir"
TEE_FLAG = "--tee"
NO_PYTHON_FLAG = "--no_python"
# DeepSpeed's ZeRO stage: the flag sets ACCELERATE_DEEPSPEED_ZERO_STAGE for the ranks
# (utils/launch.py prepare_deepspeed_cmd_env), which DeepSpeedPlugin reads, defaulting to 2
# where it is unset (utils/dataclasses.py __post_init__). A given flag wins over the config's
# deepspeed_config.zero_stage (_validate_launch_command copies a config key only where the flag
# was not given: args.nondefault, commands/utils.py _StoreAction).
ZERO_STAGE_FLAG = "--zero_stage"


def spellings(name: str) -> tuple[str, str]:
    """Flag NAME as accelerate's parser takes it: registered with `_`, and its own _StoreAction
    adds the `-` form (commands/utils.py)."""
    return name, name[:2] + name[2:].replace("_", "-")


# Its flags that take no value (store_true in launch_command_parser), as split_command reads an
# argv; -m ends the flags (the module is the entry point).
BOOLEAN_FLAGS = frozenset(
    {
        "--multi_gpu",
        "--cpu",
        "--tpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--use_megatron_lm",
        "--same_network",
        "--no_python",
        "--quiet",
        "-q",
        "--debug",
        "-d",
        "--enable_cpu_affinity",
    }
)
# Its topology and transport flags, refused in a researcher's command (argparse takes only
# the spelling registered: accelerate registers the `_` forms).
RESERVED_FLAGS = (
    r"--(num_processes|num_machines|machine_rank|main_process_ip|main_process_port|same_network|"
    r"multi_gpu|gpu_ids|config_file|max_restarts|deepspeed_multinode_launcher|deepspeed_hostfile|"
    r"mpirun_hostfile)"
)

# The config file: `--config_file`, else `$HF_HOME/accelerate/default_config.yaml`, which an
# image can bake (commands/config/config_args.py). It fills every flag left unset
# (`_validate_launch_command`: an attribute of the namespace still None); a `.json` name is read
# as JSON (load_config_from_file), and a key ClusterConfig does not have is refused at start.
CONFIG_NAME = "accelerate.json"
# The keys the engineers own (DESIGN section 4.7): topology, transport and the machine.
ENGINEER_KEYS = (
    "compute_environment",
    "distributed_type",
    "num_machines",
    "machine_rank",
    "num_processes",
    "main_process_ip",
    "main_process_port",
    "same_network",
    "rdzv_backend",
    "gpu_ids",
    "use_cpu",
    "enable_cpu_affinity",
    "mpirun_config",
)
ENGINEER_PREFIXES = ("tpu_",)
ENGINEER_DEEPSPEED_KEYS = (
    "deepspeed_multinode_launcher",
    "deepspeed_hostfile",
    "deepspeed_inclusion_filter",
    "deepspeed_exclusion_filter",
)


def engineer_key(path: str) -> bool:
    """Whether config key PATH (`num_machines`, `deepspeed_config.deepspeed_hostfile`) is the
    engineers'."""
    top, _, sub = path.partition(".")
    if top == "deepspeed_config" and sub:
        return sub in ENGINEER_DEEPSPEED_KEYS
    return top in ENGINEER_KEYS or top.startswith(ENGINEER_PREFIXES)


def researcher_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """A researcher's accelerate config without the engineers' keys (validate refuses those)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "deepspeed_config" and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if not engineer_key(f"{key}.{k}")}
        elif engineer_key(key):
            continue
        out[key] = value
    return out


def engineer_paths(config: Mapping[str, Any]) -> list[str]:
    """The engineers' keys a researcher's config sets, as `key` or `deepspeed_config.key`."""
    paths = [key for key in config if key != "deepspeed_config" and engineer_key(key)]
    nested = config.get("deepspeed_config")
    if isinstance(nested, Mapping):
        paths += [f"deepspeed_config.{k}" for k in nested if engineer_key(f"deepspeed_config.{k}")]
    return paths


def config_text(machines: int, processes: int, researcher: Mapping[str, Any] | None = None) -> str:
    """The config the render passes as --config_file: the researcher's training keys, then the
    engineers' keys, every one set, so that a default config baked into the image fills nothing
    (the flags say the same). Each part is compact JSON with sorted keys, the engineers' last:
    the text is `{` + the researcher's keys and a comma (none: nothing) + the engineers' part,
    which the admission policy pins and reads the researcher's part before it (and json.load
    keeps a repeated key's last value)."""
    engineers = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "MULTI_GPU",
        "num_machines": machines,
        "num_processes": processes,
        "machine_rank": 0,  # each pod's own comes from --machine_rank (the operator's)
        "rdzv_backend": "c10d",
        "same_network": False,
        "gpu_ids": "all",
        "use_cpu": False,
        "enable_cpu_affinity": False,
        "mpirun_config": {},
    }
    own = researcher_keys(researcher or {})
    head = json.dumps(own, sort_keys=True, separators=(",", ":"))[1:-1] + "," if own else ""
    return "{" + head + json.dumps(engineers, sort_keys=True, separators=(",", ":"))[1:]
