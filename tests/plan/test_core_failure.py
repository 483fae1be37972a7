"""Failure semantics chosen by the preset (issue 11): rendezvous, budget, grace period, and
what `plan` says a fault does (docs/fault-experiments/RESULTS.md measured each choice)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import BASE_PROFILE, ROOT, pytorch_container, run
from runai_spec.errors import PresetError
from runai_spec.facts.kubeflow import MASTER, WORKER
from runai_spec.facts.kubelet import expand
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.plan.failure import failure_semantics
from runai_spec.plan.plan import plan_workload
from runai_spec.rehearse.restarts import static_rendezvous
from runai_spec.render import render_plan
from runai_spec.render.manifests import dump


def render(registry: PresetRegistry, preset: str = "h200-2x8-ib") -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data["preset"] = preset
    if preset == "h200-elastic-2to4x8-ib":
        data["batch"] = {"local": 4, "grad_accum": 1, "global": 128}
    plan = plan_workload(parse_profile(dump([data]), "p.yaml"), registry.get(preset), registry.site())
    (job,) = render_plan(plan)
    return job


def old_launcher(presets_dir: Path, key: Path) -> PresetRegistry:
    """The multi-node preset edited back to bare torchrun and backoffLimit 3."""
    path = presets_dir / "h200-2x8-ib.yaml"
    text = path.read_text()
    start, end = text.index("rendezvous:"), text.index("termination_grace_period_seconds:")
    text = text[:start] + "rendezvous: {backend: static}\n" + text[end:]
    path.write_text(text.replace("backoff_limit: 5", "backoff_limit: 3"))
    registry = PresetRegistry(presets_dir)
    registry.approve("h200-2x8-ib", key)
    return registry


def command(job: dict[str, Any], role: str) -> list[str]:
    return list(pytorch_container(job, role)["command"])


def test_the_shipped_multi_node_job_is_not_static_and_the_old_launcher_still_is(
    presets_dir: Path, engineer_key: Path
) -> None:
    shipped = render(PresetRegistry(ROOT / "presets"))
    assert static_rendezvous(shipped) is False
    assert shipped["spec"]["runPolicy"]["backoffLimit"] == 5
    old = render(old_launcher(presets_dir, engineer_key))
    assert static_rendezvous(old) is True
    assert old["spec"]["runPolicy"]["backoffLimit"] == 3
    for role in (MASTER, WORKER):
        launcher = command(old, role)
        head = launcher[: launcher.index("train.py")]  # bare torchrun: only the log flags
        assert head == ["torchrun", "--log-dir=/checkpoints/logs/$(POD_NAME)", "--tee=3"]
        env = pytorch_container(old, role)["env"]
        assert all(e["name"] != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" for e in env)


def test_every_pod_carries_the_presets_grace_period() -> None:
    registry = PresetRegistry(ROOT / "presets")
    for preset, grace in (
        ("h200-1gpu", 120),
        ("h200-8gpu", 300),
        ("h200-2x8-ib", 300),
        ("h200-elastic-2to4x8-ib", 300),
    ):
        job = render(registry, preset)
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == grace


def test_the_elastic_job_keeps_the_operators_endpoint_and_its_budget_survives_worker_0() -> None:
    job = render(PresetRegistry(ROOT / "presets"), "h200-elastic-2to4x8-ib")
    argv = command(job, WORKER)
    assert not any(
        a.startswith(("--rdzv-backend", "--rdzv-endpoint", "--max-restarts")) for a in argv
    )  # PET_RDZV_* and PET_MAX_RESTARTS from elasticPolicy
    # losing worker-0 (the store host) restarts each of the 4 pods once: 2 such faults fit
    assert job["spec"]["runPolicy"]["backoffLimit"] == 2 * 4 + 1


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            ("h200-8gpu.yaml", "priority:", "rendezvous: {backend: c10d}\npriority:"),
            "rendezvous applies to multi-node layouts",
        ),
        (
            ("h200-elastic-2to4x8-ib.yaml", "  backend: c10d", "  backend: c10d\n  max_restarts: 5"),
            "elastic.max_restarts",
        ),
        (
            ("h200-elastic-2to4x8-ib.yaml", "  backend: c10d", "  backend: static"),
            "needs rendezvous.backend c10d",
        ),
        (
            ("h200-2x8-ib.yaml", "  backend: c10d", "  backend: static"),
            "rendezvous.join_timeout_seconds has no effect with the static backend",
        ),
    ],
)
def test_a_rendezvous_the_layout_would_not_render_is_refused(
    presets_dir: Path, engineer_key: Path, edit: tuple[str, str, str], problem: str
) -> None:
    filename, old, new = edit
    path = presets_dir / filename
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(PresetError, match=problem):
        PresetRegistry(presets_dir).approve(filename[:-5], engineer_key)


def test_plan_shows_each_choice_and_what_each_fault_does() -> None:
    profile = ROOT / "examples" / "multi-node" / "profile.yaml"
    result = run("plan", str(profile))
    assert result.exit_code == 0, result.output
    text = result.stdout
    for line in (
        "| restart policy | OnFailure |",
        "| backoffLimit | 5 |",
        "| rendezvous | c10d at $(MASTER_ADDR):$(MASTER_PORT) (the Master's service), id llm-7b-fsdp |",
        "| torchrun max restarts | 2 |",
        "| rendezvous join / read timeout | 900 s / 600 s |",
        "| termination grace period | 300 s (SIGTERM, then SIGKILL) |",
    ):
        assert line in text, line
    assert "| llm-7b-fsdp-master-0 fails (it hosts the c10d store) |" in text
    assert "the job survives any 2 fault(s)" in text and "(fail fast)" in text
    assert (f"runai-spec delete llm-7b-fsdp --project nlp-lab --yes && runai-spec submit {profile}") in text
    as_json = run("plan", str(profile), "--format", "json")
    fs = json.loads(as_json.stdout)["failure_semantics"]
    assert fs["choices"]["backoffLimit"] == "5" and fs["tolerated_faults"] == 2
    # the last two: a pod deleted in its first rendezvous (issue 40 item 3), a stale gang
    assert [f["restarts"] for f in fs["faults"]] == [2, 1, 0, 0, 0]


def test_plan_says_the_static_rendezvous_cannot_be_budgeted(presets_dir: Path, engineer_key: Path) -> None:
    registry = old_launcher(presets_dir, engineer_key)
    data = copy.deepcopy(BASE_PROFILE)
    plan = plan_workload(parse_profile(dump([data]), "p.yaml"), registry.get("h200-2x8-ib"), registry.site())
    fs = failure_semantics(plan, "p.yaml")
    assert dict(fs.choices)["rendezvous"] == "static (bare torchrun)"
    assert fs.tolerated == 0
    (node, _, first, stale) = fs.faults
    assert "first rendezvous" in first.fault and "ignores SIGTERM" in first.outcome and first.restarts == 0
    assert stale.recovers and stale.restarts == 0 and "stale" in stale.outcome
    assert not node.recovers and node.restarts is None and "depends on timing" in node.outcome
    assert fs.resubmit == "runai-spec delete demo --project team-a --yes && runai-spec submit p.yaml"


def test_never_fails_fast_at_the_first_fault(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("restart_policy: OnFailure", "restart_policy: Never"))
    registry = PresetRegistry(presets_dir)
    registry.approve("h200-8gpu", engineer_key)
    data = {**copy.deepcopy(BASE_PROFILE), "preset": "h200-8gpu"}
    plan = plan_workload(parse_profile(dump([data]), "p.yaml"), registry.get("h200-8gpu"), registry.site())
    fs = failure_semantics(plan)
    assert fs.tolerated == 0 and fs.faults[0].outcome.startswith("fails fast")


@pytest.mark.parametrize(
    ("text", "env", "expanded"),
    [
        (
            "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)",
            {"MASTER_ADDR": "m", "MASTER_PORT": "1"},
            "--rdzv-endpoint=m:1",
        ),
        ("$(UNSET)-x", {}, "$(UNSET)-x"),  # unresolved: left as written
        ("$$(MASTER_ADDR) $$ $x $(", {"MASTER_ADDR": "m"}, "$(MASTER_ADDR) $ $x $("),
    ],
)
def test_container_command_references_expand_as_the_kubelet_does(
    text: str, env: dict[str, str], expanded: str
) -> None:
    assert expand(text, env) == expanded
