"""The pod's volumes by role: the checkpoint volume, the data volumes and /dev/shm."""

from collections.abc import Iterable

from ..load.presets import Preset
from ..load.profile import Profile
from ..load.site import Site
from ..records import Record
from .origins import Origin, Sources, derived

# What each volume is for: the rehearsal, the smoke test and the checks find a volume by its
# role (mount_of), never by its name.
CHECKPOINT = "checkpoint"
DATA = "data"
SHM = "shm"
SHM_PATH = "/dev/shm"


class Volume(Record):
    """A pod volume and where the `pytorch` container mounts it."""

    name: str
    mount_path: str
    read_only: bool
    claim: str | None = None  # persistentVolumeClaim.claimName
    memory_size: str | None = None  # emptyDir medium Memory (for /dev/shm)
    source: str | None = None  # the approved Run:ai data source mounted through `claim`
    role: str = DATA  # CHECKPOINT, DATA or SHM


def volume_name(role: str, index: int = 0) -> str:
    """The name the plan gives the volume of ROLE (the INDEXth data volume)."""
    return f"data-{index}" if role == DATA else "dshm" if role == SHM else role


def volume_role(name: str) -> str | None:
    """The role of the volume the plan named NAME (a rendered manifest read back), else None."""
    if name in (CHECKPOINT, volume_name(SHM)):
        return CHECKPOINT if name == CHECKPOINT else SHM
    prefix, _, index = name.rpartition("-")
    return DATA if prefix == DATA and index.isdigit() and name == volume_name(DATA, int(index)) else None


def mount_of(volumes: Iterable[Volume], role: str) -> str | None:
    """The mount path of the first volume of ROLE among VOLUMES, else None."""
    return next((v.mount_path for v in volumes if v.role == role), None)


def plan_volumes(
    profile: Profile, preset: Preset, site: Site, src: Sources, o: dict[str, Origin]
) -> tuple[Volume, ...]:
    """The checkpoint volume, the data volumes, /dev/shm; their origins into `o`."""
    ckpt = profile.checkpoint

    def claim(pvc: str | None, source: str | None) -> str | None:
        # An approved data source is mounted through its claim in the project's namespace.
        return pvc or (None if source is None else site.claim_for(source, profile.project))

    volumes = [
        Volume(
            volume_name(CHECKPOINT),
            ckpt.dir,
            False,
            claim=claim(ckpt.pvc, ckpt.source),
            source=None if ckpt.pvc else ckpt.source,
            role=CHECKPOINT,
        )
    ]
    origins = [
        {
            "mount_path": src.profile("checkpoint.dir"),
            "claim": src.profile("checkpoint.pvc" if ckpt.pvc else "checkpoint.source"),
            "read_only": derived("checkpoints are written"),
        }
    ]
    for index, data in enumerate(profile.data):
        d = f"data[{index}]"
        volumes.append(
            Volume(
                volume_name(DATA, index),
                data.path,
                data.read_only,
                claim=claim(data.pvc, data.source),
                source=None if data.pvc else data.source,
                role=DATA,
            )
        )
        read_only = src.profile(f"{d}.read_only")
        origins.append(
            {
                "mount_path": src.profile(f"{d}.path"),
                "claim": src.profile(f"{d}.pvc" if data.pvc else f"{d}.source"),
                "read_only": read_only
                if read_only.line
                else derived("data is read-only unless the profile says otherwise"),
            }
        )
    if preset.shared_memory:
        volumes.append(Volume(volume_name(SHM), SHM_PATH, False, memory_size=preset.shared_memory, role=SHM))
        origins.append(
            {
                "mount_path": derived("large shared memory at /dev/shm"),
                "memory_size": src.preset("shared_memory"),
                "read_only": derived("shared memory is written"),
            }
        )
    for i, fields in enumerate(origins):
        o[f"volumes[{i}].name"] = derived("volume name")
        o |= {f"volumes[{i}].{name}": origin for name, origin in fields.items()}
    return tuple(volumes)
