"""Red team (issue 12, item 1 and 7): the kubelet expands `$(VAR)` in a container's command,
args and env values (Kubernetes expand.go, modelled in rehearse/kubelet.py). A profile's
`command: ["$(X).py", train.py]` with `env: {X: "--rdzv-conf=..."}` rendered `$(X).py` as
written, and the pod would have started torchrun with the profile's own flag before the entry
point; on one GPU `-cimport os;...` became python's -c. The researcher's text is written for
the kubelet (`$` as `$$`), so the container gets exactly what was typed."""

from __future__ import annotations

import copy
from typing import Any

from conftest import BASE_PROFILE, ROOT, pytorch_container
from runai_spec.facts.kubeflow import kubelet_literal
from runai_spec.facts.kubelet import container_env, expand, expand_command
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.plan.plan import plan_workload
from runai_spec.render import render_plan
from runai_spec.render.manifests import dump

REGISTRY = PresetRegistry(ROOT / "presets")
FLAG = "--rdzv-conf=join_timeout=5,read_timeout=5,x="


def container(preset: str, **changes: Any) -> dict[str, Any]:
    data = {**copy.deepcopy(BASE_PROFILE), "preset": preset, **changes}
    plan = plan_workload(parse_profile(dump([data]), "p.yaml"), REGISTRY.get(preset), REGISTRY.site())
    return pytorch_container(render_plan(plan)[-1])


def as_started(c: dict[str, Any]) -> list[str]:
    """The argv the kubelet starts: command and args expanded from the container's env."""
    # a downward-API variable (POD_NAME) stands for its value as <NAME>
    env = container_env((e["name"], e.get("value", f"<{e['name']}>")) for e in c.get("env", []))
    return expand_command([*c["command"], *c.get("args", [])], env)


def test_a_variable_reference_in_the_command_never_becomes_a_launcher_flag() -> None:
    c = container("h200-2x8-ib", command=["$(X).py", "train.py"], env={"X": FLAG})
    argv = as_started(c)
    assert f"{FLAG}.py" not in argv and "$(X).py" in argv  # the file name, as typed
    assert argv.index("$(X).py") == argv.index("--tee=3") + 1  # still the entry point
    # the tool's own references still expand: the pod's log folder
    assert "--log-dir=/checkpoints/logs/<POD_NAME>" in argv


def test_on_one_gpu_a_variable_cannot_become_pythons_dash_c() -> None:
    c = container("h200-1gpu", command=["$(X).py", "train.py"], env={"X": '-cimport os;os.system("id")#'})
    argv = as_started(c)
    assert argv[:3] == ["python", "-u", "$(X).py"]


def test_env_values_reach_the_container_as_typed() -> None:
    c = container("h200-2x8-ib", env={"A": "$(POD_NAME)", "B": "$$", "C": "cost: $5"})
    env = container_env((e["name"], e.get("value", f"<{e['name']}>")) for e in c["env"])
    assert (env["A"], env["B"], env["C"]) == ("$(POD_NAME)", "$$", "cost: $5")


def test_a_checkpoint_folder_with_a_dollar_keeps_it_in_the_log_folder() -> None:
    c = container(
        "h200-2x8-ib", checkpoint={**BASE_PROFILE["checkpoint"], "dir": "/ck$(X)"}, env={"X": "/etc"}
    )
    log_dir = next(a for a in as_started(c) if a.startswith("--log-dir="))
    assert log_dir.startswith("--log-dir=/ck$(X)/logs/")


def test_kubelet_literal_round_trips_through_the_expansion() -> None:
    for text in ["", "$", "$$", "$(", "$(X)", "a$(X)b$", "$$(X)", "$((X))", "x)$(", "$ $ $"]:
        assert expand(kubelet_literal(text), {"X": "EXPANDED"}) == text
