"""mypy --strict over src and tests (pyproject's [tool.mypy]), as one test of the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT


# A test, not a step of the README's command before pytest (issue 29): a cold mypy is ~22 CPU s
# on one core while the other waits; here it shares the run's workers. .ci/run's MYPY_CACHE_DIR
# (kept between runs) holds; else mypy's own .mypy_cache in the checkout.
@pytest.mark.heavy
def test_mypy_strict_passes() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found")
