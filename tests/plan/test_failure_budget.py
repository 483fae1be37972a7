"""Issue 25 item 4: the shipped presets' backoffLimit and torchrun maxRestarts are sized by one
function (plan.failure.sized) for the site's tolerated faults, KAI's one-pod evictions
included, and the table of docs/faults.md and `plan` print what they survive from its inverse
(tolerance). Refresh the docs table: .venv/bin/python tests/plan/test_failure_budget.py"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import EXAMPLES  # noqa: E402
from runai_spec.load.registry import PresetRegistry  # noqa: E402
from runai_spec.pipeline.workload import prepare_workload  # noqa: E402
from runai_spec.plan.failure import (  # noqa: E402
    SITE_EVICTIONS,
    SITE_FAULTS,
    Tolerance,
    sized,
    survives,
    tolerance,
    tolerance_of,
)

DOC = ROOT / "docs" / "faults.md"
BEGIN, END = "<!-- survives: begin -->", "<!-- survives: end -->"
REFRESH = ".venv/bin/python tests/plan/test_failure_budget.py"


@pytest.mark.parametrize(("pods", "elastic"), [(1, False), (2, False), (4, True), (8, True)])
def test_sized_and_tolerance_are_inverse(pods: int, elastic: bool) -> None:
    limit, restarts = sized(pods, elastic, 3, 5)
    assert tolerance(pods, elastic, limit, restarts) == Tolerance(3, 5 if elastic else 0)
    # one restart less of either and the job survives one fault (or eviction) less
    assert tolerance(pods, elastic, limit - 1, restarts).faults == 2
    assert tolerance(pods, True, limit, restarts - 1 + (0 if elastic else 1)).evictions == (
        4 if elastic else 0
    )


def test_an_agent_out_of_restarts_bounds_the_faults_before_the_backoff_limit() -> None:
    # backoffLimit 9 on 4 pods absorbs 2 store-host faults, but maxRestarts 1 ends the
    # rendezvous at the second fault of another pod
    assert tolerance(4, True, 9, 1) == Tolerance(1, 0)
    assert tolerance(2, False, 5, 0, c10d=False) == Tolerance(0, 0)  # the static rendezvous


def test_every_shipped_preset_is_sized_for_the_site_s_faults_and_evictions() -> None:
    registry = PresetRegistry()
    for name in registry.names():
        preset = registry.get(name).preset
        elastic = preset.elastic is not None
        limit, restarts = sized(preset.nodes, elastic)
        assert preset.run_policy.backoff_limit == limit, name
        if preset.layout == "multi-node":
            got = preset.elastic.max_restarts if preset.elastic else preset.rendezvous.max_restarts
            assert got == restarts, name


def test_the_elastic_example_survives_evictions_beside_its_faults() -> None:
    plan = prepare_workload(ROOT / "examples" / "elastic" / "profile.yaml").plan
    assert tolerance_of(plan) == Tolerance(SITE_FAULTS, SITE_EVICTIONS)
    rows = dict(survives(plan))
    assert rows["container faults (any pod)"] == str(SITE_FAULTS)
    assert rows["evictions of one pod, besides those faults"].startswith(f"{SITE_EVICTIONS} ")
    assert rows["preemptions and stale-gang evictions"] == "any number"


def survival_table() -> str:
    """What each shipped preset's job survives, from `survives` of its example's plan."""
    lines = [
        "| preset (example) | `backoffLimit` | torchrun `maxRestarts` | the job survives, worst case |",
        "|---|---|---|---|",
    ]
    for example in EXAMPLES:
        w = prepare_workload(ROOT / "examples" / example / "profile.yaml")
        plan = w.plan
        limit = dict(plan.run_policy).get("backoffLimit")
        r = plan.rendezvous
        restarts = (
            "-"
            if r is None or r.backend != "c10d"
            else str(
                r.max_restarts if r.max_restarts is not None else plan.elastic and plan.elastic.max_restarts
            )
        )
        told = "; ".join(f"{what}: {n}" for what, n in survives(plan))
        lines.append(f"| `{w.approved.name}` ({example}) | {limit} | {restarts} | {told} |")
    return "\n".join(lines)


def _doc_with(table: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def test_the_docs_table_is_what_plan_prints() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{DOC}: no {BEGIN} ... {END}"
    assert text == _doc_with(survival_table()), f"{DOC} is out of date; refresh with: {REFRESH}"


if __name__ == "__main__":
    DOC.write_text(_doc_with(survival_table()), encoding="utf-8")
    print(f"wrote the table of {DOC.relative_to(ROOT)}")
