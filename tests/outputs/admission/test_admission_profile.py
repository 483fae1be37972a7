"""Profile-side values: a profile change renders into a job the policy admits iff `validate`
accepts it, for every site rule the policy enforces; every site rule is either enforced by the
policy's profile-side rules or left to validate with a reason (a new rule fails here, never
skips).

After a rule change: docs/engineer.md, "Testing a preset or rule change"."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT
from outputs.admission.admission_policy import (
    REGISTRY,
    Job,
    Policy,
    at_the_bounds,
    shared_policy,
)
from runai_spec.check.catalogue import RULES as SITE_RULES
from runai_spec.outputs.admission import rules as admission_rules
from runai_spec.pipeline.workload import prepare_workload

pytest.importorskip("cel_expr_python.cel")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return shared_policy()


# -- profile-side values: admitted iff validate accepts them --------------------------------
# The site rules the policy's profile-side rules enforce (admission/rules.py: each rule names
# validate's checks it enforces); the others are left to validate, each with its reason.
ENFORCED = admission_rules.enforced_rule_ids()
LEFT_TO_VALIDATE = {
    next(r.id for r in SITE_RULES.values() if r.check is check): why
    for check, why in admission_rules.LEFT_TO_VALIDATE.items()
}


def test_every_site_rule_is_enforced_by_the_policy_or_left_to_validate_with_a_reason() -> None:
    unplaced = set(SITE_RULES) - ENFORCED - set(LEFT_TO_VALIDATE)
    assert unplaced == set(), (
        f"site rules the admission policy neither enforces nor leaves to validate: {sorted(unplaced)}; "
        "name the rule's check in the `enforces` of the profile-side rule (outputs/admission/rules.py) "
        "that refuses the same values, or in LEFT_TO_VALIDATE with why the render does not show them"
    )
    assert ENFORCED.isdisjoint(LEFT_TO_VALIDATE), ENFORCED & set(LEFT_TO_VALIDATE)
    assert all(LEFT_TO_VALIDATE.values())
    assert {"image-digest", "launcher", "reserved-env", "mount-path", "secret-env"} <= ENFORCED


# accelerate configs a profile change may name (written beside the profile). A top-level
# engineers' key is refused by validate and dropped by the render (facts.accelerate.
# researcher_keys), as a reserved field is: the job shows nothing of it, so no case here; one
# nested in a training block reaches the annotation, where the policy denies it
ACCELERATE_CONFIGS = {
    "good.json": {"mixed_precision": "bf16", "dynamo_config": {"dynamo_backend": "INDUCTOR"}},
    "nested.json": {"dynamo_config": {"dynamo_backend": "NO", "gpu_ids": "0"}},
}


def _accelerate(config: str) -> Callable[[dict[str, Any]], None]:
    """launcher: accelerate with CONFIG (strategy ddp, the preset's first: another strategy's
    flag is not judged yet, test_admission_accelerate's xfail); not on one GPU, where python
    runs and the config is never rendered (validate's 'no effect' refusal is validate's alone:
    the job is unchanged)."""

    def change(p: dict[str, Any]) -> None:
        if p["preset"] != "h200-1gpu":
            p.update(launcher="accelerate", accelerate_config=config, strategy="ddp")

    return change


def _job_of(profile: dict[str, Any], tmp: Path) -> tuple[Job | None, set[str]]:
    for name, config in ACCELERATE_CONFIGS.items():
        (tmp / name).write_text(json.dumps(config), encoding="utf-8")
    path = tmp / "profile.yaml"
    path.write_text(json.dumps(profile), encoding="utf-8")
    try:
        workload = prepare_workload(path, REGISTRY)
    except Exception:
        return None, set()
    job = next(m for m in workload.manifests if m.get("kind") == "PyTorchJob")
    return dict(job), {f.rule for f in workload.errors}


def _checkpoint_dir(profile: dict[str, Any], folder: str) -> None:
    """checkpoint.dir moved, and the script's --checkpoint-dir argument with it (validate's
    checkpoint-on-pvc refuses an argument outside checkpoint.dir, a rule left to validate)."""
    profile["checkpoint"]["dir"] = folder
    profile["command"] = [folder if arg == "/checkpoints" else arg for arg in profile["command"]]


PROFILE_CHANGES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("env-plain", lambda p: p.setdefault("env", {}).update({"WANDB_PROJECT": "llm"})),
    ("env-nvidia-visible", lambda p: p.setdefault("env", {}).update({"NVIDIA_VISIBLE_DEVICES": "all"})),
    ("env-socket", lambda p: p.setdefault("env", {}).update({"NCCL_SOCKET_IFNAME": "eth0"})),
    ("env-ld-preload", lambda p: p.setdefault("env", {}).update({"LD_PRELOAD": "./x.so"})),
    ("env-rank", lambda p: p.setdefault("env", {}).update({"RANK": "0"})),
    ("env-token", lambda p: p.setdefault("env", {}).update({"HF": "hf_" + "a" * 34})),
    ("secret-env", lambda p: p.update(secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}})),
    ("args-more", lambda p: p.update(command=[*p["command"], "--lr", "3e-4", "--epochs=2"])),
    ("args-nproc", lambda p: p.update(command=[*p["command"], "--nproc-per-node=64"])),
    ("args-password", lambda p: p.update(command=[*p["command"], "--password=hunter2"])),
    ("entry-shell", lambda p: p.update(command=["./run.sh", "--x"])),
    ("entry-launcher", lambda p: p.update(command=["torchrun", "--nproc-per-node=3", "train.py"])),
    ("entry-flag", lambda p: p.update(command=["--standalone", "train.py"])),
    ("image-other-tag", lambda p: p.update(image=p["image"].replace(":1.8.0@", ":2.0@"))),
    ("image-nvcr", lambda p: p.update(image="nvcr.io/nvidia/pytorch:24.05-py3@sha256:" + "c" * 64)),
    ("image-no-digest", lambda p: p.update(image=p["image"].split("@")[0])),
    ("image-registry", lambda p: p.update(image="docker.io/evil/x@sha256:" + "c" * 64)),
    # the tag's bound, which the policy reads only on an image long enough to break it
    ("image-tag-128", lambda p: p.update(image=p["image"].replace(":1.8.0@", ":" + "t" * 128 + "@"))),
    ("image-tag-129", lambda p: p.update(image=p["image"].replace(":1.8.0@", ":" + "t" * 129 + "@"))),
    # each credential shape, which the policy reads only where its literal part is there
    ("args-jwt", lambda p: p.update(command=[*p["command"], "--x=eyJ" + "a" * 9 + ".eyJ" + "b" * 9 + ".c"])),
    ("args-url", lambda p: p.update(command=[*p["command"], "--data=s3://user:pw@bucket/x"])),
    ("args-url-plain", lambda p: p.update(command=[*p["command"], "--data=s3://bucket/x"])),
    ("env-key", lambda p: p.setdefault("env", {}).update({"K": "x -----BEGIN RSA PRIVATE KEY----- y"})),
    ("env-gh-short", lambda p: p.setdefault("env", {}).update({"G": "ghp_" + "a" * 35})),
    ("workdir", lambda p: p.update(working_dir="/opt/code")),
    ("workdir-proc", lambda p: p.update(working_dir="/proc/self")),
    # a folder name's bound, which the policy reads only on a path long enough to break it
    ("workdir-name-255", lambda p: p.update(working_dir="/opt/" + "w" * 255)),
    ("workdir-name-256", lambda p: p.update(working_dir="/opt/" + "w" * 256)),
    ("no-workdir", lambda p: p.pop("working_dir", None)),
    ("ckpt-dir", lambda p: _checkpoint_dir(p, "/ckpt/run1")),
    ("ckpt-etc", lambda p: _checkpoint_dir(p, "/etc/ckpt")),
    ("data-two", lambda p: p.update(data=[*p.get("data", []), {"pvc": "extra", "path": "/extra"}])),
    ("data-writable", lambda p: p.update(data=[{"pvc": "scratch", "path": "/scratch", "read_only": False}])),
    ("data-none", lambda p: p.update(data=[])),
    ("data-dev-shm", lambda p: p.update(data=[{"pvc": "x", "path": "/dev/shm"}])),
    ("name", lambda p: p.update(name="other-name")),
    ("name-48", lambda p: p.update(name="n" * 48)),
    ("name-49", lambda p: p.update(name="n" * 49)),
    ("name-54", lambda p: p.update(name="n" * 54)),
    ("name-smoke", lambda p: p.update(name="train-smoke")),
    ("diagnostics", lambda p: p.update(diagnostics={"nccl_debug": True, "reason": "ticket 1"})),
    ("accelerate-config", _accelerate("good.json")),
    ("accelerate-config-nested", _accelerate("nested.json")),
]


# Issue 41 item 4: spellings of an entry point's path, each normalised by validate
# (torchrun.launcher_entry) and the policy (rules.py's entry-point rule) from one definition
# (torchrun.LAUNCHER_SCRIPT): (path, refused).
ENTRY_SPELLINGS = [
    ("train.py", False),
    ("./train.py", False),
    ("src/./train.py", False),
    ("src//train.py", False),
    ("a/b/run.py", False),
    ("mytorch/distributed/run.py", False),
    ("torch/distributed/run.py", True),
    ("/usr/lib/python3/site-packages/torch/distributed/run.py", True),
    ("torch/distributed//run.py", True),
    ("torch//distributed/run.py", True),
    ("/opt/./torch/./distributed/./run.py", True),
    ("/x/../torch/distributed/run.py", True),
    ("torch/distributed/x/../run.py", True),
    ("../run.py", True),
    ("deepspeed/launcher//runner.py", True),
    ("accelerate/commands/./launch.py", True),
    ("deepspeed/launcher/launch.py", True),
]


@pytest.mark.parametrize(("path", "refused"), ENTRY_SPELLINGS, ids=[p for p, _ in ENTRY_SPELLINGS])
def test_an_entry_point_s_spellings_are_normalised_alike_by_validate_and_the_policy(
    policy: Policy, tmp_path: Path, path: str, refused: bool
) -> None:
    from runai_spec.facts import torchrun

    assert (torchrun.launcher_entry([path]) is not None) is refused
    for example in ("multi-node", "single-gpu"):
        profile = yaml.safe_load((ROOT / "examples" / example / "profile.yaml").read_text())
        # DeepSpeed's launcher script is followed by launcher flags (the red team's form)
        profile["command"] = [path, "--num_gpus=8", "train.py"]
        job, errors = _job_of(profile, tmp_path)
        assert job is not None
        assert ("launcher" in errors) is refused, (example, errors)
        assert bool(policy.denials(job)) is refused, (example, policy.denials(job))


@pytest.mark.parametrize(
    ("example", "change"),
    [(e, c) for e in ("multi-node", "single-gpu") for c in PROFILE_CHANGES],
    ids=[f"{e}-{c[0]}" for e in ("multi-node", "single-gpu") for c in PROFILE_CHANGES],
)
def test_a_profile_change_is_admitted_iff_validate_accepts_it(
    policy: Policy, tmp_path: Path, example: str, change: tuple[str, Callable[[dict[str, Any]], None]]
) -> None:
    profile = yaml.safe_load((ROOT / "examples" / example / "profile.yaml").read_text())
    change[1](profile)
    job, errors = _job_of(profile, tmp_path)
    assert job is not None, "each change is a profile that renders (a schema error is validate's alone)"
    assert errors <= ENFORCED, (
        f"refused for rules the policy leaves to validate ({sorted(errors - ENFORCED)}): "
        "the case tests nothing here; change it, or enforce the rule in the policy"
    )
    denied = policy.denials(job)
    if errors:
        assert denied, (errors, job)
    else:
        assert denied == {}, denied


def test_the_profile_changes_reach_every_rule_the_policy_enforces(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A rule the policy enforces with no change here that `validate` refuses for it would be
    enforced untested: each enforced rule is refused by one change at least."""
    seen: set[str] = set()
    for example in ("multi-node", "single-gpu"):
        for _, change in PROFILE_CHANGES:
            profile = yaml.safe_load((ROOT / "examples" / example / "profile.yaml").read_text())
            change(profile)
            seen |= _job_of(profile, tmp_path_factory.mktemp("p"))[1]
    assert ENFORCED - seen == set(), f"no profile change here is refused for {sorted(ENFORCED - seen)}"


@pytest.mark.parametrize("example", ["multi-node", "single-node"])
def test_random_profile_values_are_admitted_iff_validate_accepts_them(
    policy: Policy, tmp_path_factory: pytest.TempPathFactory, example: str
) -> None:
    import hypothesis  # a test dependency: conftest loads its profiles
    from hypothesis import strategies as st

    base = yaml.safe_load((ROOT / "examples" / example / "profile.yaml").read_text())
    names = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,12}\Z").filter(lambda n: n != "_")
    text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2030), max_size=24)
    paths = st.from_regex(r"\A(/[a-z.]{1,6}){1,3}/?\Z")

    @hypothesis.settings(
        max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(hypothesis.HealthCheck)
    )
    @hypothesis.given(
        env=st.dictionaries(names, text, max_size=3),
        args=st.lists(text.filter(bool), max_size=3),
        workdir=paths,
        ckpt=paths,
    )
    def check(env: dict[str, str], args: list[str], workdir: str, ckpt: str) -> None:
        profile = copy.deepcopy(base)
        profile["env"] = env
        profile["command"] = [base["command"][0], *args]
        profile["working_dir"] = workdir
        profile["checkpoint"]["dir"] = ckpt
        job, errors = _job_of(profile, tmp_path_factory.mktemp("p"))
        if job is None or errors - ENFORCED:
            return
        denied = policy.denials(job)
        assert bool(denied) == bool(errors), (errors, denied, env, args, workdir, ckpt)

    check()


def test_validate_s_bounds_on_the_command_and_env_are_the_policy_s(policy: Policy, tmp_path: Path) -> None:
    """Issue 41 item 8: the longest command and env validate accepts are admitted; one more
    argument, character or variable is refused by validate (its schema); the policy
    denies the counts and lengths it can see (one item's, before any regular expression)."""
    from pydantic import ValidationError

    from runai_spec.load.profile import MAX_ENTRIES, MAX_NAME, MAX_TEXT, Profile

    profile = yaml.safe_load((ROOT / "examples" / "multi-node" / "profile.yaml").read_text())
    at_the_bounds(profile)
    job, errors = _job_of(profile, tmp_path)
    assert job is not None and not errors, errors
    assert policy.denials(job) == {}
    over: dict[str, Callable[[dict[str, Any]], None]] = {
        "args": lambda p: p["command"].append("-x"),
        "command-text": lambda p: p["command"].__setitem__(1, p["command"][1] + "x"),
        "arg-chars": lambda p: p.update(command=[p["command"][0], "x" * (MAX_TEXT + 1)]),
        "env-text": lambda p: p["env"].__setitem__(
            next(iter(p["env"])), p["env"][next(iter(p["env"]))] + "y"
        ),
        "value-chars": lambda p: p.update(
            env={k: "y" * (MAX_TEXT + 1) if i == 0 else "" for i, k in enumerate(p["env"])}
        ),
        "name-chars": lambda p: p["env"].__setitem__("N" * (MAX_NAME + 1), "y"),
        "entries": lambda p: p["env"].__setitem__("ONE_MORE", ""),
    }
    for what, change in over.items():
        bigger = copy.deepcopy(profile)
        change(bigger)
        with pytest.raises(ValidationError):  # validate refuses it (the profile's schema)
            Profile.model_validate(bigger)
        assert Profile.model_validate(profile), what
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    tampers: dict[str, Callable[[], None]] = {
        "args": lambda: container["command"].append("-x"),
        "arg-chars": lambda: container["command"].__setitem__(-1, "x" * (MAX_TEXT + 1)),
        "value-chars": lambda: next(v for v in container["env"] if v.get("value", "").startswith("y")).update(
            value="y" * (MAX_TEXT + 1)
        ),
        # beyond the preset's own entries (some optional) and twice MAX_ENTRIES (env, secret_env)
        "entries": lambda: container["env"].extend(
            {"name": f"MORE{i}", "value": "y"} for i in range(2 * MAX_ENTRIES)
        ),
    }
    for what, tamper in tampers.items():
        saved = copy.deepcopy(container)
        tamper()
        assert "shape" in policy.denials(job), what
        container.clear()
        container.update(saved)
