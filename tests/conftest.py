"""Shared fixtures and helpers: repo paths, the CLI runners (in-process, the module), the
examples' manifests and a job's `pytorch` containers, a throw-away presets folder, profile
writers, the CRD oracle."""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings
from typer.testing import CliRunner, Result

from runai_spec.cli import app
from runai_spec.facts.kubeflow import CONTAINER, REPLICA_TYPES
from runai_spec.load import registry as registry_module

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CRD = SHARED / "schemas" / "kubeflow.org_pytorchjobs.yaml"
ALL_EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/profile.yaml"))
# An example with a proposal/ folder (an engineer's preset and site change, unsigned) renders only
# once that is signed: its tests sign it with a throwaway key (tests/mpi_presets.py); the others
# render on the shipped presets.
PROPOSED_EXAMPLES = [e for e in ALL_EXAMPLES if (ROOT / "examples" / e / "proposal").is_dir()]
EXAMPLES = [e for e in ALL_EXAMPLES if e not in PROPOSED_EXAMPLES]
DIGEST = "sha256:" + "ab" * 32
NS, NAME = "runai-nlp-lab", "llm-7b-fsdp"  # the multi-node example's project and job

BASE_PROFILE: dict[str, Any] = {
    "name": "demo",
    "project": "team-a",
    "preset": "h200-2x8-ib",
    "image": f"registry.scc.example.org/team-a/train:1.0@{DIGEST}",
    "command": ["train.py", "--config", "cfg.yaml"],
    "working_dir": "/workspace",
    "env": {"MY_FLAG": "1"},
    "batch": {"local": 4, "grad_accum": 2, "global": 128},
    "strategy": "ddp",
    "model": {"parameters": 1_000_000, "precision": "bf16"},
    "checkpoint": {"dir": "/checkpoints", "pvc": "team-a-ckpt", "format": "dcp", "resume": "latest"},
}
runner = CliRunner()

# Hypothesis: 250 examples a property in CI (.ci/run sets HYPOTHESIS_PROFILE=ci), a hundred on a
# developer's machine, a thousand in the full run (HYPOTHESIS_PROFILE=full, with the long
# tests: README); a test that needs another count says so in its own settings, through
# `examples` where the count scales with the profile. Measured (issue 29): the 13 properties
# that take the profile's count cost 117 s of CPU at 2000 examples; issue 37 (CI within 5
# minutes on 2 cores) moved CI from 1000 to 250 and kept the thousand for the full run.
HYPOTHESIS_PROFILE_VAR = "HYPOTHESIS_PROFILE"
FULL_COUNT = 1000
settings.register_profile("full", max_examples=FULL_COUNT, deadline=None)
settings.register_profile("ci", max_examples=250, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_VAR, "dev"))


def examples(full: int) -> int:
    """A property's own count of examples, FULL in the full run, scaled like the profile's
    count otherwise (never below ten)."""
    return max(10, full * settings().max_examples // FULL_COUNT)


def run(*args: str, input: str | None = None, env: Mapping[str, str] | None = None) -> Result:
    """The CLI in-process (stdout and stderr apart), with INPUT on its standard input and ENV
    over the environment: every in-process test runs the CLI through this one runner."""
    return runner.invoke(app, list(args), input=input, env=env)


def cli(*args: str) -> tuple[int, str, str]:
    """The CLI in-process: (exit code, stdout, stderr)."""
    done = run(*args)
    return done.exit_code, done.stdout, done.stderr


def run_module(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m runai_spec` in its own process, from the repository root: the library's
    logging goes where a user's terminal would."""
    return subprocess.run(
        [sys.executable, "-m", "runai_spec", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def needs_torch() -> None:
    """Skip the calling test where PyTorch is not installed: found, not imported. The
    rehearsals run torch in processes of their own; importing it in the test's process (what
    pytest.importorskip does) cost each xdist worker 1.5 s of CPU and 300 MB (issue 29)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("could not import 'torch': PyTorch is not installed")


def example_job(name: str) -> dict[str, Any]:
    """The committed render of examples/NAME: its manifest.yaml (one PyTorchJob), a fresh copy
    the caller may change."""
    return copy.deepcopy(_example_job(name))


def pytorch_container(job: Mapping[str, Any], role: str | None = None) -> dict[str, Any]:
    """The container the operator configures (named `pytorch`) in ROLE's pod template of the
    PyTorchJob JOB (Master, else Worker, where ROLE is None): the job's own dict, which the
    caller may change."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    return _named_container(specs[role if role is not None else next(r for r in REPLICA_TYPES if r in specs)])


def pytorch_containers(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `pytorch` container of each replica type of JOB, in the job's order (its own dicts)."""
    return [_named_container(rspec) for rspec in job["spec"]["pytorchReplicaSpecs"].values()]


def _named_container(rspec: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in rspec["template"]["spec"]["containers"] if c["name"] == CONTAINER)
    return found


@cache
def _example_job(name: str) -> dict[str, Any]:
    """examples/NAME/manifest.yaml parsed once a process (PyYAML's pure-Python loader: 4-10 ms
    a file, some 200 calls a worker; a deep copy 0.1 ms: issue 29); never handed out."""
    job: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name / "manifest.yaml").read_text())
    return job


_SUITE_HOME: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """Tests never read the real home (issue 23: `plan` read ~/.cache/runai-spec/rehearsals, so
    one rehearsal on the developer's machine failed a test): HOME and XDG_CACHE_HOME point at
    a temporary folder for the whole suite, session fixtures and child processes included (each
    xdist worker has its own). Each test also gets a cache folder of its own (_no_user_cache)."""
    home = Path(tempfile.mkdtemp(prefix="runai-spec-tests-home-"))
    _SUITE_HOME.append(home)
    os.environ["HOME"] = str(home)
    os.environ["XDG_CACHE_HOME"] = str(home / ".cache")


FAULTS_GROUP = "faults"
# the other rehearsals take turns between two groups: with the fault model's, at most three
# run at once, whatever the number of workers (issue 29: at -n 4, four side by side made a
# rank that crashed in teardown restart before the rehearsal stopped its pods)
REHEARSALS_GROUP = "rehearsals-"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The rehearsals under the kubelet/operator model (marked `faults`) are timed against
    one another's processes (a rank busy past the back-off, a kill at the checkpoint): with
    `-n N --dist loadgroup` (the README's test command) they share one worker, one at a
    time; the other rehearsals (slow or torch) take turns between two more groups, and the
    other workers take the offline tests, which fill the rehearsals' waits. xdist hands out
    the groups first (the largest first), then the other tests in `_first`'s order, so that
    the run ends with short tests on every worker (issue 29)."""
    rehearsals = 0
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(pytest.mark.xdist_group(FAULTS_GROUP))
        elif item.get_closest_marker("slow") or item.get_closest_marker("torch"):
            item.add_marker(pytest.mark.xdist_group(f"{REHEARSALS_GROUP}{rehearsals % 2}"))
            rehearsals += 1
    if getattr(config.option, "loadgroup", False):  # set in each xdist worker by --dist loadgroup
        _name_groups(items)
    items.sort(key=_first)


def _name_groups(items: list[pytest.Item]) -> None:
    """What pytest-xdist 3.8 means to do for --dist loadgroup: '@<group>' after the id of each
    test with an xdist_group mark, which its scheduler reads to keep a group on one worker.
    xdist sets `item._nodeid`, which pytest 9 no longer reads (the id is `item._id`), so
    without this every group was spread over the workers (issue 29: the `faults` rehearsals
    ran side by side, and each worker compiled the policy for cel-python)."""
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = NodeId.parse(item.nodeid + suffix)


def _first(item: pytest.Item) -> int:
    """0 for the fault model's tests, 1 for the offline tests of many CPU seconds (the
    properties, a thousand examples each under `ci`, and those marked `heavy` or
    `benchmark`), 2 for the other rehearsals (slow or torch), 3 else. xdist hands the tests
    out in this order, a few at a time to whichever worker is free, so that the run ends
    with short tests on every worker: the render -d kill loop, last in file order, had run
    alone at the end for 25 s (issue 29). The fault model's group runs beside the offline
    tests of many seconds (one process each) more than beside other rehearsals: at load
    7-10, four rehearsals side by side made the recreated pod of the elastic eviction run
    miss its rendezvous round."""
    if item.get_closest_marker("faults") is not None:
        return 0
    if item.get_closest_marker("slow") or item.get_closest_marker("torch"):
        return 2
    is_property = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
    heavy = item.get_closest_marker("heavy") or item.get_closest_marker("benchmark")
    return 1 if is_property or heavy else 3


def pytest_unconfigure(config: pytest.Config) -> None:
    for home in _SUITE_HOME:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Tests never read ~/.kube/config: point KUBECONFIG and HOME's .kube somewhere empty.
    fake_home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("KUBECONFIG", str(fake_home / "no-kubeconfig"))


@pytest.fixture(autouse=True)
def _no_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Tests never read or write ~/.cache (the CRD schemas, the rehearsal records plan reads).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


# (python, CUDA_VISIBLE_DEVICES) -> what `rehearse`'s GPU probe answered in this process
_PROBED: dict[tuple[str, str | None], int] = {}


@pytest.fixture(autouse=True)
def _gpus_probed_once(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rehearsal (slow or torch) asks the same Python how many GPUs torch sees once a
    process: `rehearse` starts `python -c "import torch; ..."` for it (1.1 s of CPU each,
    16 times in the CI selection; issue 29). The first rehearsal of each xdist worker runs
    the real probe, and every answer is the real one for that Python and CUDA_VISIBLE_DEVICES;
    a failed probe (no torch: bad input, tests/rehearse/test_rehearse_unit.py) is never kept."""
    if not (request.node.get_closest_marker("slow") or request.node.get_closest_marker("torch")):
        return
    from runai_spec import rehearse
    from runai_spec.rehearse import argv

    def probe(python: str) -> int:
        key = (python, os.environ.get("CUDA_VISIBLE_DEVICES"))
        if key not in _PROBED:
            _PROBED[key] = argv.probe_gpus(python)
        return _PROBED[key]

    monkeypatch.setattr(rehearse, "probe_gpus", probe)


@pytest.fixture(autouse=True)
def _quiet_debug() -> Iterator[None]:
    """--debug installs log handlers process-wide: take them off after each test, so one
    test's --debug never shows up in another test's stderr."""
    yield
    for name in ("runai_spec", "urllib3"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)


@pytest.fixture
def base_profile() -> dict[str, Any]:
    return copy.deepcopy(BASE_PROFILE)


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[..., Path]:
    counter = {"n": 0}

    def write(data: dict[str, Any] | str, name: str | None = None) -> Path:
        counter["n"] += 1
        path = tmp_path / (name or f"profile-{counter['n']}.yaml")
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def presets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of presets/ that the tool uses instead of the shipped one."""
    target = tmp_path / "presets"
    shutil.copytree(ROOT / "presets", target)
    monkeypatch.setattr(registry_module, "default_presets_dir", lambda: target)
    return target


ENGINEER = "test-engineer@scc.example.org"


def make_key(folder: Path, name: str) -> Path:
    """A throwaway ed25519 key (no passphrase) at FOLDER/NAME, its public half at NAME.pub."""
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def allow_signer(presets: Path, key: Path, principal: str) -> None:
    """List KEY's public half for PRINCIPAL in PRESETS/allowed_signers."""
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    with (presets / "allowed_signers").open("a", encoding="utf-8") as out:
        out.write(f"{principal} {kind} {blob}\n")


@pytest.fixture(scope="session")
def _engineer_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_key(tmp_path_factory.mktemp("keys"), "engineer")


@pytest.fixture
def engineer_key(presets_dir: Path, _engineer_key: Path) -> Path:
    """A throwaway engineer's key, listed (as ENGINEER) in the allowed_signers of the
    presets_dir copy only: what `presets approve --key` signs with in tests."""
    allow_signer(presets_dir, _engineer_key, ENGINEER)
    return _engineer_key


@lru_cache(maxsize=1)
def upstream_crd() -> dict[str, Any]:
    """The upstream PyTorchJob CRD (../shared/schemas), parsed once; callers copy it."""
    crd: dict[str, Any] = yaml.load(
        CRD.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    return crd


@lru_cache(maxsize=1)
def crd_validator() -> Any:
    import jsonschema

    crd = upstream_crd()
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator().iter_errors(manifest)
    ]


class _EveryName(dict[str, str]):
    """A container env that defines every name: a `$(NAME)` left unescaped shows up."""

    def get(self, key: str, default: object = None) -> str:
        return f"<{key} expanded>"


def kubelet_sees(text: str) -> str:
    """TEXT as the container gets it after the kubelet's `$(VAR)` expansion of command, args
    and env values (rehearse/kubelet.py, after Kubernetes expand.go), every name defined."""
    from runai_spec.facts.kubelet import expand

    return expand(text, _EveryName())
