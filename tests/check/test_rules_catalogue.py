"""The catalogue lists every rule its topic modules define, once each."""

from __future__ import annotations

import pytest

from runai_spec.check.catalogue import CHECKS, READS, RULES
from runai_spec.check.rules import REGISTRY, declare, declared


def test_the_catalogue_lists_every_registered_site_rule_once() -> None:
    assert len(CHECKS) == len(set(CHECKS)) == len(RULES)
    assert set(RULES) == {r.id for r in declared("site")}
    assert [entry.check for entry in RULES.values()] == list(CHECKS)


def test_every_rule_says_which_fields_it_reads() -> None:
    assert set(READS) == set(RULES)


def test_a_rule_id_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="rule image-digest is registered twice"):
        declare("image-digest", "error", "a second spelling", "", kind="live")
    assert REGISTRY["image-digest"].kind == "site"
