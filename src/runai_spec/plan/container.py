"""The pytorch container's env, secret and downward-API variables, and its resource limits."""

from ..facts.kubeflow import GPU_RESOURCE, POD_NAME_ENV, kubelet_literal
from ..facts.torchrun import NCCL_DEBUG, NCCL_DEBUG_FILE
from ..load.presets import Preset
from ..load.profile import Profile
from ..records import Record
from .launcher import Launcher, LaunchSetup
from .origins import Entry, Origin, Sources, derived, same


class ContainerEnv(Record):
    """The container's variables as the plan lists them, before their origins are recorded."""

    env: dict[str, Entry]
    field_env: tuple[tuple[str, str], ...]  # the downward API (valueFrom.fieldRef)
    secret_env: tuple[tuple[str, str, str], ...]  # (variable, Secret name, key)
    diagnostics: tuple[str, ...]


def _launcher_env(preset: Preset, launcher: Launcher, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
    """The variables the preset's network and the launcher need, after the profile's."""
    env = {
        key: same(src.preset(f"network.env.{key}"), key, value) for key, value in preset.network.env.items()
    }
    return env | launcher.env(setup, src)


def plan_env(
    profile: Profile,
    preset: Preset,
    launcher: Launcher,
    setup: LaunchSetup,
    logs: str | None,
    src: Sources,
    o: dict[str, Origin],
) -> ContainerEnv:
    """The profile's env, then the launcher's, then the diagnostics'; the origins of the
    field and secret variables into `o` (env's are recorded with the plan's pairs)."""
    env = {
        key: same(src.profile(f"env.{key}"), key, kubelet_literal(value))
        for key, value in profile.env_strings().items()
    }
    env |= _launcher_env(preset, launcher, setup, src)
    field_env: list[tuple[str, str]] = []
    if logs is not None:
        field_env.append(POD_NAME_ENV)
        o["field_env[0][0]"] = o["field_env[0][1]"] = derived(
            "the pod's name (downward API), for its per-rank log folder"
        )
    diagnostics: list[str] = []
    if profile.diagnostics.nccl_debug:
        env[NCCL_DEBUG] = same(src.profile("diagnostics.nccl_debug"), NCCL_DEBUG, "INFO")
        if logs is not None:  # %h host, %p pid (NCCL's debug file name): one file per rank
            env[NCCL_DEBUG_FILE] = same(
                src.profile("diagnostics.nccl_debug"), NCCL_DEBUG_FILE, f"{logs}/nccl.%h.%p.log"
            )
        diagnostics.append("nccl-debug")
    secret_env = []
    for i, (name, ref) in enumerate(profile.secret_env.items()):
        secret_env.append((name, ref.secret, ref.key))
        for j in range(3):
            o[f"secret_env[{i}][{j}]"] = src.profile(f"secret_env.{name}")
    return ContainerEnv(env, tuple(field_env), tuple(secret_env), tuple(diagnostics))


def plan_limits(preset: Preset, src: Sources, o: dict[str, Origin]) -> dict[str, Entry]:
    """GPUs, CPU, memory and the network's devices; the capabilities' origins into `o`."""
    limits = {
        GPU_RESOURCE: same(src.preset("gpus_per_pod"), GPU_RESOURCE, preset.gpus_per_pod),
        "cpu": same(src.preset("cpu"), "cpu", preset.cpu),
        "memory": same(src.preset("memory"), "memory", preset.memory),
    }
    for key, devices in preset.network.resources.items():
        limits[key] = same(src.preset(f"network.resources.{key}"), key, devices)
    for i in range(len(preset.network.capabilities)):
        o[f"capabilities[{i}]"] = src.preset(f"network.capabilities[{i}]")
    return limits
