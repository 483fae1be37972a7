"""plan PROFILE: the ticket says first whether submit would refuse the profile, and answers
what the engineer asks next (image, volumes, resume, metrics, diagnostics, exact env, rehearsal)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, run
from runai_spec.facts.kubeflow import operator_env
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.rehearse.records import (
    ForeignRecord,
    RehearsalRecord,
    key_path,
    read_record,
    record_path,
    write_record,
)

MULTI = ROOT / "examples" / "multi-node" / "profile.yaml"


def test_plan_of_a_profile_with_error_findings_exits_1_and_says_so_first(
    base_profile: dict[str, Any], write_profile: Callable[..., Path]
) -> None:
    base_profile["batch"]["global"] = 100  # 4 x 16 x 2 = 128
    result = run("plan", str(write_profile(base_profile)))
    assert result.exit_code == 1, result.output
    head = result.stdout.splitlines()[:3]
    assert head[0].startswith("# Review request: `demo`")
    assert head[2].startswith("> **Not ready: 1 error finding(s); `runai-spec submit` refuses")
    assert "[global-batch]" in result.stderr  # the finding itself, as validate prints it
    data = json.loads(run("plan", str(write_profile(base_profile)), "--format", "json").stdout)
    assert data["ready"] is False and data["errors"] == 1


def test_a_clean_profile_is_ready_and_exits_0() -> None:
    result = run("plan", str(MULTI))
    assert result.exit_code == 0 and "Not ready" not in result.stdout


def test_the_ticket_answers_the_engineers_next_questions() -> None:
    md = run("plan", str(MULTI)).stdout
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    for name in (
        "## Image",
        "## Volumes",
        "## Checkpoint and resume",
        "## Metrics",
        "## Diagnostics",
        "## Exact environment (training operator 1.9)",
        "## Latest rehearsal",
    ):
        assert name in sections, name
    profile = yaml.safe_load(MULTI.read_text())
    digest = profile["image"].split("@")[1]
    assert f"- digest `{digest}`" in md and "tag `1.8.0`" in md
    assert (
        "| data-0 | `/data` | read-only | data source `datasets-shared` (PVC "
        "`datasets-shared` in the project's namespace) |"
    ) in md
    assert "| checkpoint | `/checkpoints` | read-write | PVC `nlp-lab-checkpoints` |" in md
    assert f"resume: {profile['checkpoint']['resume']}" in md
    assert "written by rank0, tracker tensorboard" in md
    assert "none recorded on this machine" in md
    # the operator's variables, exactly as kubeflow.operator_env predicts them per replica
    workload = prepare_workload(MULTI)
    job = workload.manifests[0]
    for role, heading in (("Master", "Master 0"), ("Worker", "Worker 0")):
        block = md.split(f"Set by the operator in {heading}:\n\n```sh\n", 1)[1].split("```")[0]
        expected = operator_env(job, role, 0, "1.9")
        assert block.splitlines() == [f"{k}={v}" for k, v in expected.items()]
        assert "PET_NNODES=2" in block


def test_the_presets_nccl_settings_are_in_the_ticket(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "h200-2x8-ib.yaml"
    path.write_text(
        path.read_text().replace(
            "  capabilities: [IPC_LOCK]", "  capabilities: [IPC_LOCK]\n  env: {NCCL_IB_HCA: mlx5}"
        )
    )
    assert (
        run(
            "presets", "approve", "h200-2x8-ib", "--key", str(engineer_key), "--dir", str(presets_dir)
        ).exit_code
        == 0
    )
    result = run("plan", str(MULTI), "--format", "json")
    env = json.loads(result.stdout)["environment"]
    assert env["preset_network"] == {"NCCL_IB_HCA": "mlx5"}
    md = run("plan", str(MULTI)).stdout
    assert "NCCL settings from the preset: `NCCL_IB_HCA=mlx5`" in md


def test_the_latest_rehearsal_is_in_the_ticket(tmp_path: Path) -> None:
    workload = prepare_workload(MULTI)
    checks = (("ranks", "pass", "4 ranks"), ("checkpoint", "skip", "dcp not tested: x | y"))
    path = write_record(
        RehearsalRecord(
            project="nlp-lab",
            name="llm-7b-fsdp",
            profile=str(MULTI),
            profile_sha256=workload.loaded.sha256,
            ok=True,
            world_size=4,
            backend="gloo",
            options=("--procs-per-pod 2",),
            checks=checks,
            logs_dir=str(tmp_path),
        )
    )
    assert path == record_path("nlp-lab", "llm-7b-fsdp", str(MULTI)) and path.is_file()
    assert read_record("nlp-lab", "llm-7b-fsdp", str(MULTI)) is not None
    md = run("plan", str(MULTI)).stdout
    rehearsal = md.split("## Latest rehearsal\n\n", 1)[1].split("\n## ", 1)[0]
    assert (
        rehearsal.startswith("**passed** at ")
        and "of this profile; world 4, gloo, `--procs-per-pod 2`" in rehearsal
    )
    assert "| checkpoint | skip | dcp not tested: x \\| y |" in rehearsal
    # a record of another version of the profile says so
    write_record(
        RehearsalRecord(
            project="nlp-lab",
            name="llm-7b-fsdp",
            profile=str(MULTI),
            profile_sha256="0" * 64,
            ok=False,
            world_size=4,
            backend="gloo",
            options=(),
            checks=checks,
            logs_dir=str(tmp_path),
        )
    )
    md = run("plan", str(MULTI)).stdout
    assert "**failed** at " in md and "**an earlier version** of this profile" in md


def test_an_unreadable_record_is_no_record(tmp_path: Path) -> None:
    path = record_path("nlp-lab", "llm-7b-fsdp", str(MULTI))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert read_record("nlp-lab", "llm-7b-fsdp", str(MULTI)) is None
    assert "none recorded" in run("plan", str(MULTI)).stdout


# Issue 23, item 9: `plan` showed a hand-written record in ~/.cache/runai-spec/rehearsals as
# "passed"; only a record runai-spec wrote (signed with this user's record key) counts, and the
# ticket says where it came from.
HAND_WRITTEN = {
    "version": 1,
    "project": "nlp-lab",
    "name": "llm-7b-fsdp",
    "profile": str(MULTI),
    "profile_sha256": "",
    "finished_at": "2026-01-01T00:00:00Z",
    "ok": True,
    "world_size": 4,
    "backend": "gloo",
    "options": [],
    "checks": [{"check": "ranks", "status": "pass", "message": "4 ranks"}],
    "logs_dir": "/tmp/x",
}


def _latest(md: str) -> str:
    return md.split("## Latest rehearsal\n\n", 1)[1].split("\n## ", 1)[0]


def _signed_record(tmp_path: Path, ok: bool = False) -> Path:
    path = write_record(
        RehearsalRecord(
            project="nlp-lab",
            name="llm-7b-fsdp",
            profile=str(MULTI),
            profile_sha256=prepare_workload(MULTI).loaded.sha256,
            ok=ok,
            world_size=4,
            backend="gloo",
            options=(),
            checks=(("ranks", "fail", "1 of 4 ranks"),),
            logs_dir=str(tmp_path),
        )
    )
    assert path is not None
    return path


@pytest.mark.parametrize("signature", [None, "0" * 64, "forged"])
def test_a_hand_written_record_is_not_counted(signature: str | None) -> None:
    doc = {**HAND_WRITTEN, "profile_sha256": prepare_workload(MULTI).loaded.sha256}
    if signature is not None:
        doc = {
            **doc,
            "version": 2,
            "signature": signature,
            "written_by": {"tool": "runai-spec", "version": "0.1.0", "host": "h", "user": "u"},
        }
    path = record_path("nlp-lab", "llm-7b-fsdp", str(MULTI))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    assert isinstance(read_record("nlp-lab", "llm-7b-fsdp", str(MULTI)), ForeignRecord)
    latest = _latest(run("plan", str(MULTI)).stdout)
    assert "**passed**" not in latest and "| ranks |" not in latest
    assert latest.startswith(f"a record at `{path}` is **not counted**: ")
    data = json.loads(run("plan", str(MULTI), "--format", "json").stdout)
    assert data["rehearsal"]["counted"] is False and data["rehearsal"]["record"] == str(path)


def test_a_record_edited_after_the_rehearsal_is_not_counted(tmp_path: Path) -> None:
    path = _signed_record(tmp_path, ok=False)
    doc = json.loads(path.read_text())
    doc["ok"] = True
    path.write_text(json.dumps(doc))
    record = read_record("nlp-lab", "llm-7b-fsdp", str(MULTI))
    assert isinstance(record, ForeignRecord) and "does not verify" in record.why
    assert "**passed**" not in run("plan", str(MULTI)).stdout


def test_a_record_signed_with_another_key_is_not_counted(tmp_path: Path) -> None:
    _signed_record(tmp_path)
    key_path().write_bytes(b"x" * 32)  # another machine's (or a replaced) key
    assert isinstance(read_record("nlp-lab", "llm-7b-fsdp", str(MULTI)), ForeignRecord)
    key_path().unlink()
    record = read_record("nlp-lab", "llm-7b-fsdp", str(MULTI))
    assert isinstance(record, ForeignRecord) and "no record key" in record.why


def test_the_ticket_says_where_the_record_came_from(tmp_path: Path) -> None:
    import getpass
    import socket

    path = _signed_record(tmp_path)
    assert oct(key_path().stat().st_mode & 0o777) == "0o600"
    record = read_record("nlp-lab", "llm-7b-fsdp", str(MULTI))
    assert isinstance(record, RehearsalRecord)
    assert record.written_by[2:] == (socket.gethostname(), getpass.getuser())
    latest = _latest(run("plan", str(MULTI)).stdout)
    assert latest.startswith("**failed** at ")
    assert (
        f"Recorded by runai-spec `0.1.0` on host `{socket.gethostname()}` as user "
        f"`{getpass.getuser()}`, read from `{path}`"
    ) in latest
    assert "not a proof" in latest


def test_the_suite_never_reads_the_real_home() -> None:
    # the suite's HOME and XDG_CACHE_HOME are temporary folders (conftest.py): one rehearsal
    # on the developer's machine no longer changes what `plan` shows in a test
    import os
    import pwd

    real = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    assert Path.home().resolve() != real and not Path.home().resolve().is_relative_to(real)
    assert not record_path("p", "n").resolve().is_relative_to(real)
    assert not record_path("p", "n").resolve().is_relative_to(Path.home().resolve())


@pytest.mark.parametrize("layout", ["single-gpu", "single-node", "elastic"])
def test_every_layout_has_the_operator_env(layout: str) -> None:
    data = json.loads(
        run("plan", str(ROOT / "examples" / layout / "profile.yaml"), "--format", "json").stdout
    )
    assert data["environment"]["operator"] and all(
        "PYTHONUNBUFFERED" in env for env in data["environment"]["operator"].values()
    )
