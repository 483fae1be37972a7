"""The suite's own pytest settings (issue 37 item 5, as pypa/build has them): a warning fails
its test, an xfail that passes fails, and an unknown marker or setting stops the run."""

from __future__ import annotations

import warnings

import pytest


@pytest.mark.parametrize("category", [DeprecationWarning, ResourceWarning, UserWarning])
def test_a_warning_in_a_test_is_an_error(category: type[Warning]) -> None:
    # ResourceWarning (a file left open) is one Python itself ignores by default
    with pytest.raises(category, match="old spelling"):
        warnings.warn("old spelling", category, stacklevel=1)


def test_an_xfail_that_passes_and_an_unknown_marker_or_setting_fail_the_run(
    pytestconfig: pytest.Config,
) -> None:
    assert pytestconfig.getini("xfail_strict") is True
    assert pytestconfig.getini("strict_markers") is True
    assert pytestconfig.getini("strict_config") is True
