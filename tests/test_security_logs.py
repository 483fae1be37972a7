"""Issue 12, item 11: a pod name from the server never becomes a path outside --out."""

from __future__ import annotations

import pytest

from runai_spec.cluster.logs import safe_file_name


@pytest.mark.parametrize("name", ["../x", "/abs", "..", ".", "a/../../b", "x\x1b[2J", ""])
def test_a_hostile_pod_name_is_one_plain_file_name(name: str) -> None:
    safe = safe_file_name(name)
    assert safe and "/" not in safe and not safe.startswith(".")
    assert safe.isprintable()


def test_an_ordinary_pod_name_is_kept() -> None:
    assert safe_file_name("train-master-0") == "train-master-0"
