"""Hypothesis runs a thousand examples in the full run, a few hundred in CI and a hundred on a
developer's machine: the profiles, .ci/run selecting `ci`, and property tests that leave the
count to the profile."""

from __future__ import annotations

import re

from hypothesis import settings

from conftest import HYPOTHESIS_PROFILE_VAR, ROOT


def test_the_full_run_takes_a_thousand_ci_more_than_dev_and_dev_a_small_default() -> None:
    assert settings.get_profile("full").max_examples >= 1000
    assert settings.get_profile("ci").max_examples >= 2 * settings.get_profile("dev").max_examples
    assert settings.get_profile("dev").max_examples <= 200


def test_ci_run_selects_the_ci_profile_before_the_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    chosen = script.index(f"export {HYPOTHESIS_PROFILE_VAR}=ci")
    assert chosen < script.index('bash -c "$checks"')  # the lint, type and test steps


def test_property_tests_leave_the_full_count_to_the_profile() -> None:
    """A count above the developer's is written through conftest.examples, so that the full run
    takes all of it and CI its share."""
    most = settings.get_profile("dev").max_examples
    pinned = [
        f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for text in [path.read_text(encoding="utf-8")]
        for m in re.finditer(r"max_examples=(\d+)", text)
        if int(m.group(1)) > most
    ]
    assert pinned == []
