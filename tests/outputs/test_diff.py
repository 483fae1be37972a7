"""diff --against DIR: exit codes, masking, added/removed objects (the CI recipes: test_ci_recipes).

In-process (conftest.run: stdout, stderr and the exit code apart), not the executable (issue 29:
0.2 CPU s a process, 20 of them): tests/project/test_ci_recipes.py runs `diff` as CI's shell
does, exit codes and all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from conftest import ROOT, run
from runai_spec.outputs.diff import MASK, compare, mask

LAYOUTS = ["single-gpu", "single-node", "multi-node", "elastic"]
PROFILES = [str(ROOT / "examples" / e / "profile.yaml") for e in LAYOUTS]


def committed(tmp: Path) -> Path:
    out = tmp / "manifests"
    out.mkdir()
    for e in LAYOUTS:
        name = yaml.safe_load((ROOT / "examples" / e / "profile.yaml").read_text())["name"]
        shutil.copy(ROOT / "examples" / e / "manifest.yaml", out / f"{name}.yaml")
    return out


def test_no_change_exits_0(tmp_path: Path) -> None:
    res = run("diff", *PROFILES, "--against", str(committed(tmp_path)))
    assert res.exit_code == 0, res.stderr
    assert "0 changed" in res.stdout


def test_change_and_missing_file_exit_1(tmp_path: Path) -> None:
    d = committed(tmp_path)
    first = sorted(d.iterdir())[0]
    first.unlink()
    second = sorted(d.iterdir())[0]
    second.write_text(
        second.read_text()
        .replace('nprocPerNode: "8"', 'nprocPerNode: "4"')
        .replace('"OMP_NUM_THREADS"', '"OMP_NUM_THREADS"')
    )
    res = run("diff", *PROFILES, "--against", str(d), "--format", "json")
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    statuses = sorted(o["status"] for r in data["results"] for o in r["objects"])
    assert "added" in statuses
    assert data["changed"] >= 1


def test_bad_input_exits_2(tmp_path: Path) -> None:
    res = run("diff", str(tmp_path / "nope.yaml"), "--against", str(committed(tmp_path)))
    assert res.exit_code == 2
    assert res.stderr.startswith("error:")
    assert run("diff", PROFILES[0], "--against", str(tmp_path / "none")).exit_code == 2


def test_markdown_is_a_merge_request_comment(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    res = run("diff", PROFILES[0], "--against", str(d), "--format", "markdown")
    assert res.exit_code == 1
    assert res.stdout.startswith("## runai-spec diff") and "```diff" in res.stdout


def test_secret_values_are_masked_and_removed_objects_count() -> None:
    env = {
        "kind": "X",
        "metadata": {"name": "a"},
        "env": [{"name": "WANDB_API_KEY", "value": "hunter2"}, {"name": "A", "value": "1"}],
    }
    assert mask(env)["env"][0]["value"] == MASK and mask(env)["env"][1]["value"] == "1"
    changed = dict(env, env=[{"name": "WANDB_API_KEY", "value": "other"}])
    out = compare([changed], [env], new_label="new", old_label="old")
    assert "hunter2" not in out[0].diff and "other" not in out[0].diff
    removed = compare([], [env], new_label="new", old_label="old")
    assert [o.status for o in removed] == ["removed"]


def test_look_alike_names_are_not_masked_so_their_changes_stay_visible() -> None:
    env = [
        {"name": n, "value": "v"}
        for n in ("TOKENIZERS_PARALLELISM", "MAX_NEW_TOKENS", "PWD", "HF_TOKEN", "dbPassword")
    ]
    masked = [e["value"] for e in mask({"env": env})["env"]]
    assert masked == ["v", "v", "v", MASK, MASK]


def test_a_missing_file_is_named_and_a_misnamed_one_is_pointed_at(tmp_path: Path) -> None:
    d = tmp_path / "manifests"
    d.mkdir()
    shutil.copy(ROOT / "examples" / "multi-node" / "manifest.yaml", d / "manifest.yaml")
    res = run("diff", str(ROOT / "examples" / "multi-node" / "profile.yaml"), "--against", str(d))
    assert res.exit_code == 1, res.stderr
    assert res.stdout.startswith(
        f"note: no file named llm-7b-fsdp.yaml in {d}: every object shows as added; "
        "manifest.yaml holds this workload's objects: name it llm-7b-fsdp.yaml, as "
        "`render -d` does\n"
    )
    assert "stale" not in res.stdout  # the misnamed file is not also called stale
    (d / "manifest.yaml").unlink()
    res = run("diff", PROFILES[0], "--against", str(d), "--format", "json")
    note = json.loads(res.stdout)["results"][0]["note"]
    assert note.startswith("no file named ") and "holds" not in note


def test_a_stale_manifest_with_no_profile_behind_it_is_reported(tmp_path: Path) -> None:
    d = committed(tmp_path)
    shutil.copy(d / "llm-7b-fsdp.yaml", d / "old-run.yaml")
    old = (d / "old-run.yaml").read_text().replace("llm-7b-fsdp", "old-run")
    (d / "old-run.yaml").write_text(old)
    (d / "kustomization.yaml").write_text("resources: [old-run.yaml]\n")  # not ours: left alone
    res = run("diff", *PROFILES, "--against", str(d))
    assert res.exit_code == 1, res.stderr
    assert f"note: stale: {d / 'old-run.yaml'} is rendered by none of the profiles given" in res.stdout
    assert "kustomization" not in res.stdout
    assert res.stdout.rstrip().endswith("4 profile(s), 0 changed, 1 object(s) differ, 1 stale manifest(s)")
    data = json.loads(run("diff", *PROFILES, "--against", str(d), "--format", "json").stdout)
    assert data["stale"] == [str(d / "old-run.yaml")]
    stale = next(r for r in data["results"] if not r["profile"])
    assert [o["status"] for o in stale["objects"]] == ["removed"]


def test_a_report_on_stdout_still_says_why_on_stderr(tmp_path: Path) -> None:
    """Issue 26 item 7: `diff --format markdown > drift.md` in CI: the failing job's log gets one
    line naming the drift; no drift, nothing on stderr."""
    same = tmp_path / "same"
    assert run("render", PROFILES[2], "-d", str(same)).exit_code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    for fmt in ("markdown", "json"):
        res = run("diff", PROFILES[2], "--against", str(same), "--format", fmt)
        assert res.exit_code == 0 and res.stderr == "", res.stderr
        res = run("diff", PROFILES[2], "--against", str(empty), "--format", fmt)
        assert res.exit_code == 1
        assert res.stderr.splitlines() == [
            f"drift: 1 profile(s), 1 changed, 1 object(s) differ: {PROFILES[2]}"
        ], res.stderr


def test_a_profiles_own_smoke_test_file_is_not_stale(tmp_path: Path) -> None:
    """Issue 26 item 9: `diff --against examples/multi-node` called that profile's own
    smoke.yaml stale."""
    folder = tmp_path / "committed"
    assert run("render", PROFILES[2], "-d", str(folder)).exit_code == 0
    smoke = tmp_path / "smoke"
    assert run("render", "--smoke", PROFILES[2], "-d", str(smoke)).exit_code == 0
    (smoke / "llm-7b-fsdp-smoke.yaml").rename(folder / "smoke.yaml")
    res = run("diff", PROFILES[2], "--against", str(folder))
    assert res.exit_code == 0, res.stdout
    assert "stale" not in res.stdout
    assert "smoke.yaml holds its smoke test (`render --smoke`): not compared" in res.stdout


def test_diff_spools_each_field_of_a_result_and_of_its_objects() -> None:
    """diff's results are spooled as builtins (marshal): every field comes back, those left
    out of equality (workload, namespace) and a field added later included."""
    from dataclasses import astuple, fields

    from runai_spec.outputs import diff as module

    def own(cls: type, **given: object) -> Any:
        return cls(**{f.name: given.get(f.name, f"<{cls.__name__}.{f.name}>") for f in fields(cls)})

    objects = tuple(own(module.ObjectDiff, key=f"key-{i}") for i in range(3))
    results = [own(module.ProfileDiff, objects=objects), own(module.ProfileDiff, objects=())]
    spool = module._spool()
    for result in results:
        spool.append(result)
    assert [astuple(r) for r in spool] == [astuple(r) for r in results]
