"""`diff --against DIR`: what profiles render now against committed manifests, for CI."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError, RunaiSpecError
from ..facts import mpi
from ..facts.kubeflow import API_VERSION, KIND, SMOKE_SUFFIX
from ..load.registry import PresetRegistry
from ..load.yaml import MAX_BYTES, load_documents, read_text
from ..pipeline.spool import Names, Reported, Spooled
from ..pipeline.stream import workloads
from ..pipeline.workload import Workload
from ..render.manifests import Manifest, dump, object_key
from ..secrets import MASK as MASK
from ..secrets import mask_object
from ..text import html_text, md_code, md_fence, md_text


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
    profile: str  # "" for a stale manifest: a committed file no profile renders
    committed: str
    objects: tuple[ObjectDiff, ...]
    note: str = ""  # what the diff alone does not say: no such file, a stale manifest
    # the workload's name and namespace, for diff_all's notes (never printed)
    workload: str = field(default="", compare=False)
    namespace: str = field(default="", compare=False)

    @property
    def changed(self) -> bool:
        return bool(self.objects)


def _diff_record(result: ProfileDiff) -> tuple[Any, ...]:
    """RESULT as builtins, for the spool's marshal (the spool's encode)."""
    objects = tuple((o.key, o.status, o.diff) for o in result.objects)
    return (result.profile, result.committed, objects, result.note, result.workload, result.namespace)


def _diff_from_record(record: tuple[Any, ...]) -> ProfileDiff:
    profile, committed, objects, note, workload, namespace = record
    return ProfileDiff(  # (the spool's decode)
        profile, committed, tuple(ObjectDiff(*o) for o in objects), note, workload, namespace
    )


def _spool() -> Spooled[ProfileDiff]:
    """Where diff_all keeps its results: out of memory, one per profile."""
    return Spooled(_diff_record, _diff_from_record)


def _by_key(manifests: Iterable[Manifest]) -> dict[str, Manifest]:
    return {object_key(m): m for m in manifests}


def compare(
    rendered: Iterable[Manifest], committed: Iterable[Manifest], *, new_label: str, old_label: str
) -> tuple[ObjectDiff, ...]:
    now, before = _by_key(rendered), _by_key(committed)
    out: list[ObjectDiff] = []
    for key in list(before) + [k for k in now if k not in before]:
        if key in before and key in now and before[key] == now[key]:
            continue
        old = dump([mask(before[key])]) if key in before else ""
        new = dump([mask(now[key])]) if key in now else ""
        status = "added" if key not in before else "removed" if key not in now else "changed"
        text = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{old_label} ({key})",
                f"{new_label} ({key})",
            )
        )
        if old == new:  # only a masked value differs: say so, without showing either
            text = (
                f"--- {old_label} ({key})\n+++ {new_label} ({key})\n"
                "# a masked (credential-named or credential-shaped) value differs\n"
            )
        out.append(ObjectDiff(key, status, text))
    return tuple(out)


# What runai-spec renders: a committed document of any other kind is never printed (a merge
# request could commit a kubeconfig or a Docker config under a manifest's name).
OUR_KINDS = frozenset({(API_VERSION, KIND), (mpi.API_VERSION, mpi.KIND), ("v1", "ConfigMap")})


def _only_our_manifests(documents: Iterable[Manifest], path: Path) -> None:
    for index, doc in enumerate(documents):
        kind = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else None
        if kind not in OUR_KINDS:
            raise InputError(
                f"document {index + 1} is not a manifest runai-spec renders "
                "(PyTorchJob, MPIJob or ConfigMap); its content is not shown",
                file=str(path),
                hint="commit only the output of `runai-spec render`",
            )


def diff_workload(workload: Workload, against: Path) -> ProfileDiff:
    path = workload.path
    committed_path = against / f"{workload.plan.name}.yaml"
    if committed_path.is_file():
        # the common CI case: the committed file is byte-identical to the canonical dump
        if read_text(committed_path, max_bytes=16 * MAX_BYTES) == dump(list(workload.manifests)):
            return ProfileDiff(
                str(path), str(committed_path), (), "", workload.plan.name, workload.plan.namespace
            )
        committed = load_documents(committed_path)
        _only_our_manifests(committed, committed_path)
    else:
        committed = []
    objects = compare(
        workload.manifests, committed, new_label=f"render {path}", old_label=str(committed_path)
    )
    return ProfileDiff(
        str(path), str(committed_path), objects, "", workload.plan.name, workload.plan.namespace
    )


def diff_all(
    paths: Sequence[Path],
    against: Path,
    *,
    registry: PresetRegistry | None = None,
    step: Callable[[], None] | None = None,
) -> tuple[Spooled[ProfileDiff], list[RunaiSpecError]]:
    """Each profile against its `<name>.yaml` in `against`; then the folder's other manifests:
    one holding a workload whose file is missing is named in that workload's note, and one no
    profile renders is reported as stale (every object removed). Per profile, only its
    name's hash is kept in memory (the results are spooled)."""
    if not against.is_dir():
        raise InputError(
            f"{against}: not a folder",
            hint="pass the folder of committed manifests, one <name>.yaml per workload",
        )
    done = _spool()
    bad: list[RunaiSpecError] = []
    claimed = Names()  # the workloads' names: <name>.yaml and <name>-smoke.yaml are theirs
    missing = 0  # results whose file is missing
    for item in workloads(paths, registry):  # one at a time: only the (small) diffs are kept
        if not isinstance(item, Workload):
            bad.append(item)
        else:
            claimed.add(item.plan.name)
            try:
                result = diff_workload(item, against)
            except InputError as exc:  # an unreadable committed file
                bad.append(exc)
            else:
                missing += not Path(result.committed).is_file()
                done.append(result)
        if step is not None:
            step()
    others = _other_manifests(against, claimed)
    if missing:
        done = _noted(done, lambda result: _missing_note(result, against, others))
    if others:  # a smoke test's file: not stale
        done = _noted(done, lambda result: _smoke_note(result, others))
    if not bad:  # with a profile that did not load, its own file would look stale
        for path, docs in sorted(others.items()):
            done.append(_stale(path, docs))
    return done, bad


def _noted(results: Spooled[ProfileDiff], note: Callable[[ProfileDiff], str]) -> Spooled[ProfileDiff]:
    """RESULTS read back once, each with NOTE's words (if any) added to its note."""
    out = _spool()
    for result in results:
        more = note(result)
        out.append(replace(result, note="; ".join(filter(None, (result.note, more)))) if more else result)
    return out


def _missing_note(result: ProfileDiff, against: Path, others: dict[Path, list[Manifest]]) -> str:
    """A result whose file is missing (every object added): its note names the other files
    that hold its objects, which are then no longer stale (OTHERS loses them)."""
    if Path(result.committed).is_file():
        return ""
    name, keys = result.workload, {o.key for o in result.objects}
    holders = [path.name for path, docs in others.items() if keys & {object_key(d) for d in docs}]
    note = f"no file named {name}.yaml in {against}: every object shows as added"
    if holders:
        note += (
            f"; {', '.join(holders)} holds this workload's objects: name it {name}.yaml, as `render -d` does"
        )
    for path in [p for p in others if p.name in holders]:
        del others[path]
    return note


def _smoke_note(result: ProfileDiff, others: dict[Path, list[Manifest]]) -> str:
    """Files of OTHERS that hold only RESULT's smoke test: named in its note, and no longer
    stale (OTHERS loses them)."""
    if not others:
        return ""
    keys = smoke_keys(result.workload, result.namespace)
    holders = [path.name for path, docs in others.items() if {object_key(d) for d in docs} <= keys]
    for path in [p for p in others if p.name in holders]:
        del others[path]
    if not holders:
        return ""
    return (
        f"{', '.join(holders)} holds its smoke test (`render --smoke`): not "
        f"compared; `render --smoke -d` names it {result.workload}-smoke.yaml"
    )


def smoke_keys(name: str, namespace: str) -> frozenset[str]:
    """The object keys of workload NAME's smoke test (its job and ConfigMap), by name alone."""
    from ..pipeline.smoke import smoke_names

    job, configmap = smoke_names(name)
    where = {"namespace": namespace}
    return frozenset(
        {
            object_key({"kind": KIND, "metadata": {**where, "name": job}}),
            object_key({"kind": "ConfigMap", "metadata": {**where, "name": configmap}}),
        }
    )


def _other_manifests(against: Path, claimed: Names) -> dict[Path, list[Manifest]]:
    """The folder's `*.yaml` files no workload owns (`<name>.yaml`, `<name>-smoke.yaml`), that
    hold manifests runai-spec renders (others, and files that do not parse, are not ours to
    judge and are left alone); the folder is streamed, only those files kept, in name order."""
    found: dict[Path, list[Manifest]] = {}
    unclaimed = []
    with os.scandir(against) as listing:
        for entry in listing:
            stem = entry.name.removesuffix(".yaml")
            if stem == entry.name or stem in claimed or stem.removesuffix(SMOKE_SUFFIX) in claimed:
                continue
            unclaimed.append(against / entry.name)
    for path in sorted(unclaimed):
        if path.name.startswith(".") or not path.is_file() or path.is_symlink():
            continue
        try:
            docs = load_documents(path)
            _only_our_manifests(docs, path)
        except InputError:
            continue
        if docs:
            found[path] = docs
    return found


def _stale(path: Path, docs: list[Manifest]) -> ProfileDiff:
    objects = compare([], docs, new_label="no profile", old_label=str(path))
    return ProfileDiff(
        "",
        str(path),
        objects,
        note=f"stale: {path} is rendered by none of "
        "the profiles given (its profile removed or renamed?): delete it, or "
        "pass its profile too",
    )


LIVE = "live"


def ordered_like(value: Any, like: Any) -> Any:
    """`value` with its keys in `like`'s order, then the others sorted.

    The canonical dump keeps key order, and a server's key order is its own: two objects
    that hold the same must dump to the same text whatever order they arrived in.
    """
    if isinstance(value, dict):
        template = like if isinstance(like, dict) else {}
        keys = [k for k in template if k in value] + sorted((k for k in value if k not in template), key=str)
        return {k: ordered_like(value[k], template.get(k)) for k in keys}
    if isinstance(value, list):
        items = like if isinstance(like, list) else []
        return [ordered_like(item, items[i] if i < len(items) else None) for i, item in enumerate(value)]
    return value


def diff_live(
    profile: str, rendered: Iterable[Manifest], objects: Iterable[tuple[Manifest | None, Manifest]]
) -> ProfileDiff:
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
    return ProfileDiff(
        profile, LIVE, compare(applied, live, new_label=f"dry-run apply {profile}", old_label=LIVE)
    )


def summary(results: Reported[ProfileDiff]) -> tuple[int, int]:
    changed = sum(1 for r in results if r.changed and r.profile)
    return changed, sum(len(r.objects) for r in results)


def _counts(results: Reported[ProfileDiff]) -> str:
    changed, objects = summary(results)
    stale = sum(1 for r in results if not r.profile)
    return f"{len(results) - stale} profile(s), {changed} changed, {objects} object(s) differ" + (
        f", {stale} stale manifest(s)" if stale else ""
    )


def drift_line(results: Reported[ProfileDiff], shown: int = 3) -> str | None:
    """One line for stderr when there is drift (the JSON or Markdown report goes to a file in
    CI, and the failing job's log must still say why): the counts and the first few files."""
    drifted = [r for r in results if r.changed or not r.profile]
    if not drifted:
        return None
    names = [r.profile or f"{r.committed} (stale)" for r in drifted]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"drift: {_counts(results)}: {', '.join(names[:shown])}{more}"


def as_text(results: Reported[ProfileDiff]) -> str:
    parts = [f"note: {r.note}\n" for r in results if r.note]
    parts += [o.diff for r in results for o in r.objects]
    parts.append(_counts(results) + "\n")
    return "".join(parts)


def as_json(results: Reported[ProfileDiff], bad: Sequence[HasLines]) -> str:
    changed, objects = summary(results)
    return json.dumps(
        {
            "profiles": sum(1 for r in results if r.profile),
            "changed": changed,
            "objects_differing": objects,
            "stale": [r.committed for r in results if not r.profile],
            "results": [
                {
                    "profile": r.profile,
                    "committed": r.committed,
                    "changed": r.changed,
                    "note": r.note,
                    "objects": [{"key": o.key, "status": o.status, "diff": o.diff} for o in r.objects],
                }
                for r in results
            ],
            "errors": [" ".join(e.lines()) for e in bad],
        },
        indent=2,
    )


def as_markdown(results: Reported[ProfileDiff], bad: Sequence[HasLines]) -> str:
    changed = summary(results)[0]
    lines = [
        "## runai-spec diff",
        "",
        _counts(results).replace(f"{changed} changed", f"**{changed} changed**") + ".",
        "",
    ]
    for e in bad:
        lines.append(f"- :x: {md_code(' '.join(e.lines()))}")
    lines += [f"- :warning: {md_text(r.note)}" for r in results if r.note]
    if any(r.note for r in results):
        lines.append("")
    for r in results:
        for o in r.objects:
            lines += [
                f"<details><summary><code>{html_text(r.profile or r.committed)}</code>: "
                f"{html_text(o.key)} ({html_text(o.status)})</summary>",
                "",
                *md_fence(o.diff.rstrip("\n"), "diff"),
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines) + "\n"
