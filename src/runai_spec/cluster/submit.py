"""submit and diff --live: server-side apply, idempotent, never touching foreign objects."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ClusterError
from ..facts.kubeflow import PROFILE_SHA_ANNOTATION
from ..render.manifests import Manifest
from .delete import delete_object, wait_deleted
from .objects import (
    FIELD_MANAGER,
    checked,
    get_object,
    managed_by_us,
    ref_of,
    require_served,
    same_render,
    strip_server_fields,
)
from .refs import Ref
from .refusals import refusal
from .session import Session, Target, Uncertain, json_body, log, session_for

APPLY_TYPE = "application/apply-patch+yaml"


@dataclass(frozen=True)
class ObjectOutcome:
    ref: str
    action: str  # created, unchanged, replaced, would create, would replace
    stored: Manifest | None  # what the server stored (or would store), server fields stripped


@dataclass(frozen=True)
class SubmitResult:
    outcomes: tuple[ObjectOutcome, ...]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return any(o.action != "unchanged" for o in self.outcomes)


@dataclass(frozen=True)
class LiveObject:
    ref: str
    live: Manifest | None  # None: does not exist yet
    applied: Manifest  # the server's dry-run apply result


def _apply(
    session: Session, ref: Ref, manifest: Manifest, *, dry_run: bool, force: bool = False
) -> tuple[int, Manifest]:
    """Server-side apply; a create answers 201, which is read from the raw body."""
    query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
    if force:
        query.append(("force", "true"))
    if dry_run:
        query.append(("dryRun", "All"))
    resp = session.call(
        "PATCH",
        ref.resource.item(ref.namespace, ref.name),
        query,
        json.dumps(manifest),
        APPLY_TYPE,
        write=not dry_run,
    )
    if resp.status not in (200, 201):
        if resp.status == 404:
            require_served(session, ref)
        raise refusal(resp, ref, "create")
    return resp.status, checked(json_body(resp), str(ref))


def _create(session: Session, ref: Ref, manifest: Manifest) -> Manifest:
    """Create by apply; a write with unknown outcome is read back, never blindly repeated."""
    policy = session.target.retry
    for attempt in range(1, policy.attempts + 1):
        try:
            return _apply(session, ref, manifest, dry_run=False)[1]
        except Uncertain as exc:
            log.debug("%s: %s; reading back before any retry", ref, exc)
            live = get_object(session, ref)
            if live is not None:
                if managed_by_us(live) and same_render(manifest, live):
                    return live
                raise ClusterError(
                    f"{ref}: appeared with other contents while runai-spec was creating it",
                    file="cluster",
                    hint="check it with `runai-spec status` before submitting again",
                ) from None
            if attempt == policy.attempts:
                raise ClusterError(
                    f"{ref}: {exc}; gave up after {attempt} attempt(s)",
                    file="cluster",
                    hint="try again later",
                ) from None
            session.target.sleep(min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1)))
    raise AssertionError("unreachable")


def submit_manifests(
    manifests: Iterable[Manifest], target: Target | Session, *, dry_run: bool = False, replace: bool = False
) -> SubmitResult:
    """Send a render with server-side apply: idempotent, never touching foreign objects.

    Every object is checked before anything is written (and, when there are several,
    dry-run applied), so a refusal writes nothing. Names are fixed and apply is keyed by
    name, so a retried create can never make a second object.
    """
    items = [(ref_of(m), m) for m in manifests]
    with session_for(target) as session:
        plans: list[tuple[Ref, Manifest, Manifest | None, str]] = []
        for ref, manifest in items:
            live = get_object(session, ref)
            if live is None:
                plans.append((ref, manifest, None, "create"))
                continue
            if not managed_by_us(live):
                raise ClusterError(
                    f"{ref}: exists and was not created by runai-spec; not touched",
                    file="cluster",
                    hint="choose another `name` in the profile, or ask its owner to delete it",
                )
            if same_render(manifest, live):
                plans.append((ref, manifest, live, "unchanged"))
                continue
            if not replace:
                old = ((live.get("metadata") or {}).get("annotations") or {}).get(PROFILE_SHA_ANNOTATION, "?")
                raise ClusterError(
                    f"{ref}: exists with a different render (live profile sha256 {str(old)[:12]})",
                    file="cluster",
                    hint="submit with --replace to delete it and create this one "
                    "(its pods and logs go: save them with `runai-spec logs`)",
                )
            plans.append((ref, manifest, live, "replace"))
        writes = [p for p in plans if p[3] != "unchanged"]
        if len(writes) > 1 and not dry_run:
            # Let the server validate every object before the first is stored, so that an
            # invalid job does not leave its config map behind.
            for ref, manifest, _, action in writes:
                _apply(session, ref, manifest, dry_run=True, force=action == "replace")
        outcomes = []
        created: list[tuple[Ref, Manifest]] = []  # what did not exist before this submit
        try:
            for ref, manifest, live, action in plans:
                if action == "unchanged":
                    assert live is not None
                    outcomes.append(ObjectOutcome(str(ref), "unchanged", strip_server_fields(live)))
                elif dry_run:
                    _, stored = _apply(session, ref, manifest, dry_run=True, force=action == "replace")
                    outcomes.append(ObjectOutcome(str(ref), f"would {action}", strip_server_fields(stored)))
                else:
                    if action == "replace":
                        assert live is not None
                        delete_object(session, ref, live)
                        wait_deleted(session, ref, live)
                    stored = _create(session, ref, manifest)
                    if action == "create":
                        created.append((ref, stored))
                    outcomes.append(
                        ObjectOutcome(
                            str(ref),
                            "created" if action == "create" else "replaced",
                            strip_server_fields(stored),
                        )
                    )
        except ClusterError as exc:
            if not created:
                raise
            raise _rolled_back(session, exc, created) from None
    return SubmitResult(tuple(outcomes), dry_run)


def _rolled_back(session: Session, exc: ClusterError, created: list[tuple[Ref, Manifest]]) -> ClusterError:
    """A later object was refused after earlier ones were stored (the smoke job after its
    ConfigMap): delete what this submit created, only that (by uid), and say so."""
    notes = []
    for ref, stored in reversed(created):
        try:
            delete_object(session, ref, stored)
        except ClusterError as failed:
            notes.append(
                f"note: {ref} was created by this submit and could not be removed "
                f"({failed.message}); `runai-spec delete` removes it"
            )
        else:
            notes.append(f"note: removed {ref}, which this submit had created")
    return ClusterError(
        exc.message, file=exc.file, line=exc.line, field=exc.field, hint=exc.hint, also=(*exc.also, *notes)
    )


def live_objects_all(renders: Iterable[Iterable[Manifest]], target: Target) -> list[tuple[LiveObject, ...]]:
    """live_objects for several renders (one per profile) over one session."""
    with Session(target) as session:
        return [_live_objects(session, manifests) for manifests in renders]


def _live_objects(session: Session, manifests: Iterable[Manifest]) -> tuple[LiveObject, ...]:
    out = []
    for manifest in manifests:
        ref = ref_of(manifest)
        live = get_object(session, ref)
        # force: the preview of taking the fields over; dryRun=All: nothing is stored
        _, applied = _apply(session, ref, manifest, dry_run=True, force=True)
        out.append(
            LiveObject(str(ref), strip_server_fields(live) if live else None, strip_server_fields(applied))
        )
    return tuple(out)
