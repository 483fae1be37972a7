"""The catalogue lists every rule its topic modules define, once each."""

from __future__ import annotations

from runai_spec.check.catalogue import CHECKS, READS, RULES
from runai_spec.check.rules import REGISTRY


def test_the_catalogue_lists_every_registered_rule_once() -> None:
    assert len(CHECKS) == len(set(CHECKS)) == len(RULES)
    assert set(RULES) == set(REGISTRY)
    assert [entry.check for entry in RULES.values()] == list(CHECKS)


def test_every_rule_says_which_fields_it_reads() -> None:
    assert set(READS) == set(RULES)
