"""The policy's runtime cost against the API server's limits (issue 41 item 8): a profile's
arguments and variables are read by variables of their own, one per role, each cheaper than a
tenth of the per-expression limit on the longest command validate accepts, and shared by every
family of a preset; the costliest job validate accepts costs a tenth of each limit (long: the
estimate runs in cel-python, benchmarks/bench_policy_cost.py)."""

from __future__ import annotations

import importlib
import json
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, examples
from outputs.admission.admission_policy import PROJECTS, documents
from runai_spec.check.launcher import LAUNCHER_FLAG_PATTERNS, LAUNCHER_FLAGS, launcher_flag
from runai_spec.outputs.admission.rules import (
    ARG_UNITS,
    COMMAND_TENTHS,
    HEADROOM,
    PER_CALL_LIMIT,
    RULES,
    RuleContext,
    arg_parts,
    arg_refusals,
    lit,
    packed,
)
from runai_spec.secrets import JWT, SECRET_VALUE_SHAPES

MATCHED = re.compile(r'\.matches\(("(?:[^"\\]|\\.)*")\)')
# each registered launcher's topology flags, in the spellings its own parser takes, and texts
# that only look like them
FLAGS = [
    "--nproc_per_node=8",
    "--nproc-per-node",
    "--nnodes=2",
    "--node_rank=1",
    "--master-addr=h",
    "--rdzv_endpoint=h:1",
    "--rdzv-conf=x",
    "--standalone",
    "--num_processes=16",
    "--num_machines",
    "--multi_gpu",
    "--config_file=a.yaml",
    "--deepspeed_multinode_launcher=pdsh",
    "-np",
    "--np=4",
    "-mca",
    "--map-by=slot",
    "--oversubscribe",
    "--allow-run-as-root",
]
NOT_FLAGS = [
    "--lr=3e-4",
    "--nproc",
    "--rdzv",
    "train.py",
    "-x",
    "--master_addr_x",
    "--np4",
    "-n",
    "--standalone2",
]


@pytest.mark.parametrize("arg", FLAGS + NOT_FLAGS)
def test_the_launchers_patterns_together_are_the_launcher_flags(arg: str) -> None:
    apart = [name for name, p in LAUNCHER_FLAG_PATTERNS.items() if re.match(p, arg)]
    assert bool(apart) == bool(LAUNCHER_FLAGS.match(arg)) == (arg in FLAGS)
    assert launcher_flag(arg) == (apart[0] if apart else None)


@given(st.text(alphabet="-_=abcdegilmnoprstuvx0", max_size=24))
def test_any_text_is_a_launcher_flag_by_one_pattern_exactly_when_by_all_of_them(arg: str) -> None:
    apart = any(re.match(p, arg) for p in LAUNCHER_FLAG_PATTERNS.values())
    assert apart == bool(LAUNCHER_FLAGS.match(arg))


def test_each_part_of_the_argument_rule_costs_a_tenth_of_the_limit_on_the_longest_command() -> None:
    runs = packed(arg_refusals())
    parts = arg_parts("x")
    assert len(parts) == len(runs) > 1
    assert all(0 < sum(r.units for r in run) <= ARG_UNITS for run in runs), runs
    # the five units a tenth besides the patterns: the bounds, the loop, the positions
    assert (ARG_UNITS + 5) * COMMAND_TENTHS <= PER_CALL_LIMIT // HEADROOM
    # the rule is the parts together, and each part reads its run of refusals
    ctx = RuleContext(("r.io",), 40, (), False)
    assert RULES["arg"].cel("x", ctx) == "(" + " && ".join(parts) + ")"
    for part, run in zip(parts, runs, strict=True):
        assert all(r.cel("x") in part for r in run)
    # every pattern validate refuses an argument by is read by one part or another
    together = [json.loads(p) for part in parts for p in MATCHED.findall(part)]
    assert together == [r.pattern for r in arg_refusals()]
    assert set(together) >= {*(shape for _, shape in SECRET_VALUE_SHAPES), *LAUNCHER_FLAG_PATTERNS.values()}


@pytest.mark.parametrize(("part", "shape"), SECRET_VALUE_SHAPES)
@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_text_a_credential_shape_finds_holds_its_literal_part(
    part: str, shape: str, data: st.DataObject
) -> None:
    """The policy reads a shape only where its part is there (rules.Refusal): a text without
    the part is one the shape never finds, so the gate refuses nothing validate admits."""
    text = data.draw(st.from_regex(shape))
    assert re.search(shape, text) and part in text


def test_a_profile_s_arguments_and_variables_are_read_by_a_role_s_variables_not_by_each_family() -> None:
    """The credential patterns run on a role's command and variables in variables of their own
    (`a<n>`, evaluated once however many families of the preset read them), never in a
    family's pieces (`s<n>`), where they ran once per family: four times for h200-2x8-ib."""
    variables = documents()[0]["spec"]["variables"]
    credential = f".matches({lit(JWT)})"
    readers = [v["name"] for v in variables if credential in v["expression"]]
    assert readers and all(re.fullmatch(r"a[0-9]+", n) for n in readers), readers
    # one per role and per field (command, env) of each kind of job: not one per family
    assert len(readers) <= 2 * 2 * 3, readers


@pytest.mark.long
def test_the_costliest_job_validate_accepts_costs_a_tenth_of_each_limit() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    bench = importlib.import_module("bench_policy_cost")  # the benchmark's own estimate

    policy, params = documents()[0], documents()[-1]
    name, job = bench.heavy()
    costs: dict[str, int] = bench.Costs(policy, params).of(job, PROJECTS)
    top = max(costs, key=lambda k: costs[k])
    assert costs[top] * HEADROOM <= PER_CALL_LIMIT, (name, top, costs[top])
    assert sum(costs.values()) * HEADROOM <= bench.BUDGET, (name, sum(costs.values()))
