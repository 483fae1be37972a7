"""The in-cluster smoke test: `render --smoke`, `submit --smoke`, `delete --smoke`."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import EXAMPLES, ROOT, crd_validator, needs_torch, schema_errors
from kube_helpers import NAME, NS, run
from kubeapi import KubeAPI
from runai_spec.cluster import MANAGED_BY_LABEL
from runai_spec.facts.kubeflow import SMOKE_MOUNT, operator_problems
from runai_spec.pipeline.smoke import job_deadline_s, smoke_plan
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.launcher.accelerate import RDZV_ID_ENV
from runai_spec.rehearse import free_port, operator_env, split_command
from runai_spec.render import render_smoke
from runai_spec.render.manifests import dump, parse

pytest_plugins = ("kube_fixtures",)

PREFLIGHT = ROOT / "src" / "runai_spec" / "preflight.py"
MULTI = str(ROOT / "examples" / "multi-node" / "profile.yaml")
SMOKE, CM = f"{NAME}-smoke", f"{NAME}-smoke-preflight"


def profile_of(example: str) -> Path:
    return ROOT / "examples" / example / "profile.yaml"


def smoke_render(*profiles: Path | str) -> list[dict[str, Any]]:
    result = run("render", "--smoke", *map(str, profiles))
    assert result.exit_code == 0, result.output
    return parse(result.stdout, "smoke")


def said(stderr: str, *prefixes: str) -> list[str]:
    """The lines that start with one of the prefixes (the profile's info findings aside)."""
    return [line for line in stderr.splitlines() if line.startswith(prefixes)]


def option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def replica_specs(job: dict[str, Any]) -> dict[str, Any]:
    specs: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"]
    return specs


def pytorch_container(rspec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in rspec["template"]["spec"]["containers"] if c["name"] == "pytorch")


# --- render --smoke ----------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_smoke_is_the_same_job_running_preflight_from_a_mounted_config_map(example: str) -> None:
    real = prepare_workload(profile_of(example))
    (real_job,) = real.manifests
    configmap, job = smoke_render(profile_of(example))

    assert configmap["kind"] == "ConfigMap" and job["kind"] == "PyTorchJob"
    assert job["metadata"]["name"] == f"{real.plan.name}-smoke"
    assert job["metadata"]["namespace"] == configmap["metadata"]["namespace"] == real.plan.namespace
    crd_validator().validate(job)
    assert operator_problems(job) == []
    # short and never restarted: a smoke test that fails says so at once
    assert job["spec"]["runPolicy"]["backoffLimit"] == 0
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] > 0
    # the same shape as the real job: replicas, GPUs, image, node pool, network
    assert job["spec"]["nprocPerNode"] == real_job["spec"]["nprocPerNode"]
    # the same elastic bounds, but no torchrun restarts: the operator passes maxRestarts as
    # PET_MAX_RESTARTS (0 included), and a restarted preflight could turn a failure into a pass
    real_elastic = real_job["spec"].get("elasticPolicy")
    assert job["spec"].get("elasticPolicy") == (
        None if real_elastic is None else {**real_elastic, "maxRestarts": 0}
    )

    p = real.loaded.profile
    for role, rspec in replica_specs(job).items():
        real_rspec = replica_specs(real_job)[role]
        assert rspec["replicas"] == real_rspec["replicas"] and rspec["restartPolicy"] == "Never"
        pod = rspec["template"]["spec"]
        assert {"name": "runai-spec-preflight", "configMap": {"name": configmap["metadata"]["name"]}} in pod[
            "volumes"
        ]
        container = pytorch_container(rspec)
        real_container = pytorch_container(real_rspec)
        assert {"name": "runai-spec-preflight", "mountPath": SMOKE_MOUNT, "readOnly": True} in container[
            "volumeMounts"
        ]
        assert container["image"] == real_container["image"]
        assert container["resources"] == real_container["resources"]
        # the launcher is the real one, under the smoke job's own rendezvous id (accelerate's in
        # its env: it has no flag) and without torchrun restarts (every rank runs once); the
        # entry point is preflight.py
        real_name, name = real_job["metadata"]["name"], job["metadata"]["name"]
        assert container.get("env") == [
            {**e, "value": name} if (e["name"], e.get("value")) == (RDZV_ID_ENV, real_name) else e
            for e in real_container.get("env", [])
        ]
        head = [
            f"--rdzv-id={name}"
            if a == f"--rdzv-id={real_name}"
            else "--max_restarts=0"
            if a.startswith("--max_restarts=")  # accelerate's: always rendered, 0 in the smoke job
            else a
            for a in split_command(real_container["command"]).head
            if not a.startswith("--max-restarts=")
        ]
        argv = container["command"]
        assert argv[: len(head) + 1] == [*head, f"{SMOKE_MOUNT}/preflight.py"]
        assert argv[0] == ("python" if example == "single-gpu" else real_container["command"][0])
        assert p.command[0] not in argv and "--config" not in argv  # the training command
        # the checks expect the real job: its world size, batch arithmetic, checkpoint format
        assert option(argv, "--world-size") == str(real.plan.world_size)
        assert option(argv, "--local-batch") == str(p.batch.local)
        assert option(argv, "--grad-accum") == str(p.batch.grad_accum)
        assert option(argv, "--global-batch") == str(p.batch.global_)
        assert option(argv, "--checkpoint-format") == str(p.checkpoint.format)
        assert str(option(argv, "--checkpoint-dir")).startswith(p.checkpoint.dir.rstrip("/") + "/")
        busbw = real.approved.preset.min_busbw_gbps
        assert option(argv, "--min-busbw") == (None if busbw is None else f"{busbw:g}")


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_smoke_test_matches_its_committed_smoke_manifest(example: str) -> None:
    golden = ROOT / "examples" / example / "smoke.yaml"
    result = run("render", "--smoke", str(profile_of(example)))
    assert result.exit_code == 0, result.output
    expected = golden.read_text(encoding="utf-8")
    if result.stdout != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), result.stdout.splitlines(True), str(golden), "rendered now"
            )
        )
        pytest.fail(
            f"{golden} is out of date (preflight.py changed?):\n{diff}\nrefresh with:\n"
            f"  runai-spec render --smoke examples/{example}/profile.yaml > "
            f"examples/{example}/smoke.yaml"
        )


@pytest.mark.parametrize("example", EXAMPLES)
def test_committed_smoke_manifest_validates_against_the_crd_and_operator_rules(example: str) -> None:
    text = (ROOT / "examples" / example / "smoke.yaml").read_text(encoding="utf-8")
    configmap, job = parse(text, example)
    assert schema_errors(job) == []
    assert operator_problems(job) == []
    assert (configmap["apiVersion"], configmap["kind"]) == ("v1", "ConfigMap")
    assert list(configmap["data"]) == ["preflight.py"]
    assert all(isinstance(v, str) for v in configmap["metadata"]["labels"].values())


@pytest.mark.parametrize("example", ["accelerate-multi-node", "accelerate-single-node"])
@pytest.mark.parametrize(("strategy", "stage"), [("ddp", None), ("fsdp", None), ("deepspeed", 3)])
def test_the_smoke_job_launches_as_the_job_does_whatever_its_strategy(
    tmp_path: Path, example: str, strategy: str, stage: int | None
) -> None:
    """The smoke job's launcher is planned from the job's own setup: accelerate launches a
    DeepSpeed job with --use_deepspeed and its --zero_stage (which need DeepSpeed in the image)
    and an FSDP job with --use_fsdp, where a smoke job with --multi_gpu would pass on an image
    the job fails on. Only the restarts (a smoke job runs every rank once) and what follows the
    launcher differ."""
    profile = yaml.safe_load(profile_of(example).read_text(encoding="utf-8"))
    profile.update(strategy=strategy, **({"zero_stage": stage} if stage is not None else {}))
    for extra in profile_of(example).parent.glob("*.json"):  # an accelerate config beside it
        (tmp_path / extra.name).write_text(extra.read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile), encoding="utf-8")
    (job,) = [m for m in parse(run("render", str(path)).stdout, "job") if m["kind"] == "PyTorchJob"]
    (smoke,) = [m for m in smoke_render(path) if m["kind"] == "PyTorchJob"]
    for role, rspec in replica_specs(job).items():
        ours = pytorch_container(rspec)["command"]
        theirs = pytorch_container(replica_specs(smoke)[role])["command"]
        head = ours[: ours.index(profile["command"][0])]
        assert theirs[: len(head)] == [
            a if not a.startswith("--max_restarts=") else "--max_restarts=0" for a in head
        ]
        flags = {"ddp": "--multi_gpu", "fsdp": "--use_fsdp", "deepspeed": "--use_deepspeed"}
        assert flags[strategy] in theirs[: len(head)], theirs
        if stage is not None:
            assert f"--zero_stage={stage}" in theirs[: len(head)], theirs


def test_the_smoke_deadline_replaces_the_real_jobs_own_in_place() -> None:
    plan = prepare_workload(Path(MULTI)).plan
    limited = plan._replace(run_policy=(*plan.run_policy, ("activeDeadlineSeconds", 86400)))
    _, job = render_smoke(smoke_plan(limited, deadline_s=600))
    assert list(job["spec"]["runPolicy"].items()) == [
        *((k, 0 if k == "backoffLimit" else v) for k, v in plan.run_policy),
        ("activeDeadlineSeconds", job_deadline_s(600)),
        ("suspend", False),
    ]
    # without a deadline of its own the real job gets the smoke test's after its policy
    _, job = render_smoke(smoke_plan(plan, deadline_s=600))
    assert list(job["spec"]["runPolicy"])[-2:] == ["suspend", "activeDeadlineSeconds"]


def test_a_hostile_config_map_value_stays_one_value_through_the_encoder() -> None:
    plan = prepare_workload(Path(MULTI)).plan
    smoke = smoke_plan(plan, source='"}, "kind": "Secret", "x": {"')
    configmap, _ = render_smoke(smoke)
    assert configmap["kind"] == "ConfigMap" and list(configmap) == ["apiVersion", "kind", "metadata", "data"]
    assert configmap["data"] == {"preflight.py": '"}, "kind": "Secret", "x": {"'}


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_config_map_ships_preflight_py_byte_for_byte_and_is_runai_specs(example: str) -> None:
    configmap, job = smoke_render(profile_of(example))
    assert configmap["data"]["preflight.py"].encode("utf-8") == PREFLIGHT.read_bytes()
    for obj in (configmap, job):
        assert obj["metadata"]["labels"][MANAGED_BY_LABEL] == "runai-spec"
        assert obj["metadata"]["labels"]["runai-spec/smoke"] == "true"


def test_render_smoke_is_deterministic_canonical_and_the_same_in_a_file(tmp_path: Path) -> None:
    first = run("render", "--smoke", MULTI)
    second = run("render", "--smoke", MULTI)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout
    assert dump(parse(first.stdout, "smoke")) == first.stdout
    written = run("render", "--smoke", MULTI, "-d", str(tmp_path / "out"))
    assert written.exit_code == 0, written.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"{SMOKE}.yaml"]
    assert (tmp_path / "out" / f"{SMOKE}.yaml").read_text(encoding="utf-8") == first.stdout
    assert f"wrote {tmp_path / 'out' / SMOKE}.yaml" in written.stderr


def test_render_smoke_of_several_profiles_is_one_stream_without_empty_documents() -> None:
    result = run("render", "--smoke", MULTI, str(profile_of("single-gpu")))
    assert result.exit_code == 0, result.output
    assert "---\n---\n" not in result.stdout
    kinds = [(m["kind"], m["metadata"]["name"]) for m in parse(result.stdout, "smoke")]
    assert kinds == [
        ("ConfigMap", CM),
        ("PyTorchJob", SMOKE),
        ("ConfigMap", "resnet-baseline-smoke-preflight"),
        ("PyTorchJob", "resnet-baseline-smoke"),
    ]


def test_render_smoke_with_error_findings_writes_nothing(
    tmp_path: Path, base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["env"] = {"NCCL_SOCKET_IFNAME": "eth0"}
    bad = write_profile(base_profile)
    result = run("render", "--smoke", MULTI, str(bad), "-d", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "NCCL_SOCKET_IFNAME" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_name_too_long_for_the_smoke_pods_is_one_clear_error_and_nothing_is_written(
    tmp_path: Path, base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    # h200-2x8-ib: pods <name>-master-0 and <name>-worker-0. A 50-character name fits the real
    # job (59 characters) but not the smoke test (65): validate's name-length rule refuses it
    # (with its line, issue 26 item 3), so neither render passes it.
    base_profile["name"] = "a" * 50
    long = write_profile(base_profile)
    error = (
        f"error: {long}:1: name: the smoke test's pod name '{'a' * 50}-smoke-master-0' "
        "would have 65 characters (limit 63): `render --smoke` and `submit --smoke` refuse "
        "it [name-length]"
    )
    assert said(run("render", str(long)).stderr, "error:") == [error]
    result = run("render", "--smoke", MULTI, str(long), "-d", str(tmp_path / "out"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert said(result.stderr, "error:") == [error]
    lines = result.stderr.splitlines()
    assert lines[lines.index(error) + 1] == (
        "hint: shorten name to at most 48 characters (its smoke test's pods add `-smoke`)"
    )
    assert not (tmp_path / "out").exists()
    base_profile["name"] = "a" * 48
    assert run("render", "--smoke", str(write_profile(base_profile))).exit_code == 0


HOSTILE = [
    "a: b\n- c",
    "{{ 7*7 }}",
    "x\nhostNetwork: true",
    "{privileged: true}",
    "---",
    "\"quoted\" 'single'",
    "&anchor *alias",
    "!!python/object:os.system",
    "# comment",
]


def shape(value: Any, path: str = "") -> set[str]:
    """Every key path of a manifest, list items by index: the structure without the values."""
    if isinstance(value, dict):
        return {path} | {p for k, v in value.items() for p in shape(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {path} | {p for i, v in enumerate(value) for p in shape(v, f"{path}[{i}]")}
    return {f"{path}={type(value).__name__}"}


def test_hostile_profile_values_never_change_the_structure_of_the_smoke_render(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    benign = {
        **base_profile,
        "command": ["train.py", *["x"] * len(HOSTILE)],
        "env": {f"V{i}": "x" for i in range(len(HOSTILE))},
        "working_dir": "/w",
    }
    hostile = {
        **base_profile,
        "command": ["train.py", *HOSTILE],
        "env": {f"V{i}": v for i, v in enumerate(HOSTILE)},
        "working_dir": "/w: {{ 7*7 }}",
    }
    plain = smoke_render(write_profile(benign))
    nasty = smoke_render(write_profile(hostile))
    assert [shape(m) for m in nasty] == [shape(m) for m in plain]
    for rspec in replica_specs(nasty[1]).values():
        container = pytorch_container(rspec)
        assert container["env"] == [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            *({"name": f"V{i}", "value": v} for i, v in enumerate(HOSTILE)),
            {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
            {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "290"},
            {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": "[rank${rank}]:"},
        ]
        assert container["workingDir"] == "/w: {{ 7*7 }}"
        assert not set(HOSTILE) & set(container["command"])


# --- submit --smoke / delete --smoke against the fake API server ---------------------------


def test_submit_smoke_creates_the_config_map_and_job_beside_the_real_job(
    api: KubeAPI, kubeconfig: Path
) -> None:
    assert run("submit", MULTI).exit_code == 0  # the real job of the same workload
    first = run("submit", MULTI, "--smoke")
    assert first.exit_code == 0, first.output
    assert said(first.stderr, "created:") == [
        f"created: configmaps/{NS}/{CM}",
        f"created: pytorchjobs/{NS}/{SMOKE}",
    ]
    assert f"runai-spec delete {MULTI} --smoke" in first.stderr
    assert sorted(k for k in api.kube.objects if k[0] != "pods") == [
        ("configmaps", NS, CM),
        ("pytorchjobs", NS, NAME),
        ("pytorchjobs", NS, SMOKE),
    ]
    stored = api.kube.get("configmaps", NS, CM)
    assert stored is not None
    assert stored["data"]["preflight.py"].encode("utf-8") == PREFLIGHT.read_bytes()
    assert stored["metadata"]["labels"][MANAGED_BY_LABEL] == "runai-spec"

    writes = len(api.kube.writes())
    again = run("submit", MULTI, "--smoke")
    assert again.exit_code == 0, again.output
    assert said(again.stderr, "unchanged:", "created:") == [
        f"unchanged: configmaps/{NS}/{CM}",
        f"unchanged: pytorchjobs/{NS}/{SMOKE}",
    ]
    assert len(api.kube.writes()) == writes


def test_submit_smoke_dry_run_server_stores_nothing(api: KubeAPI, kubeconfig: Path) -> None:
    result = run("submit", MULTI, "--smoke", "--dry-run", "server")
    assert result.exit_code == 0, result.output
    assert f"would create: configmaps/{NS}/{CM} (dry run: nothing stored)" in result.stderr
    assert f"would create: pytorchjobs/{NS}/{SMOKE} (dry run: nothing stored)" in result.stderr
    assert [m["kind"] for m in parse(result.stdout, "dry run")] == ["ConfigMap", "PyTorchJob"]
    assert api.kube.count("configmaps") == 0 and api.kube.count("pytorchjobs") == 0
    assert api.kube.writes() == []


def test_submit_smoke_never_touches_a_config_map_runai_spec_did_not_create(
    api: KubeAPI, kubeconfig: Path
) -> None:
    api.kube.put(
        "configmaps", {"metadata": {"name": CM, "namespace": NS}, "data": {"preflight.py": "theirs"}}
    )
    result = run("submit", MULTI, "--smoke")
    assert result.exit_code == 3
    assert f"configmaps/{NS}/{CM}: exists and was not created by runai-spec" in result.stderr
    assert api.kube.writes() == [] and api.kube.count("pytorchjobs") == 0
    assert api.kube.get("configmaps", NS, CM)["data"] == {"preflight.py": "theirs"}  # type: ignore[index]


@pytest.mark.parametrize("how", ["profile", "name"])
def test_delete_smoke_removes_the_job_and_its_config_map_and_leaves_the_real_job(
    api: KubeAPI, kubeconfig: Path, how: str
) -> None:
    assert run("submit", MULTI).exit_code == 0
    assert run("submit", MULTI, "--smoke").exit_code == 0
    which = [MULTI] if how == "profile" else [NAME, "--project", "nlp-lab"]
    result = run("delete", *which, "--smoke", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"deleted: pytorchjobs/{NS}/{SMOKE}",
        f"deleted: configmaps/{NS}/{CM}",
    ]
    assert api.kube.count("configmaps") == 0
    assert [k for k in api.kube.objects if k[0] == "pytorchjobs"] == [("pytorchjobs", NS, NAME)]


def test_delete_smoke_cleans_up_a_config_map_whose_job_is_already_gone(
    api: KubeAPI, kubeconfig: Path
) -> None:
    assert run("submit", MULTI, "--smoke").exit_code == 0
    assert run("delete", SMOKE, "--project", "nlp-lab", "--yes").exit_code == 0
    assert api.kube.count("configmaps") == 1  # deleting the job by name leaves it
    result = run("delete", MULTI, "--smoke", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"deleted: configmaps/{NS}/{CM}",
        f"already gone: pytorchjobs/{NS}/{SMOKE}",
    ]
    assert api.kube.count("configmaps") == 0
    nothing = run("delete", MULTI, "--smoke", "--yes")
    assert nothing.exit_code == 3
    assert nothing.stderr.splitlines() == [
        f"error: cluster: pytorchjobs/{NS}/{SMOKE}, configmaps/{NS}/{CM}: not found",
        "hint: check the name and the project; nothing was deleted",
    ]


# --- the smoke command itself, run here ---------------------------------------------------


@pytest.mark.torch
@pytest.mark.slow
def test_the_single_gpu_smoke_command_runs_here_as_the_pod_would(tmp_path: Path) -> None:
    needs_torch()
    configmap, job = smoke_render(profile_of("single-gpu"))
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "preflight.py").write_text(configmap["data"]["preflight.py"], encoding="utf-8")
    container = pytorch_container(replica_specs(job)["Master"])
    # the pod's paths, mapped onto this machine: the ConfigMap mount, the checkpoint volume
    argv = [a.replace(SMOKE_MOUNT, str(mount)) for a in container["command"]]
    argv[argv.index("--checkpoint-dir") + 1] = str(tmp_path / "checkpoints")
    argv[argv.index("--metrics-file") + 1] = str(tmp_path / "metrics.jsonl")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")}
    env.update({e["name"]: e["value"] for e in container.get("env", [])})
    env.update(operator_env(job, "Master", 0))
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), CUDA_VISIBLE_DEVICES="")
    assert argv[0] == "python"
    # Twice on the same checkpoint volume, as when a researcher re-runs the smoke test: the
    # second run must not resume the first one's last step and skip every check.
    for attempt in (1, 2):
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            env=env,
            cwd=tmp_path,
            text=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        for check in ("ranks", "world-size", "global-batch", "checkpoint", "metrics", "shutdown"):
            assert f'"check": "{check}", "status": "pass"' in done.stdout, (attempt, check, done.stdout)
        assert '"check": "resume", "status": "skip"' in done.stdout, done.stdout
        assert ('"event": "checkpoint-removed"' in done.stdout) == (attempt == 2), done.stdout


def test_status_and_logs_with_smoke_look_at_the_smoke_job_not_the_real_one(
    api: KubeAPI, kubeconfig: Path, tmp_path: Path
) -> None:
    assert run("submit", MULTI).exit_code == 0
    assert run("submit", MULTI, "--smoke").exit_code == 0
    real = run("status", MULTI)
    smoke = run("status", MULTI, "--smoke")
    assert real.exit_code == 0 and smoke.exit_code == 0, smoke.output
    assert real.stdout.startswith(f"{NAME} ({NS}):")
    assert smoke.stdout.startswith(f"{SMOKE} ({NS}):")
    by_name = run("status", SMOKE.removesuffix("-smoke"), "--project", NS.removeprefix("runai-"), "--smoke")
    assert by_name.stdout.startswith(f"{SMOKE} ({NS}):"), by_name.output
    logs = run("logs", MULTI, "--smoke", "--out", str(tmp_path / "logs"))
    assert SMOKE in logs.stderr and f"{NAME}:" not in logs.stderr, logs.output
