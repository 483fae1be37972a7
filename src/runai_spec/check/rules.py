"""The one rule registry (site, `--crd` and live rules): what a site rule sees, its findings."""

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Literal

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

# Where a rule's findings are made: `validate` itself (a site rule of the catalogue),
# `validate --crd FILE`, or the live checks (`validate --live`, `submit`) of cluster/checks.py,
# which only cluster/ may run (it imports kubernetes): its rules are registered here all the same,
# so that `rules`, docs/rules.md and the tests read one registry.
RuleKind = Literal["site", "crd", "live"]


class Rule(Record):
    """A named rule: a site rule's docstring, or a declared rule's details, feed docs/rules.md."""

    id: str
    severity: Severity
    summary: str
    check: RuleFn | None  # None: the findings are made elsewhere (kind says where)
    milder: tuple[Severity, ...] = ()  # what it reports for a milder case (`rules` lists them)
    kind: RuleKind = "site"
    details: str = ""  # a declared rule's; a site rule's is its check's docstring

    @property
    def severities(self) -> tuple[Severity, ...]:
        return (self.severity, *self.milder)

    @property
    def live(self) -> bool:
        return self.kind == "live"

    @property
    def doc(self) -> str:
        import inspect  # only `rules` reads the details

        return inspect.cleandoc(self.details or (self.check.__doc__ if self.check else "") or "")


# Every rule, as its module registers it: the site rules (catalogue.RULES: in order), then the
# declared ones in their modules' import order (the live ones: cluster/checks.py, when imported).
REGISTRY: dict[str, Rule] = {}


def _register(entry: Rule) -> None:
    if entry.id in REGISTRY:  # one id, one rule: a second spelling is a bug
        raise ValueError(f"rule {entry.id} is registered twice")
    REGISTRY[entry.id] = entry


def rule(
    rule_id: str, severity: Severity, summary: str, *, milder: tuple[Severity, ...] = ()
) -> Callable[[RuleFn], RuleFn]:
    """A site rule: the decorated check runs on every profile `validate` checks."""

    def register(fn: RuleFn) -> RuleFn:
        _register(Rule(rule_id, severity, summary, fn, milder))
        return fn

    return register


def declare(
    rule_id: str,
    severity: Severity,
    summary: str,
    details: str,
    *,
    kind: RuleKind,
    milder: tuple[Severity, ...] = (),
) -> str:
    """A rule whose findings another step makes (kind): registered, and its id returned, so that
    the module that makes them spells it once, as a constant."""
    _register(Rule(rule_id, severity, summary, None, milder, kind, " ".join(details.split())))
    return rule_id


def declared(kind: RuleKind) -> tuple[Rule, ...]:
    """The registered rules of KIND, in registration order."""
    return tuple(r for r in REGISTRY.values() if r.kind == kind)


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
