"""Issue 25 item 5: the admission policy allows exactly the KAI topology annotations the site
gives a multi-node preset (derived from its renders, like every other leaf) and refuses others,
KAI's staleness grace period among them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conftest import example_job
from outputs.admission.admission_policy import Policy, shared_policy
from runai_spec.facts.kai import (
    PREFERRED_PLACEMENT_ANNOTATION,
    REQUIRED_PLACEMENT_ANNOTATION,
    STALENESS_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)
from runai_spec.load.registry import PresetRegistry


@pytest.fixture(scope="module")
def policy() -> Policy:
    return shared_policy()


def test_the_multi_node_renders_carry_the_site_s_topology() -> None:
    site = PresetRegistry().site()
    assert site.topology is not None
    fixed = example_job("multi-node")["metadata"]["annotations"]
    assert fixed[TOPOLOGY_ANNOTATION] == site.topology.name
    assert fixed[REQUIRED_PLACEMENT_ANNOTATION] == site.topology.placement["h200-2x8-ib"].required
    assert PREFERRED_PLACEMENT_ANNOTATION not in fixed
    elastic = example_job("elastic")["metadata"]["annotations"]
    assert elastic[PREFERRED_PLACEMENT_ANNOTATION] == "scc.example.org/ib-leaf"
    # one pod needs no placement: nothing rendered
    assert TOPOLOGY_ANNOTATION not in example_job("single-node")["metadata"]["annotations"]


def _set(example: str, key: str, value: str | None) -> dict[str, Any]:
    job = copy.deepcopy(example_job(example))
    annotations = job["metadata"]["annotations"]
    if value is None:
        annotations.pop(key)
    else:
        annotations[key] = value
    return job


def test_the_policy_admits_the_rendered_topology(policy: Policy) -> None:
    assert policy.denials(example_job("multi-node")) == {}
    assert policy.denials(example_job("elastic")) == {}


@pytest.mark.parametrize(
    ("example", "key", "value"),
    [
        ("multi-node", TOPOLOGY_ANNOTATION, "another-topology"),
        ("multi-node", REQUIRED_PLACEMENT_ANNOTATION, "kubernetes.io/hostname"),
        ("multi-node", REQUIRED_PLACEMENT_ANNOTATION, None),
        ("multi-node", PREFERRED_PLACEMENT_ANNOTATION, "scc.example.org/ib-leaf"),
        ("single-node", TOPOLOGY_ANNOTATION, "scc-ib-fabric"),
        ("elastic", STALENESS_ANNOTATION, "-1s"),
    ],
)
def test_the_policy_refuses_other_topology_and_staleness_annotations(
    policy: Policy, example: str, key: str, value: str | None
) -> None:
    assert policy.denials(_set(example, key, value)), (example, key, value)
