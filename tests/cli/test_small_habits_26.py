"""Issue 26 item 9, the small points: which files share a workload name, kubectl's
`--dry-run=client` pointed to `render`, `-p` for the project as in Run:ai's CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import ROOT, run

PROFILE = ROOT / "examples" / "multi-node" / "profile.yaml"


def test_two_profiles_of_one_workload_name_are_both_named(tmp_path: Path) -> None:
    one, other = tmp_path / "a.yaml", tmp_path / "b.yaml"
    shutil.copy(PROFILE, one)
    shutil.copy(PROFILE, other)
    line = next(i for i, ln in enumerate(other.read_text().splitlines(), 1) if ln.startswith("name:"))
    result = run("render", str(one), str(other))
    assert result.exit_code == 2 and result.stdout == ""
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: {other}:{line}: name: two profiles render the workload 'llm-7b-fsdp': {one} and {other}"
    ], result.stderr


def test_a_client_dry_run_points_to_render() -> None:
    result = run("submit", str(PROFILE), "--dry-run=client")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: --dry-run: a client-side dry run is `runai-spec render`")
    assert lines[1].startswith("hint: `runai-spec render PROFILE`")


def test_p_names_the_project_as_in_runais_cli(tmp_path: Path) -> None:
    for command in ("status", "logs", "delete"):
        result = run(
            command,
            "llm-7b-fsdp",
            "-p",
            "nlp-lab",
            "--kubeconfig",
            str(tmp_path / "none"),
            *(["--out", "-"] if command == "logs" else []),
            *(["--yes"] if command == "delete" else []),
        )
        assert result.exit_code == 3 and "no kubeconfig found" in result.stderr, result.output
