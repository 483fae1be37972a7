"""delete: only objects runai-spec created, exactly the ones checked (a uid precondition)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterError
from ..render.manifests import Manifest
from .objects import get_object, managed_by_us
from .refs import Ref
from .refusals import refusal
from .session import Session, Target, Uncertain, session_for


@dataclass(frozen=True)
class DeleteResult:
    deleted: tuple[str, ...]
    missing: tuple[str, ...] = ()  # with missing_ok: already gone, skipped
    declined: bool = False  # confirm said no: nothing was deleted


def delete_object(session: Session, ref: Ref, live: Manifest) -> None:
    uid = _meta(live).get("uid")
    options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    if uid:  # delete exactly the object that was checked, not a newcomer of the same name
        options["preconditions"] = {"uid": uid}
    try:
        resp = session.call(
            "DELETE", ref.resource.item(ref.namespace, ref.name), body=json.dumps(options), write=True
        )
    except Uncertain:
        again = get_object(session, ref)
        if again is None or _meta(again).get("uid") != uid or _meta(again).get("deletionTimestamp"):
            return
        raise ClusterError(
            f"{ref}: the delete request got no answer and the object is still there",
            file="cluster",
            hint="run delete again",
        ) from None
    if resp.status == 404:
        return
    if resp.status not in (200, 202):
        raise refusal(resp, ref, "delete")


def wait_deleted(session: Session, ref: Ref, live: Manifest) -> None:
    uid = _meta(live).get("uid")
    deadline = time.monotonic() + session.target.wait_deleted
    while True:
        again = get_object(session, ref)
        if again is None or _meta(again).get("uid") != uid:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{ref}: still being deleted after {session.target.wait_deleted:g} s",
                file="cluster",
                hint="wait for its pods to stop, then submit again",
            )
        session.target.sleep(1.0)


def delete_job(
    refs: Iterable[Ref],
    target: Target | Session,
    *,
    missing_ok: bool = False,
    confirm: Callable[[list[Ref]], bool] | None = None,
) -> DeleteResult:
    """Delete runai-spec's objects (checked first); anything else is refused untouched.

    missing_ok: objects already gone are skipped, as long as one of them is there (a smoke
    test whose job was deleted by name still has its ConfigMap to clean up). confirm is asked
    about the objects found, after the cluster was read and before anything is deleted: a
    question about an object that is not there, or not ours, or a cluster that cannot be
    reached, is never asked."""
    refs = list(refs)
    with session_for(target) as session:
        found = []
        missing = []
        for ref in refs:
            live = get_object(session, ref)
            if live is None:
                missing.append(ref)
                continue
            if not managed_by_us(live):
                raise ClusterError(
                    f"{ref}: was not created by runai-spec; not touched",
                    file="cluster",
                    hint="delete it with the tool that created it",
                )
            found.append((ref, live))
        if missing and not (missing_ok and found):
            raise ClusterError(
                f"{', '.join(map(str, missing))}: not found",
                file="cluster",
                hint="check the name and the project; nothing was deleted",
            )
        if confirm is not None and not confirm([ref for ref, _ in found]):
            return DeleteResult((), tuple(str(r) for r in missing), declined=True)
        for ref, live in found:
            delete_object(session, ref, live)
    return DeleteResult(tuple(str(r) for r, _ in found), tuple(str(r) for r in missing))


def _meta(obj: Manifest) -> Any:
    return obj.get("metadata") or {}
