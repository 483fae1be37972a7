"""Rules on who the workload is: its name, project, image, preset grant and approval."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

from ..facts.kubeflow import DNS1123, NAME_MAX, SMOKE_SUFFIX
from ..facts.kubeflow import name_room as kubeflow_name_room
from ..findings import Finding
from ..plan.plan import Plan
from .rules import Context, finding, rule

# An image reference's repository and tag (admission_rules.image_pattern builds the policy's
# from the same two, with the digest required and the registry one of the site's)
IMAGE_REPO = r"[a-z0-9._/-]+"


IMAGE_TAG_MAX = 128  # characters of a tag (the distribution spec's)
_TAG_FIRST, _TAG_REST = ":[A-Za-z0-9_]", "[A-Za-z0-9_.-]"
IMAGE_TAG = rf"{_TAG_FIRST}{_TAG_REST}{{0,{IMAGE_TAG_MAX - 1}}}"
IMAGE_TAG_ANY_LENGTH = rf"{_TAG_FIRST}{_TAG_REST}*"  # the policy's first reading (rules._image)


IMAGE = re.compile(
    rf"^(?P<registry>[a-z0-9.-]+(:[0-9]+)?)/(?P<repo>{IMAGE_REPO})"
    rf"(?P<tagged>{IMAGE_TAG})?(@sha256:(?P<digest>[0-9a-f]{{64}}))?\Z"
)


# The ids of this module's rules, each spelled once (rules.py's registry: `runai-spec rules`).
RESERVED_FIELD = "reserved-field"
IMAGE_DIGEST = "image-digest"
ALLOWED_REGISTRY = "registry"
NAME_LENGTH = "name-length"
SMOKE_NAME = "smoke-name"
PRESET_EXPIRED = "preset-expired"
PRESET_NOT_GRANTED = "preset-not-granted"


@rule(RESERVED_FIELD, "error", "Fields the site guide reserves for the SCC AI Engineers")
def check_reserved(ctx: Context) -> Iterator[Finding]:
    """Compute preset values, GPUs per pod, workers, priority, preemptibility, elasticity,
    node pools and the network attachment come from the approved preset, never the profile."""
    yield from ctx.loaded.findings


@rule(IMAGE_DIGEST, "error", "Images are pinned by digest (immutable)")
def check_image_digest(ctx: Context) -> Iterator[Finding]:
    """The guide: make the command reproducible with an immutable image."""
    image = ctx.loaded.profile.image
    match = IMAGE.match(image)
    if match is None:
        yield finding(
            ctx,
            IMAGE_DIGEST,
            "image",
            f"{image!r} is not registry/repo[:tag]@sha256:<64 hex>",
            "write the full reference, e.g. registry.example.org/team/train@sha256:<64 hex>",
        )
    elif match.group("digest") is None:
        yield finding(
            ctx,
            IMAGE_DIGEST,
            "image",
            "tag-only images are mutable",
            "pin the digest, e.g. repo:tag@sha256:<64 hex> "
            "(`docker buildx imagetools inspect IMAGE` shows it)",
        )


@rule(ALLOWED_REGISTRY, "error", "Images come from a registry the site allows")
def check_registry(ctx: Context) -> Iterator[Finding]:
    """Only the registries listed in presets/site.yaml are allowed."""
    match = IMAGE.match(ctx.loaded.profile.image)
    if match and match.group("registry") not in ctx.site.registries:
        yield finding(
            ctx,
            ALLOWED_REGISTRY,
            "image",
            f"registry {match.group('registry')!r} is not allowed on {ctx.site.cluster}",
            "use one of: " + ", ".join(ctx.site.registries),
        )


def name_room(plan: Plan) -> int:
    """The longest workload name whose pods, and its smoke test's, stay DNS labels (the
    admission policy's bound on the name is this one)."""
    return kubeflow_name_room(plan.name, plan.longest_pod_name) - len(SMOKE_SUFFIX)


@rule(NAME_LENGTH, "error", f"Derived pod names, the smoke test's too, stay within {NAME_MAX} characters")
def check_name_length(ctx: Context) -> Iterator[Finding]:
    """Pods and their headless services are named `<name>-worker-<N>`: a DNS label. The smoke
    test's are `<name>-smoke-worker-<N>`; a name that only they outgrow is refused here too,
    so that validate passes nothing `render --smoke` and `submit --smoke` then refuse."""
    name, longest = ctx.plan.name, ctx.plan.longest_pod_name
    smoke = f"{name}{SMOKE_SUFFIX}{longest[len(name) :]}"
    room = name_room(ctx.plan)
    hint = f"shorten name to at most {room} characters (its smoke test's pods add `{SMOKE_SUFFIX}`)"
    if len(longest) > NAME_MAX:
        yield finding(
            ctx,
            NAME_LENGTH,
            "name",
            f"pod name {longest!r} has {len(longest)} characters (limit {NAME_MAX})",
            hint,
        )
    elif len(smoke) > NAME_MAX:
        yield finding(
            ctx,
            NAME_LENGTH,
            "name",
            f"the smoke test's pod name {smoke!r} would have {len(smoke)} characters "
            f"(limit {NAME_MAX}): `render --smoke` and `submit --smoke` refuse it",
            hint,
        )
    namespace = ctx.plan.namespace
    if len(namespace) > NAME_MAX or not DNS1123.match(namespace):  # a namespace is a DNS-1123 label
        yield finding(
            ctx,
            NAME_LENGTH,
            "project",
            f"project {ctx.loaded.profile.project!r} makes the namespace {namespace!r} "
            f"({len(namespace)} characters), which is not a DNS label of at most "
            f"{NAME_MAX}",
            "use the Run:ai project's name as the cluster knows it",
        )


@rule(SMOKE_NAME, "error", f"A workload name never ends in `{SMOKE_SUFFIX}`")
def check_smoke_name(ctx: Context) -> Iterator[Finding]:
    """The smoke test of workload `X` is the job `X-smoke`, beside the real one in the same
    namespace. A workload named `X-smoke` would be that job: `submit --smoke` of `X` would
    refuse to replace it, or `delete X --smoke` remove the wrong job. Refusing the suffix
    rules out every such pair, in one batch of profiles or across a project's profiles."""
    name = ctx.loaded.profile.name
    if name.endswith(SMOKE_SUFFIX):
        yield finding(
            ctx,
            SMOKE_NAME,
            "name",
            f"{name!r} ends in {SMOKE_SUFFIX!r}: it is the name of the smoke test "
            f"of workload {name.removesuffix(SMOKE_SUFFIX)!r}",
            f"rename it, e.g. {name.removesuffix(SMOKE_SUFFIX) + '-test'!r}; a smoke "
            "test is `--smoke` of the real workload's profile, never a profile",
        )


EXPIRY_WARNING_DAYS = 30


@rule(PRESET_EXPIRED, "warning", "The preset's approval expires soon")
def check_preset_expiry(ctx: Context) -> Iterator[Finding]:
    """An expired approval is refused by the registry; this warns within 30 days of the
    expiry of the preset's or the site file's approval, so the re-review happens in time."""
    if ctx.today is None:
        return
    for what, approval in (
        (f"preset {ctx.approved.name}", ctx.approved.approval),
        ("the site file", ctx.site_approval),
    ):
        if approval is None or approval.expires is None:
            continue
        days = (dt.date.fromisoformat(approval.expires) - ctx.today).days
        if 0 <= days <= EXPIRY_WARNING_DAYS:
            yield finding(
                ctx,
                PRESET_EXPIRED,
                "preset",
                f"the approval of {what} expires on {approval.expires} "
                f"(in {days} day{'s' if days != 1 else ''}); after that it is refused",
                "ask your SCC AI Engineers to re-review and re-approve it "
                "(`runai-spec presets approve NAME --key KEY --expires DATE`)",
            )


GRANT_HINT = (
    "ask the SCC AI Engineers to grant the preset to your project (the site guide: "
    "multi-GPU and multi-node work needs advance agreement), or use a preset your "
    "project is granted (`runai-spec presets list`)"
)


@rule(PRESET_NOT_GRANTED, "error", "The project is granted the preset (site file `grants`)")
def check_preset_granted(ctx: Context) -> Iterator[Finding]:
    """The site file's `grants` say which projects may use which presets; single-GPU presets
    are usually granted to every project (`*`), multi-GPU and multi-node ones by agreement."""
    project, name = ctx.loaded.profile.project, ctx.approved.name
    if not ctx.site.granted(project, name):
        yield finding(
            ctx, PRESET_NOT_GRANTED, "preset", f"project {project} is not granted preset {name}", GRANT_HINT
        )
