"""Rules on volumes: checkpoints and data on approved claims, clean paths that never overlap."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from functools import lru_cache

from ..facts.kubeflow import SMOKE_MOUNT
from ..findings import Finding
from ..plan.volumes import CHECKPOINT, DATA
from .rules import Context, finding, rule

# The ids of this module's rules, each spelled once (rules.py's registry: `runai-spec rules`).
CHECKPOINT_ON_PVC = "checkpoint-on-pvc"
DATA_SOURCE = "data-source"
MOUNT_PATH = "mount-path"


@rule(CHECKPOINT_ON_PVC, "error", "Checkpoints go to a PVC or an approved data source")
def check_checkpoint(ctx: Context) -> Iterator[Finding]:
    """The guide: write checkpoints to a PVC or approved data source, not the image."""
    ckpt = ctx.loaded.profile.checkpoint
    if (ckpt.pvc is None) == (ckpt.source is None):
        yield finding(
            ctx,
            CHECKPOINT_ON_PVC,
            "checkpoint",
            "set exactly one of checkpoint.pvc or checkpoint.source",
            "checkpoints written to the image filesystem are lost on restart",
        )
    # the script's own checkpoint-folder argument, which validate can see: outside checkpoint.dir
    # the checkpoints land on the image filesystem whatever the profile mounts
    for flag, value in checkpoint_arguments(ctx.loaded.profile.command):
        where = posixpath.normpath(posixpath.join(ctx.loaded.profile.working_dir or "/", value))
        root = posixpath.normpath(ckpt.dir)
        if where != root and not where.startswith(root.rstrip("/") + "/"):
            yield finding(
                ctx,
                CHECKPOINT_ON_PVC,
                "command",
                f"{flag} {value} is outside checkpoint.dir ({ckpt.dir}): the script writes its "
                "checkpoints to the image filesystem, lost on restart",
                f"pass {flag} {ckpt.dir} (or a folder below it), or set checkpoint.dir to where "
                "the script writes",
            )


_CHECKPOINT_FLAG = re.compile(r"^--?[a-z_-]*(checkpoint|ckpt)[a-z_-]*(dir|path|root|folder)$")


def checkpoint_arguments(command: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """(flag, value) of each checkpoint-folder argument of COMMAND: `--checkpoint-dir X`,
    `--ckpt_path=X`, ... (a flag naming checkpoint or ckpt and a dir, path, root or folder)."""
    out: list[tuple[str, str]] = []
    for i, arg in enumerate(command):
        flag, eq, value = arg.partition("=")
        if not _CHECKPOINT_FLAG.match(flag.lower()):
            continue
        if not eq:
            if i + 1 >= len(command) or command[i + 1].startswith("-"):
                continue
            value = command[i + 1]
        if value:
            out.append((flag, value))
    return out


@rule(DATA_SOURCE, "error", "Every volume is one PVC or one data source the site approved")
def check_data_sources(ctx: Context) -> Iterator[Finding]:
    """A `source` (of the checkpoint or of a data volume) names one of the site file's
    `data_sources`; a data volume sets exactly one of `pvc` and `source`."""
    ckpt = ctx.loaded.profile.checkpoint
    if ckpt.pvc is None and ckpt.source is not None and ckpt.source not in ctx.site.data_sources:
        yield finding(
            ctx,
            DATA_SOURCE,
            "checkpoint.source",
            f"{ckpt.source!r} is not an approved data source",
            "approved: " + ", ".join(ctx.site.data_sources),
        )
    for index, data in enumerate(ctx.loaded.profile.data):
        path = f"data[{index}]"
        if (data.pvc is None) == (data.source is None):
            yield finding(
                ctx,
                DATA_SOURCE,
                path,
                "set exactly one of pvc or source",
                "a data volume mounts one claim: `pvc: NAME` or `source: NAME` "
                "(one of the site's approved data sources)",
            )
        elif data.source is not None and data.source not in ctx.site.data_sources:
            yield finding(
                ctx,
                DATA_SOURCE,
                f"{path}.source",
                f"{data.source!r} is not an approved data source",
                "approved: " + ", ".join(ctx.site.data_sources),
            )


# Mounting over these hides what the container needs (its programs and libraries, /proc, the
# service account's token), or shows the host's devices; `/` is every one of them. On a
# merged-/usr image /bin, /sbin and /lib* are /usr's (symbolic links the runtime follows), so a
# mount there hides /usr/bin or /usr/lib. /var/lib holds the image's own state (the package
# databases, dpkg's alternatives) and no data of a job, and /var/lib/kubelet is the kubelet's
# folder on the node: the whole of /var/lib is refused, not only the kubelet's folder.
SYSTEM_PATHS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/var/lib",
    "/var/run/secrets",
    "/run/secrets",
)


# A working directory may lie in the image's own folders (`/usr/src/app` is a common one); only
# the kernel's virtual file systems and the mounted credentials are never a place to run from.
WORKDIR_REFUSED = ("/proc", "/sys", "/dev", "/var/run/secrets", "/run/secrets")


PATH_NAME_MAX = 255  # Linux NAME_MAX: bytes in one path component


# controls and line separators: none is printable, so a path str.isprintable() passes has none
# and the pattern (~2 M instructions to compile) is compiled by re.search only for one that fails
PATH_CONTROL = r"[\x00-\x1f\x7f-\x9f\u2028\u2029]"


def _nested(a: str, b: str) -> bool:
    """a and b are the same folder, or one holds the other."""
    return a == b or b.startswith(a.rstrip("/") + "/") or a.startswith(b.rstrip("/") + "/")


@lru_cache(maxsize=1024)  # a pure function of the text; batches repeat their paths
def _path_problem(path: str) -> tuple[str, str] | None:
    """(message, hint) when a mount path is not one clean absolute path."""
    if not path.isprintable() and re.search(PATH_CONTROL, path):
        return (
            f"{path!r} contains a control character (a line break, a tab)",
            "write the path on one line, without control characters",
        )
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path", f"write it from the root, e.g. /{path}"
    normal = "/" + posixpath.normpath(path).lstrip("/")  # normpath keeps a leading `//`
    if ".." in path.split("/"):
        return (
            f"{path!r} contains `..`: Kubernetes mounts it at {normal}",
            "write the folder's own absolute path, without `..`",
        )
    if normal != path:
        return (f"{path!r} is not a normalised path (`//`, `/./` or a trailing `/`)", f"write {normal}")
    long = next((p for p in path.split("/") if len(p.encode("utf-8")) > PATH_NAME_MAX), None)
    if long is not None:
        return (
            f"{path[:40]!r}... has a folder name of {len(long.encode('utf-8'))} bytes: Linux "
            f"allows at most {PATH_NAME_MAX} (NAME_MAX), so nothing can be mounted there",
            f"shorten {long[:20]!r}... to at most {PATH_NAME_MAX} bytes",
        )
    return None


@lru_cache(maxsize=1024)
def _system_path(path: str) -> str | None:
    """The system path that PATH is, lies under or holds (`/`: the root itself)."""
    return "/" if path == "/" else next((s for s in SYSTEM_PATHS if _nested(path, s)), None)


def _holds(folder: str, path: str) -> bool:
    """FOLDER is PATH or holds it."""
    return folder == path or path.startswith(folder.rstrip("/") + "/")


@rule(
    MOUNT_PATH,
    "error",
    "Mount paths and the working directory are clean, absolute, not system paths, and never overlap",
)
def check_mount_paths(ctx: Context) -> Iterator[Finding]:
    """`checkpoint.dir`, every `data[].path` and `working_dir` are absolute and normalised (no
    `..`, `//`, `/./` or trailing `/`, no control characters, no folder name over 255 bytes).
    A mount is not a system path (`/etc`, `/proc`, `/sys`, `/dev`, `/usr`, `/bin`, `/sbin`,
    `/lib`, `/lib32`, `/lib64`, `/libx32`, `/boot`, `/var/lib`, `/var/run/secrets`,
    `/run/secrets`), under one, `/`, or a folder that holds one; `working_dir` may lie in the
    image's own folders (`/usr/src/app`) but not under `/proc`, `/sys`, `/dev` or the secrets
    mounts, nor under the preset's or the tool's mounts. No two
    mounts are equal or nested: not the profile's own, nor the preset's (`/dev/shm`), nor the
    tool's (`/opt/runai-spec`, where the smoke test mounts preflight.py). Kubernetes mounts
    `/var/../dev/shm` on the shared memory, and a nested mount hides the files under it. No
    mount is the working directory or holds it: it would hide the image's code there."""
    profile = ctx.loaded.profile
    theirs = [
        (f"the preset's {v.name} volume", v.mount_path)
        for v in ctx.plan.volumes
        if v.role not in (CHECKPOINT, DATA)
    ]
    theirs.append(("runai-spec's own mount for the smoke test's preflight.py", SMOKE_MOUNT))
    workdir = profile.working_dir
    if workdir is not None:
        yield from _working_dir_findings(ctx, workdir, theirs)
        if _path_problem(workdir) is not None:
            workdir = None
    mine = [("checkpoint.dir", profile.checkpoint.dir)]
    mine += [(f"data[{i}].path", d.path) for i, d in enumerate(profile.data)]
    seen: list[tuple[str, str]] = []
    for field, path in mine:
        problem = _path_problem(path)
        if problem is not None:
            yield finding(ctx, MOUNT_PATH, field, *problem)
            continue
        clash = next(((who, other) for who, other in theirs if _nested(path, other)), None)
        system = _system_path(path)
        mount = next(((who, other) for who, other in seen if _nested(path, other)), None)
        if clash is not None and path != "/":
            yield finding(
                ctx,
                MOUNT_PATH,
                field,
                f"{path} {'is' if path == clash[1] else 'overlaps'} {clash[0]} ({clash[1]})",
                "mount it somewhere of its own, e.g. /data/<name>",
            )
        elif system is not None:
            what = (
                "the root: it hides the whole image"
                if system == "/"
                else "a system path"
                if system == path
                else f"under the system path {system}"
                if path.startswith(system)
                else f"a folder that holds the system path {system}"
            )
            yield finding(
                ctx,
                MOUNT_PATH,
                field,
                f"{path} is {what}",
                "mount it somewhere of its own, e.g. /data/<name> or /checkpoints",
            )
        elif mount is not None:
            yield finding(
                ctx,
                MOUNT_PATH,
                field,
                f"{path} {'is also' if path == mount[1] else 'overlaps'} {mount[0]} ({mount[1]})",
                "give each volume a folder of its own, neither inside the other",
            )
        elif workdir is not None and _holds(path, workdir):
            yield finding(
                ctx,
                MOUNT_PATH,
                field,
                f"{path} {'is' if path == workdir else 'holds'} the working directory "
                f"{workdir}: the volume would hide the image's code there",
                "mount it somewhere of its own, e.g. /data/<name> or /checkpoints, outside working_dir",
            )
        seen.append((field, path))


def _working_dir_findings(ctx: Context, workdir: str, theirs: list[tuple[str, str]]) -> Iterator[Finding]:
    """working_dir is one clean absolute path, not in the kernel's virtual file systems or
    the mounted credentials (WORKDIR_REFUSED), and no mount of the preset or runai-spec holds
    it. It may lie anywhere else, the image's own folders under /usr included."""
    problem = _path_problem(workdir)
    if problem is not None:
        yield finding(ctx, MOUNT_PATH, "working_dir", *problem)
        return
    system = next((s for s in WORKDIR_REFUSED if _holds(s, workdir)), None)
    clash = next(((who, other) for who, other in theirs if _holds(other, workdir)), None)
    if system is not None:
        what = "a system path" if system == workdir else f"under the system path {system}"
        yield finding(
            ctx,
            MOUNT_PATH,
            "working_dir",
            f"{workdir} is {what}: the entry point and what the script writes by "
            "relative path would be there",
            "use the folder of the image that holds the training code, e.g. /workspace",
        )
    elif clash is not None:
        yield finding(
            ctx,
            MOUNT_PATH,
            "working_dir",
            f"{workdir} is {'' if workdir == clash[1] else 'under '}{clash[0]} "
            f"({clash[1]}): that mount would hide the image's code there",
            "use the folder of the image that holds the training code, e.g. /workspace",
        )
