"""A rehearsed pod's file system as the cluster gives it (`rehearse --own-script`).

- The working directory is the image's: every container start (the first, and each restart
  the kubelet makes) begins in a fresh copy of the researcher's working tree, so whatever the
  script wrote outside a volume is gone after a restart, as in the cluster.
- Volumes are the manifest's: each PVC is one folder of the rehearsal shared by every pod
  (read-only where the mount is), and `/dev/shm` (an `emptyDir` of medium Memory) is a tmpfs
  of the pod's own. Where this machine allows it (root, `unshare` and mount namespaces) they
  are bind-mounted at their real mount paths inside a mount namespace of the pod's own, so
  the script needs no change; otherwise they are not mounted and the table says so.

The pod's container starts through a small `sh` wrapper written here (its argv prefix)."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUDIT_ENV = "RUNAI_SPEC_AUDIT_DIR"  # where the audit layer writes (audit/sitecustomize.py)
AUDIT_KEY_ENV = "RUNAI_SPEC_AUDIT_KEY"  # the rehearsal's key its records carry an HMAC of
POD_ENV = "RUNAI_SPEC_POD"
IMAGE_DIR = "image"  # the pod's fresh copy of the working tree, under its pod folder
COPY_IGNORE = (".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache")


@dataclass(frozen=True)
class PodFilesystem:
    wrapper: tuple[str, ...]  # prepended to the container's argv
    mounted: bool  # volumes bind-mounted at their real paths
    note: str  # one line for the table


NEW_ROOT = "root"  # under the pod folder: the pod's own `/` where a mount path is missing here
# A folder of this machine made into a tmpfs (in the pod's mount namespace only) that holds a
# bind mount of each of its entries, so that a mount point can be made in it: `$new$1` (`$1`
# "" for `/`). Symbolic links are copied as links.
_SHADOW = (
    'shadow() { t="$new$1"; mount -t tmpfs -o mode=0755 tmpfs "$t"; '
    'for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do '
    '[ -e "$e" ] || [ -L "$e" ] || continue; b="$t/${e##*/}"; '
    'if [ -L "$e" ]; then cp -P "$e" "$b"; '
    'elif [ -d "$e" ]; then mkdir "$b"; mount --rbind "$e" "$b"; '
    'else : > "$b"; mount --bind "$e" "$b"; fi; done; }'
)


def _existing_folder(path: str) -> str:
    """The deepest folder of this machine that holds PATH (PATH itself where it is one)."""
    folder = path
    while folder != "/" and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


def _mount_script(binds: list[tuple[str, str, bool]], tmpfs: list[str], new: Path) -> str:
    """The commands, run in the pod's own mount namespace, that mount its volumes at their
    paths, then run the container's argv.

    Nothing outside the rehearsal's folder is created or written (issue 23, third red-team
    pass: `mkdir -p <mountPath>` as root made `/checkpoints` on this machine). Where every
    mount path is a folder here, the volume is mounted over it, and only in the namespace.
    Where one is missing, the pod gets a `/` of its own (NEW_ROOT, in the pod's folder): a
    tmpfs of bind mounts of this machine's entries, in which the missing folders are made on
    tmpfs (the deepest existing folder above each made a tmpfs of binds the same way), and
    the container runs chrooted there."""
    targets = [path for _, path, _ in binds] + tmpfs
    missing = [path for path in targets if not os.path.isdir(path)]
    if not missing:
        mounts = ["set -e"]
        for source_dir, path, read_only in binds:
            mounts.append(f"mount --bind {shlex.quote(source_dir)} {shlex.quote(path)}")
            if read_only:
                mounts.append(f"mount -o remount,bind,ro {shlex.quote(path)}")
        mounts += [f"mount -t tmpfs tmpfs {shlex.quote(path)}" for path in tmpfs]
        return "; ".join([*mounts, 'exec "$@"'])
    # this machine's links resolved first (`/var/run` -> `/run`): below the deepest folder that
    # exists nothing is a link, so mkdir only ever makes folders on the pod's tmpfs
    binds = [(source, os.path.realpath(path), ro) for source, path, ro in binds]
    tmpfs = [os.path.realpath(path) for path in tmpfs]
    missing = [os.path.realpath(path) for path in missing]
    new.mkdir(parents=True, exist_ok=True)
    shadows = sorted({_existing_folder(path) for path in missing} - {"/"}, key=lambda p: p.count("/"))
    inner = ["set -e", f"new={shlex.quote(str(new))}", _SHADOW, 'shadow ""']
    inner += [f"shadow {shlex.quote(folder)}" for folder in shadows]
    for source_dir, path, read_only in binds:
        target = shlex.quote(str(new) + path)
        inner += [f"mkdir -p {target}", f"mount --bind {shlex.quote(source_dir)} {target}"]
        if read_only:
            inner.append(f"mount -o remount,bind,ro {target}")
    for path in tmpfs:
        target = shlex.quote(str(new) + path)
        inner += [f"mkdir -p {target}", f"mount -t tmpfs tmpfs {target}"]
    # the working directory (the image copy) is reached through the binds of the new `/`
    inner.append('exec chroot "$new" sh -c \'cd "$0" && exec "$@"\' "$(pwd)" "$@"')
    return "; ".join(inner)


def audit_layer_dir() -> Path:
    """The shipped folder of the audit layer (its sitecustomize.py)."""
    return Path(__file__).resolve().parent.parent / "audit"


@functools.cache
def can_mount() -> bool:
    """Root, `unshare`, and a mount namespace that can be made (not in every container)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _volumes(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any]
) -> list[tuple[str, str, bool, Mapping[str, Any]]]:
    """(name, mount path, read-only, volume source) of each mount of the container."""
    sources = {str(v.get("name")): v for v in pod_spec.get("volumes") or [] if isinstance(v, dict)}
    out: list[tuple[str, str, bool, Mapping[str, Any]]] = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount.get("name"))
        out.append((name, str(mount.get("mountPath")), bool(mount.get("readOnly")), sources.get(name, {})))
    return out


def pod_filesystem(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    root: Path,
    pod_dir: Path,
    tree: Path,
    *,
    isolate: bool | None = None,
) -> PodFilesystem:
    """The wrapper that gives one pod its image copy and its volumes."""
    isolate = can_mount() if isolate is None else isolate
    image = pod_dir / IMAGE_DIR
    attempts = pod_dir / "container-starts"
    binds: list[tuple[str, str, bool]] = []
    tmpfs: list[str] = []
    for name, path, read_only, source in _volumes(pod_spec, container):
        if "persistentVolumeClaim" in source:
            claim = str(source["persistentVolumeClaim"].get("claimName", name))
            folder = root / "volumes" / claim
            folder.mkdir(parents=True, exist_ok=True)
            binds.append((str(folder), path, read_only))
        elif (source.get("emptyDir") or {}).get("medium") == "Memory":
            tmpfs.append(path)
    skipped = list(COPY_IGNORE)
    if root.resolve().is_relative_to(tree.resolve()):
        # the rehearsal's own folder (--logs) inside the tree: never part of the image, and
        # copying it would copy the image into itself
        skipped.append("./" + str(root.resolve().relative_to(tree.resolve())))
    ignore = " ".join(f"--exclude={shlex.quote(p)}" for p in skipped)
    lines = [
        "set -e",
        # which start of this container this is (0: the first; the kubelet's restarts count up)
        f"n=$(cat {shlex.quote(str(attempts))} 2>/dev/null || echo -1); n=$((n + 1))",
        f'echo "$n" > {shlex.quote(str(attempts))}',
        "export RUNAI_SPEC_ATTEMPT=$n",
        # the image's file system: a fresh copy of the working tree at every container start
        f"rm -rf {shlex.quote(str(image))}",
        f"mkdir -p {shlex.quote(str(image))}",
        f"tar -C {shlex.quote(str(tree))} {ignore} -cf - . | tar -C {shlex.quote(str(image))} -xf -",
        f"cd {shlex.quote(str(image))}",
    ]
    if isolate and (binds or tmpfs):
        lines.append(
            "exec unshare --mount --propagation private sh -c "
            f'{shlex.quote(_mount_script(binds, tmpfs, pod_dir / NEW_ROOT))} sh "$@"'
        )
        note = (
            "volumes bind-mounted at their paths in a mount namespace per pod ("
            + ", ".join(p for _, p, _ in binds)
            + (", " if binds and tmpfs else "")
            + ", ".join(f"{p} tmpfs" for p in tmpfs)
            + "); working directory: a fresh "
            "copy of your tree at every container start"
        )
    else:
        lines.append('exec "$@"')
        why = "not root" if os.geteuid() != 0 else "no mount namespaces here"
        note = (
            f"volumes NOT mounted at their paths ({why}): the script's paths are this "
            "machine's; working directory: a fresh copy of your tree at every container start"
        )
    script = pod_dir / "container.sh"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return PodFilesystem(("sh", str(script)), isolate and bool(binds or tmpfs), note)


def pvc_paths(pod_spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, ...]:
    """The mount paths of the container's PersistentVolumeClaims: what outlives the pod."""
    return tuple(
        path for _, path, _, source in _volumes(pod_spec, container) if "persistentVolumeClaim" in source
    )
