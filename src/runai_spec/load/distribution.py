"""`presets sync`: the site's current presets from a folder or the cluster, trusted via pinned keys."""

# The site's current presets come from one source: a folder (a checkout of the presets
# repository, on NFS or pulled by the researcher) or the cluster (a ConfigMap the AI Engineers
# publish next to the admission policy's parameters). Whatever the source, only the files'
# bytes travel; the trust does not: every approval is verified against the allowed_signers of
# this installation (registry.pinned_signers), never against a file that came with the
# presets. A sync is all or nothing: the fetched set is staged, verified as a whole, and only
# then swapped in for the previous one; a refused set leaves the presets in use as they were.
# The synced copy is a cache that proves nothing by itself: PresetRegistry verifies every file
# again (sha256, signature, expiry at today's date) each time a command reads it.

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, PresetError
from ..facts.kubeflow import MANAGED_BY, MANAGED_BY_LABEL
from ..files import exchange_folders
from .ledger import LEDGER_FILE
from .registry import SYNC_RECORD, PresetRegistry, pinned_signers, synced_presets_dir
from .site import SITE_FILE
from .yaml import MAX_BYTES

FROM_ENV = "RUNAI_SPEC_PRESETS_FROM"  # a site's default source (an environment module sets it)
CLUSTER = "cluster"  # `--from cluster`: the ConfigMap published next to the policy's parameters
SHIPPED = "shipped"  # `--from shipped`: back to the presets of this installation (a folder: ./shipped)
FILES_CONFIGMAP = "runai-spec-preset-files"
MAX_FILES = 500  # a presets folder holds tens of files; more is not a presets folder


@dataclass(frozen=True)
class SyncResult:
    """What `presets sync` did: the files now in use (sorted) and where they came from."""

    source: str
    files: tuple[str, ...]
    folder: Path
    signers: Path

    @property
    def summary(self) -> str:
        """The one line `presets sync` prints on stderr."""
        if self.source == SHIPPED:
            return (
                f"presets: the synced copy is removed; in use: those shipped with runai-spec ({self.folder})"
            )
        return (
            f"synced {len(self.files)} files from {self.source} into {self.folder}; "
            f"verified against {self.signers}"
        )


def sync_source(given: str | None) -> str:
    """Where to sync from: --from, else $RUNAI_SPEC_PRESETS_FROM, else the last sync's source."""
    if given:
        return given
    if os.environ.get(FROM_ENV):
        return os.environ[FROM_ENV]
    record = synced_record()
    if record is not None and isinstance(record.get("from"), str):
        return str(record["from"])
    raise InputError(
        "no presets source: this installation has never synced",
        field="--from",
        hint=f"`runai-spec presets sync --from cluster`, or `--from DIR` (the presets repository's "
        f"presets/ folder, e.g. on NFS); a site may set {FROM_ENV} for everyone",
    )


def synced_record() -> dict[str, Any] | None:
    """What the last sync recorded (source, time, files), or None; shown, never trusted."""
    path = synced_presets_dir() / SYNC_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_folder(folder: Path) -> dict[str, bytes]:
    """The preset files of FOLDER (*.yaml: the presets, site.yaml, approvals.yaml) as bytes;
    anything else there (allowed_signers, a README, .git) is not taken."""
    shown = str(folder)
    if not folder.is_dir():
        raise InputError(
            "no such folder",
            file=shown,
            field="--from",
            hint="the presets repository's presets/ folder (a checkout, e.g. on NFS), or `cluster`",
        )
    files: dict[str, bytes] = {}
    try:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if not entry.name.endswith(".yaml") or entry.name.startswith("."):
                continue
            if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                raise PresetError(
                    "is not a plain file (a link?); presets must be plain files",
                    file=str(folder / entry.name),
                    hint="nothing was synced; tell the SCC AI Engineers",
                )
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # a link put in since
            with os.fdopen(fd, "rb") as handle:
                files[entry.name] = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(
            f"cannot read: {exc.strerror or exc}",
            file=exc.filename or shown,
            field="--from",
            hint="nothing was synced; check that the folder and its files can be read",
        ) from None
    return files


def sync_files(
    files: Mapping[str, bytes], shown: str, source: str, *, today: dt.date | None = None
) -> SyncResult:
    """Stage FILES (fetched from SHOWN), verify them as a whole against the pinned
    allowed_signers, and only then make them the presets in use; a PresetError (nothing
    changed) naming the first refused file otherwise."""
    _check_names(files, shown)
    signers = pinned_signers()
    target = synced_presets_dir()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with _sync_lock(target):
            _stage_and_swap(files, shown, source, target, today, signers)
    except OSError as exc:
        raise InputError(
            f"cannot write the synced presets: {exc.strerror or exc}; the presets in use are unchanged",
            file=str(target),
            hint="check that the folder can be written (XDG_CACHE_HOME), then sync again",
        ) from None
    return SyncResult(shown, tuple(sorted(files)), target, signers)


@contextlib.contextmanager
def _sync_lock(target: Path) -> Iterator[None]:
    """One sync at a time per cache (flock, released when the process ends however it ends);
    the stages a killed sync left are removed under it."""
    with open(target.with_name(f".{target.name}.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in target.parent.glob(f".{target.name}.sync-*"):
            shutil.rmtree(stale, ignore_errors=True)
        yield


def _stage_and_swap(
    files: Mapping[str, bytes], shown: str, source: str, target: Path, today: dt.date | None, signers: Path
) -> None:
    """FILES written into a stage beside TARGET, verified there against SIGNERS (on TODAY), then
    swapped in for TARGET at once; the stage removed whatever happens."""
    stage = _new_stage(target)
    try:
        for name, data in files.items():
            (stage / name).write_bytes(data)
        problems = PresetRegistry(stage, today=today, signers=signers).verify().problems
        if problems:
            raise _refusal([p.replace(str(stage), shown, 1) for p in problems], signers)
        record = {
            "from": source,
            "synced_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
        }
        (stage / SYNC_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if target.exists():
            exchange_folders(stage, target)  # readers see the old set or the new one, never a mix
        else:
            os.rename(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _check_names(files: Mapping[str, bytes], shown: str) -> None:
    for name, data in files.items():
        plain = name.endswith(".yaml") and "/" not in name and not name.startswith(".") and name.isascii()
        if not plain or len(data) > MAX_BYTES:
            what = (
                "is not a preset file name (NAME.yaml)" if not plain else f"is larger than {MAX_BYTES} bytes"
            )
            raise PresetError(
                what, file=f"{shown}/{name}", hint="nothing was synced; tell the SCC AI Engineers"
            )
    missing = [n for n in (LEDGER_FILE, SITE_FILE) if n not in files]
    if missing or len(files) > MAX_FILES:
        raise PresetError(
            f"no {' and no '.join(missing)}: not a presets folder"
            if missing
            else f"more than {MAX_FILES} files: not a presets folder",
            file=shown,
            field="--from",
            hint="the presets repository's presets/ folder (its site.yaml, approvals.yaml and presets)",
        )


def _new_stage(target: Path) -> Path:
    for attempt in range(100):
        stage = target.with_name(f".{target.name}.sync-{os.getpid()}-{attempt}")
        try:
            stage.mkdir(mode=0o700)
            return stage
        except FileExistsError:
            continue
    raise InputError("cannot stage the sync: no unused folder name", file=str(target.parent))


def _refusal(problems: list[str], signers: Path) -> PresetError:
    """The first refused file as the error (`error: SOURCE/FILE: field: what`), the others
    as further lines, and one hint: nothing changed, and what vouches for a preset here."""
    first = problems[0].removeprefix("error: ")
    return PresetError(
        first,
        hint=f"nothing was synced, the presets in use are unchanged; every approval must verify "
        f"against this installation's allowed_signers ({signers}): tell the SCC AI Engineers",
        also=problems[1:],
    )


def files_configmap(registry: PresetRegistry, namespace: str) -> dict[str, Any]:
    """The ConfigMap that `presets sync --from cluster` reads: the approved folder's files,
    byte for byte (approvals.yaml, site.yaml, each preset), never its allowed_signers. Only a
    folder that verifies is published."""
    problems = registry.verify().problems
    if problems:
        raise PresetError(
            problems[0].removeprefix("error: "),
            hint="only a presets folder that `runai-spec presets verify` accepts is published",
            also=list(problems[1:]),
        )
    names = [LEDGER_FILE, SITE_FILE, *(f"{name}.yaml" for name in registry.names())]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": FILES_CONFIGMAP,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        },
        "data": {name: (registry.root / name).read_bytes().decode("utf-8") for name in sorted(names)},
    }


def forget_synced() -> SyncResult:
    """Remove the synced copy (`--from shipped`), so that the presets shipped with this
    installation are in use again (a release newer than the copy brings its own)."""
    target = synced_presets_dir()
    if target.parent.is_dir():
        try:
            with _sync_lock(target):
                if target.exists():  # moved aside at once: a reader sees the copy or none
                    aside = target.with_name(f".{target.name}.sync-{os.getpid()}-gone")
                    os.rename(target, aside)
                    shutil.rmtree(aside, ignore_errors=True)
        except OSError as exc:
            raise InputError(
                f"cannot remove the synced presets: {exc.strerror or exc}", file=str(target)
            ) from None
    return SyncResult(SHIPPED, (), PresetRegistry().root, pinned_signers())


def configmap_files(data: Mapping[str, str]) -> dict[str, bytes]:
    """The files a published ConfigMap's data holds, as bytes (UTF-8, as they were written)."""
    return {name: text.encode("utf-8") for name, text in data.items()}
