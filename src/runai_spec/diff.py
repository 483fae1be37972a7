"""`diff --against DIR`: what profiles render now against committed manifests, for CI."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import InputError, RunaiSpecError
from .kubeflow import API_VERSION, KIND
from .loading import MAX_BYTES, load_documents, read_text
from .manifests import Manifest, dump, object_key
from .pipeline import workloads
from .presets import PresetRegistry
from .secrets import MASK as MASK
from .secrets import mask_object
from .workload import Workload


class HasLines(Protocol):
    """An error or a finding: what stopped a profile, as its printed lines."""

    def lines(self) -> list[str]: ...


# A copy with secret-named variables' values and every credential-shaped string masked.
mask = mask_object


@dataclass(frozen=True)
class ObjectDiff:
    key: str
    status: str  # added, removed, changed
    diff: str


@dataclass(frozen=True)
class ProfileDiff:
    profile: str
    committed: str
    objects: tuple[ObjectDiff, ...]

    @property
    def changed(self) -> bool:
        return bool(self.objects)


def _by_key(manifests: Iterable[Manifest]) -> dict[str, Manifest]:
    return {object_key(m): m for m in manifests}


def compare(rendered: Iterable[Manifest], committed: Iterable[Manifest], *,
            new_label: str, old_label: str) -> tuple[ObjectDiff, ...]:
    now, before = _by_key(rendered), _by_key(committed)
    out: list[ObjectDiff] = []
    for key in list(before) + [k for k in now if k not in before]:
        old = dump([mask(before[key])]) if key in before else ""
        new = dump([mask(now[key])]) if key in now else ""
        if old == new:
            continue
        status = "added" if key not in before else "removed" if key not in now else "changed"
        text = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                            new.splitlines(keepends=True),
                                            f"{old_label} ({key})", f"{new_label} ({key})"))
        out.append(ObjectDiff(key, status, text))
    return tuple(out)


# What runai-spec renders: a committed document of any other kind is never printed (a merge
# request could commit a kubeconfig or a Docker config under a manifest's name).
OUR_KINDS = frozenset({(API_VERSION, KIND), ("v1", "ConfigMap")})


def _only_our_manifests(documents: Iterable[Manifest], path: Path) -> None:
    for index, doc in enumerate(documents):
        kind = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else None
        if kind not in OUR_KINDS:
            raise InputError(f"document {index + 1} is not a manifest runai-spec renders "
                             "(PyTorchJob or ConfigMap); its content is not shown",
                             file=str(path), hint="commit only the output of `runai-spec render`")


def diff_workload(workload: Workload, against: Path) -> ProfileDiff:
    path = workload.path
    committed_path = against / f"{workload.plan.name}.yaml"
    if committed_path.is_file():
        # the common CI case: the committed file is byte-identical to the canonical dump
        if read_text(committed_path, max_bytes=16 * MAX_BYTES) == dump(list(workload.manifests)):
            return ProfileDiff(str(path), str(committed_path), ())
        committed = load_documents(committed_path)
        _only_our_manifests(committed, committed_path)
    else:
        committed = []
    objects = compare(workload.manifests, committed, new_label=f"render {path}",
                      old_label=str(committed_path))
    return ProfileDiff(str(path), str(committed_path), objects)


def diff_all(paths: list[Path], against: Path, *, registry: PresetRegistry | None = None,
             step: Callable[[], None] | None = None
             ) -> tuple[list[ProfileDiff], list[RunaiSpecError]]:
    if not against.is_dir():
        raise InputError(f"{against}: not a folder", hint="pass the folder of committed "
                         "manifests, one <name>.yaml per workload")
    done: list[ProfileDiff] = []
    bad: list[RunaiSpecError] = []
    for item in workloads(paths, registry):  # one at a time: only the (small) diffs are kept
        if not isinstance(item, Workload):
            bad.append(item)
        else:
            try:
                done.append(diff_workload(item, against))
            except InputError as exc:  # an unreadable committed file
                bad.append(exc)
        if step is not None:
            step()
    return done, bad


LIVE = "live"


def ordered_like(value: Any, like: Any) -> Any:
    """`value` with its keys in `like`'s order, then the others sorted.

    The canonical dump keeps key order, and a server's key order is its own: two objects
    that hold the same must dump to the same text whatever order they arrived in.
    """
    if isinstance(value, dict):
        template = like if isinstance(like, dict) else {}
        keys = [k for k in template if k in value] + sorted((k for k in value if k not in template),
                                                            key=str)
        return {k: ordered_like(value[k], template.get(k)) for k in keys}
    if isinstance(value, list):
        items = like if isinstance(like, list) else []
        return [ordered_like(item, items[i] if i < len(items) else None)
                for i, item in enumerate(value)]
    return value


def diff_live(profile: str, rendered: Iterable[Manifest],
              objects: Iterable[tuple[Manifest | None, Manifest]]) -> ProfileDiff:
    """`diff --live`: each object as it is live (old; None when absent, so `added`) against
    what a server-side dry-run apply would store (new).

    Both sides come from the server with its managed fields stripped, so defaults the server
    fills in are on both sides and only what submitting would change shows.
    """
    order = _by_key(rendered)
    live: list[Manifest] = []
    applied: list[Manifest] = []
    for before, after in objects:
        like = order.get(object_key(after), after)
        applied.append(ordered_like(after, like))
        if before is not None:
            live.append(ordered_like(before, like))
    return ProfileDiff(profile, LIVE, compare(applied, live, new_label=f"dry-run apply {profile}",
                                              old_label=LIVE))


def summary(results: list[ProfileDiff]) -> tuple[int, int]:
    changed = sum(1 for r in results if r.changed)
    return changed, sum(len(r.objects) for r in results)


def as_text(results: list[ProfileDiff]) -> str:
    parts = [o.diff for r in results for o in r.objects]
    changed, objects = summary(results)
    parts.append(f"{len(results)} profile(s), {changed} changed, {objects} object(s) differ\n")
    return "".join(parts)


def as_json(results: list[ProfileDiff], bad: Sequence[HasLines]) -> str:
    changed, objects = summary(results)
    return json.dumps({
        "profiles": len(results), "changed": changed, "objects_differing": objects,
        "results": [{"profile": r.profile, "committed": r.committed, "changed": r.changed,
                     "objects": [{"key": o.key, "status": o.status, "diff": o.diff}
                                 for o in r.objects]} for r in results],
        "errors": [" ".join(e.lines()) for e in bad],
    }, indent=2)


def as_markdown(results: list[ProfileDiff], bad: Sequence[HasLines]) -> str:
    changed, objects = summary(results)
    lines = ["## runai-spec diff", "",
             f"{len(results)} profile(s), **{changed} changed**, {objects} object(s) differ.", ""]
    for e in bad:
        lines.append(f"- :x: `{' '.join(e.lines())}`")
    for r in results:
        for o in r.objects:
            lines += [f"<details><summary><code>{r.profile}</code>: {o.key} ({o.status})"
                      "</summary>", "", "```diff", o.diff.rstrip("\n"), "```", "",
                      "</details>", ""]
    return "\n".join(lines) + "\n"
