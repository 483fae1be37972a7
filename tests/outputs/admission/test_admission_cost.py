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
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT
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
    lit,
    regex_units,
)
from runai_spec.secrets import SECRET_VALUE

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
    parts = arg_parts("x")
    units = [sum(regex_units(json.loads(p)) for p in MATCHED.findall(part)) for part in parts]
    assert len(parts) > 1 and all(0 < u <= ARG_UNITS for u in units), units
    # the five units a tenth besides the patterns: the `-` test, the bounds, the loop
    assert (ARG_UNITS + 5) * COMMAND_TENTHS <= PER_CALL_LIMIT // HEADROOM
    # the rule is the parts together, whichever way it is read
    ctx = RuleContext(("r.io",), 40, (), False)
    assert RULES["arg"].cel("x", ctx) == "(" + " && ".join(parts) + ")"
    # every pattern of the rule is read by one part or another
    together = [json.loads(p) for part in parts for p in MATCHED.findall(part)]
    assert set(together) >= {SECRET_VALUE, *LAUNCHER_FLAG_PATTERNS.values()}


def test_a_profile_s_arguments_and_variables_are_read_by_a_role_s_variables_not_by_each_family() -> None:
    """The credential pattern runs on a role's command and variables in variables of their own
    (`a<n>`, evaluated once however many families of the preset read them), never in a
    family's pieces (`s<n>`), where it ran once per family: four times for h200-2x8-ib."""
    variables = documents()[0]["spec"]["variables"]
    credential = f".matches({lit(SECRET_VALUE)})"
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
