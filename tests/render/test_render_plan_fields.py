"""The two test lists of Plan attributes the templates read (test_render_runtime.py's PLAN
strategy and its stand_in) are checked against the templates themselves (issue 37 item 3): an
attribute a template starts to read, and the lists lack, fails here rather than going untested;
a name in the lists that is no attribute of a Plan fails too."""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import jinja2
from hypothesis import given, settings

from conftest import ROOT
from render.test_render_runtime import PLAN, stand_in
from runai_spec.pipeline.workload import prepare_workload


@lru_cache(maxsize=1)
def template_reads() -> frozenset[str]:
    """Every `plan.<attribute>` the shipped templates read, from their Jinja syntax trees."""
    env = jinja2.Environment()
    names: set[str] = set()
    for path in sorted((ROOT / "templates").glob("*.j2")):
        tree = env.parse(path.read_text(encoding="utf-8"))
        for node in tree.find_all(jinja2.nodes.Getattr):
            if isinstance(node.node, jinja2.nodes.Name) and node.node.name == "plan":
                names.add(node.attr)
    return frozenset(names)


@lru_cache(maxsize=1)
def real_plan() -> Any:
    return prepare_workload(ROOT / "examples" / "multi-node" / "profile.yaml").plan


def test_the_templates_read_attributes_every_plan_has() -> None:
    reads = template_reads()
    assert {"name", "image", "volumes", "replicas"} <= reads  # the walk finds them
    assert sorted(n for n in reads if not hasattr(real_plan(), n)) == []


def test_the_stand_in_has_every_attribute_the_templates_read_and_only_plan_ones() -> None:
    names = set(vars(stand_in(real_plan())))
    assert sorted(template_reads() - names) == [], "add them to stand_in's names"
    assert sorted(n for n in names if not hasattr(real_plan(), n)) == []


@settings(max_examples=1, database=None)
@given(PLAN)
def test_the_drawn_plans_have_every_attribute_the_templates_read(plan: SimpleNamespace) -> None:
    names = set(vars(plan))
    assert sorted(template_reads() - names) == [], "add them to test_render_runtime.py's PLAN"
    assert sorted(n for n in names if not hasattr(real_plan(), n)) == []
