"""The launcher seam: a launcher is one class registered by name, and nothing else names it."""

from __future__ import annotations

import inspect
import io
import tokenize
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, ROOT
from runai_spec.check.launcher import LAUNCHER_FLAGS, LAUNCHERS
from runai_spec.errors import InputError
from runai_spec.facts.kubeflow import CONTAINER, pytorch_container
from runai_spec.facts.torchrun import LAUNCHER_MODULES, SHUTDOWN_TIMEOUT_ENV
from runai_spec.load.presets import Preset
from runai_spec.load.profile import load_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.smoke import PREFLIGHT, smoke_plan
from runai_spec.plan import launcher as launchers
from runai_spec.plan.failure import failure_semantics, save_time
from runai_spec.plan.launcher import (
    PYTORCHJOB,
    Launcher,
    LauncherFile,
    LaunchSetup,
    RendezvousPlan,
    choose_launcher,
    launcher_named,
    launcher_names,
    register_launcher,
)
from runai_spec.plan.origins import Entry, Origin, Sources, derived, same
from runai_spec.plan.plan import Plan, plan_workload
from runai_spec.plan.volumes import CHECKPOINT, DATA, SHM, volume_role
from runai_spec.rehearse.job import checkpoint_mount, plan_world_size
from runai_spec.render import render_plan, render_smoke
from runai_spec.render.manifests import Manifest

REGISTRY = PresetRegistry(ROOT / "presets")


class FakeRun:
    """A third launcher, known to this test only: its own program, flag and variable."""

    name = "fakerun"
    workload = PYTORCHJOB
    programs: tuple[str, ...] = ("fakerun",)
    reserved_flags = r"--fake-topology"
    reserved_modules: tuple[str, ...] = ()
    restarts_ranks = False
    forwards_sigterm = True

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        return None

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        return ("fakerun", f"--procs={setup.procs_per_pod}")

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        return (*self.head(setup), f"--grace={setup.grace_s}")

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        return None

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        return {"FAKERUN_PROCS": same(derived("fakerun's own"), "FAKERUN_PROCS", str(setup.procs_per_pod))}

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        return {}

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        return derived("fakerun")

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        return grace_s - 1

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        return ()


@pytest.fixture
def fakerun(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """FakeRun registered by name, for this test only."""
    monkeypatch.setattr(launchers.base, "_REGISTRY", dict(launchers.base._REGISTRY))
    register_launcher("fakerun", FakeRun)
    yield "fakerun"


def _plan(example: str, launcher_name: str | None = None) -> Plan:
    loaded = load_profile(ROOT / "examples" / example / "profile.yaml")
    return plan_workload(
        loaded, REGISTRY.get(loaded.profile.preset), REGISTRY.site(), launcher_name=launcher_name
    )


def _containers(job: Manifest) -> Iterator[Mapping[str, Any]]:
    for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
        yield pytorch_container(spec, role)


def test_a_third_launcher_registered_by_name_renders_its_own_command_and_env(fakerun: str) -> None:
    plan = _plan("multi-node", launcher_name=fakerun)
    assert plan.launcher_name == "fakerun" and plan.launcher == ("fakerun", "--procs=8", "--grace=300")
    (job,) = render_plan(plan)
    entry = list(plan.entrypoint)
    for container in _containers(job):
        assert container["name"] == CONTAINER
        assert container["command"] == ["fakerun", "--procs=8", "--grace=300", *entry]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["FAKERUN_PROCS"] == "8"
        # nothing of torchrun's: no rendezvous, no shutdown window, no per-rank logs
        assert SHUTDOWN_TIMEOUT_ENV not in env and "POD_NAME" not in env
    assert plan.rendezvous is None and plan.origins["launcher[0]"] == derived("fakerun")
    # the failure semantics read the launcher's: it forwards SIGTERM with its own window
    assert failure_semantics(plan).choices
    assert save_time(plan) == f"299 s (torch {plan.torch_version})"


def test_the_smoke_job_runs_preflight_under_the_jobs_own_launcher(fakerun: str) -> None:
    plan = _plan("elastic", launcher_name=fakerun)
    smoke = smoke_plan(plan, source="print('preflight')\n")
    assert smoke.job.launcher_name == fakerun and smoke.job.launcher == plan.launcher
    _, job = render_smoke(smoke)
    for container in _containers(job):
        assert container["command"][:4] == [*plan.launcher, PREFLIGHT]
    # the elastic job's pods: its workers at their most, as the workload kind names them
    assert plan.elastic is not None
    last = f"-{plan.workload.roles[-1].lower()}-{plan.elastic.max_pods - 1}"
    assert smoke.job.pod_names[-1].endswith(last) and len(smoke.job.pod_names) == plan.elastic.max_pods


def test_the_layouts_launcher_is_chosen_in_one_place_and_a_wrong_name_is_bad_input() -> None:
    assert choose_launcher("single-gpu") == "python"
    assert choose_launcher("single-node") == choose_launcher("multi-node") == "torchrun"
    assert choose_launcher("multi-node", "python") == "python"
    for example in EXAMPLES:
        plan = _plan(example)
        profile = load_profile(ROOT / "examples" / example / "profile.yaml").profile
        elastic = plan.elastic is not None
        assert plan.launcher_name == choose_launcher(plan.layout, profile=profile.launcher, elastic=elastic)
        assert plan.workload == launcher_named(plan.launcher_name).workload
    with pytest.raises(InputError) as caught:
        launcher_named("torchrnu")
    assert caught.value.hint == "did you mean 'torchrun'?"


def _members() -> dict[str, inspect.Signature | None]:
    """The protocol's attributes (None) and methods (their signatures)."""
    out: dict[str, inspect.Signature | None] = dict.fromkeys(Launcher.__annotations__)
    for name, value in vars(Launcher).items():
        if inspect.isfunction(value) and not name.startswith("_"):
            out[name] = inspect.signature(value)
    return out


@pytest.mark.parametrize("name", launcher_names())
def test_every_registered_launcher_implements_the_whole_interface(name: str) -> None:
    launcher = launcher_named(name)
    members = _members()
    assert {"name", "workload", "argv", "env", "rendezvous", "reserved_flags", "reserved_modules"} <= set(
        members
    )
    for member, signature in members.items():
        assert hasattr(launcher, member), f"{name} has no {member}"
        if signature is not None:
            own = inspect.signature(getattr(type(launcher), member))
            assert list(own.parameters) == list(signature.parameters), f"{name}.{member}{own}"
    assert launcher.name == name and launcher.workload.template.endswith(".j2")
    # what the launcher rule refuses in a researcher's command is derived from the launchers
    assert set(launcher.programs) <= LAUNCHERS
    assert set(launcher.reserved_modules) <= set(LAUNCHER_MODULES)
    if launcher.reserved_flags:
        assert launcher.reserved_flags in LAUNCHER_FLAGS.pattern


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_plans_its_launchers_argv_and_world_once(example: str) -> None:
    plan = _plan(example)
    (job,) = render_plan(plan)
    for container in _containers(job):
        assert container["command"][: len(plan.launcher)] == list(plan.launcher)
    assert plan_world_size(job) == plan.world_size
    assert [r.role for r in plan.replicas] == [
        r for r in plan.workload.roles if r in job["spec"]["pytorchReplicaSpecs"]
    ]


def test_volume_roles_name_the_planners_volumes_and_nothing_else() -> None:
    plan = _plan("multi-node")
    roles = [v.role for v in plan.volumes]
    assert roles[0] == CHECKPOINT and set(roles) <= {CHECKPOINT, DATA, SHM}
    assert all(volume_role(v.name) == v.role for v in plan.volumes)
    assert volume_role("data-x") is None and volume_role("ckpt") is None
    assert (
        plan.mount_of(CHECKPOINT)
        == load_profile(ROOT / "examples/multi-node/profile.yaml").profile.checkpoint.dir
    )


def test_the_rehearsal_finds_a_renamed_checkpoint_volume_by_the_plans_role() -> None:
    plan = _plan("multi-node")
    renamed = plan._replace(
        volumes=tuple(v._replace(name="ckpt") if v.role == CHECKPOINT else v for v in plan.volumes)
    )
    (job,) = render_plan(renamed)
    mounts = {m["name"] for c in _containers(job) for m in c["volumeMounts"]}
    assert "ckpt" in mounts and "checkpoint" not in mounts
    assert checkpoint_mount(job, renamed) == plan.mount_of(CHECKPOINT)
    # read back without the plan, only the planner's own names count: no guessed path
    assert checkpoint_mount(job) is None
    (original,) = render_plan(plan)
    assert checkpoint_mount(original) == plan.mount_of(CHECKPOINT)


# What the rehearsal, the smoke test and the launcher rule once spelled themselves: the
# planner's volume names, a guessed checkpoint folder, the operator's variables, torchrun's flags.
LITERALS = ('"checkpoint"', '"/checkpoints"', '"dshm"', '"MASTER_ADDR"', '"MASTER_PORT"', '"PyTorchJob"')
FLAG_PREFIXES = (
    '"--rdzv',
    '"--nproc',
    '"--standalone',
    '"--log-dir',
    '"--log_dir',
    '"PET_RDZV',
    '"PET_MASTER',
)
READERS = sorted(
    [*(ROOT / "src/runai_spec/rehearse").glob("*.py"), ROOT / "src/runai_spec/pipeline/smoke.py"]
    + [ROOT / "src/runai_spec/check" / name for name in ("launcher.py", "storage.py", "training.py")]
)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal in PATH (comments and docstrings aside)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline))
    for i, token in enumerate(tokens):
        if token.type == tokenize.STRING and tokens[i - 1].type not in (tokenize.INDENT, tokenize.NEWLINE):
            yield token.start[0], token.string


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_the_planners_decisions_are_read_never_spelled_again(path: Path) -> None:
    found = [
        f"{path.name}:{line}: {text}"
        for line, text in _strings(path)
        if text in LITERALS or text.startswith(FLAG_PREFIXES)
    ]
    # a check row is called `checkpoint` (the preflight's and the audit layer's), and so is the
    # profile's field a finding points at (storage.py): neither is a volume
    allowed = {"runner.py", "script_saves.py", "faults.py", "bottleneck.py", "storage.py"}
    found = [f for f in found if not (f.split(":")[0] in allowed and f.endswith('"checkpoint"'))]
    assert found == []
