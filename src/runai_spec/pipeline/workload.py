"""prepare_workload(): profile file -> validated, planned, checked and rendered workload."""

from pathlib import Path

from ..check.catalogue import READS, check_all
from ..check.rules import Context
from ..errors import InputError, PresetError, RunaiSpecError
from ..findings import Finding
from ..load.profile import LoadedProfile, ProfileProblems, load_profile, parse_partial
from ..load.registry import ApprovedPreset, PresetRegistry
from ..load.site import SITE_FILE, Site
from ..plan.plan import Plan, plan_workload
from ..records import Record
from ..render import TEMPLATES, render_plan
from ..render.manifests import Manifest, dump


class Workload(Record):
    """One profile carried through the whole pipeline."""

    loaded: LoadedProfile
    approved: ApprovedPreset
    site: Site
    plan: Plan
    manifests: tuple[Manifest, ...]
    findings: tuple[Finding, ...]

    @property
    def path(self) -> str:
        return self.loaded.path

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def text(self) -> str:
        return dump(list(self.manifests))


def prepare_workload(
    path: Path, registry: PresetRegistry | None = None, *, text: str | None = None
) -> Workload:
    """Load, plan, render and check one profile; raises InputError for bad input. A profile
    with schema errors is still checked, on the fields that parsed: its ProfileProblems lists
    the errors and those findings together, sorted by line. With `text`, that is the
    profile's content, named `path` (a profile not written yet: init)."""
    registry = registry or PresetRegistry()
    loaded = load_profile(path, partial=True) if text is None else parse_partial(text, str(path))
    if not loaded.problems:
        return _prepare(loaded, registry)
    found: list[Finding] = list(loaded.findings)
    errors: list[RunaiSpecError] = list(loaded.problems)
    if "preset" not in loaded.replaced:
        try:
            found = [f for f in _prepare(loaded, registry).findings if loaded.trusted(f, READS.get(f.rule))]
        except InputError as exc:  # the preset (located by _prepare) is bad input too
            errors.append(exc.located(str(path)))
    raise ProfileProblems(errors, found)


def _prepare(loaded: LoadedProfile, registry: PresetRegistry) -> Workload:
    path = loaded.path
    try:
        approved = registry.get(loaded.profile.preset)
        approved_site = registry.approved_site()
    except InputError as exc:
        raise exc.located(str(path), "preset", loaded.line("preset")) from None
    site = approved_site.site
    if site.family not in TEMPLATES:
        raise PresetError(
            f"manifest family {site.family!r} is not supported yet (Run:ai's "
            "TrainingWorkload/DistributedWorkload CRDs, deprecated since Run:ai "
            "2.18)",
            file=str(registry.root / SITE_FILE),
            field="family",
            hint="set `family: kubeflow` (PyTorchJob adopted by the Run:ai scheduler)",
        )
    plan = plan_workload(loaded, approved, site, site_sha256=approved_site.sha256)
    manifests = tuple(render_plan(plan, site.family))
    findings = check_all(
        Context(
            loaded,
            approved,
            site,
            plan,
            manifests,
            today=registry.today,
            site_approval=approved_site.approval,
        )
    )
    # sorted by line as a compiler lists them (stable: one line's findings in rule order); the
    # findings about a field left out (no line) after them, in rule order
    findings.sort(key=lambda f: (f.line is None, f.line or 0))
    return Workload(loaded, approved, site, plan, manifests, tuple(findings))
