"""The site rules' shared parts: what a rule sees (Context), its registration, its findings."""

import datetime as dt
from collections.abc import Callable, Iterable

from ..errors import Location
from ..findings import Finding, Severity
from ..load.ledger import Approval
from ..load.profile import LoadedProfile
from ..load.registry import ApprovedPreset
from ..load.site import Site
from ..plan.plan import Plan
from ..records import Record
from ..render.manifests import Manifest


class Context(Record):
    """What every rule may look at."""

    loaded: LoadedProfile
    approved: ApprovedPreset
    site: Site
    plan: Plan
    manifests: tuple[Manifest, ...] = ()
    # The registry's date, so expiry warnings stay a pure function of the inputs.
    today: dt.date | None = None
    site_approval: Approval | None = None


RuleFn = Callable[[Context], Iterable[Finding]]


class Rule(Record):
    """A named site rule (its docstring feeds docs/rules.md)."""

    id: str
    severity: Severity
    summary: str
    check: RuleFn
    milder: tuple[Severity, ...] = ()  # what it reports for a milder case (`rules` lists them)

    @property
    def severities(self) -> tuple[Severity, ...]:
        return (self.severity, *self.milder)


REGISTRY: dict[str, Rule] = {}  # every rule, as its module defines it (catalogue.RULES: in order)


def rule(
    rule_id: str, severity: Severity, summary: str, *, milder: tuple[Severity, ...] = ()
) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        REGISTRY[rule_id] = Rule(rule_id, severity, summary, fn, milder)
        return fn

    return register


def finding(
    ctx: Context,
    rule_id: str,
    path: str,
    message: str,
    hint: str | None = None,
    severity: Severity | None = None,
) -> Finding:
    where = Location(ctx.loaded.path, ctx.loaded.line(path), path)
    return Finding(rule_id, where, message, hint, severity or REGISTRY[rule_id].severity)
