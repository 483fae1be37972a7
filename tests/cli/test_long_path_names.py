"""No exit 70 from any path argument (issue 40 item 6, must-hold): a file or folder name over
255 bytes (Linux NAME_MAX) is bad input, exit 2, named with its size, wherever a command first
touches it; it was an internal error (OSError ENAMETOOLONG) in 16 commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command

from conftest import ROOT, run
from runai_spec.cli import app

PROFILE = str(ROOT / "examples" / "single-gpu" / "profile.yaml")
LONG = "/tmp/" + "n" * 300 + ".yaml"

# every command with a path argument, each path argument once (the kubeconfig ones end before
# any request); the list is checked against the CLI's own parameters below
CALLS: dict[tuple[str, str], list[str]] = {
    ("validate", "profiles"): ["validate", LONG],
    ("validate", "crd"): ["validate", PROFILE, "--crd", LONG],
    ("validate", "kubeconfig"): ["validate", PROFILE, "--live", "--kubeconfig", LONG],
    ("plan", "profile"): ["plan", LONG],
    ("explain", "profile"): ["explain", LONG],
    ("render", "profiles"): ["render", LONG],
    ("render", "out_dir"): ["render", PROFILE, "--out-dir", LONG],
    ("diff", "profiles"): ["diff", LONG, "--against", str(ROOT / "examples")],
    ("diff", "against"): ["diff", PROFILE, "--against", LONG],
    ("diff", "kubeconfig"): ["diff", PROFILE, "--live", "--kubeconfig", LONG],
    ("init", "folder"): ["init", LONG, "--no-input"],
    ("submit", "profile"): ["submit", LONG],
    ("submit", "kubeconfig"): ["submit", PROFILE, "--kubeconfig", LONG],
    ("status", "profiles"): ["status", LONG],
    ("status", "kubeconfig"): ["status", PROFILE, "--kubeconfig", LONG],
    ("logs", "profiles"): ["logs", LONG],
    ("logs", "out"): ["logs", PROFILE, "--out", LONG, "--kubeconfig", LONG],
    ("logs", "kubeconfig"): ["logs", PROFILE, "--kubeconfig", LONG],
    ("delete", "profiles"): ["delete", LONG, "--yes"],
    ("delete", "kubeconfig"): ["delete", PROFILE, "--yes", "--kubeconfig", LONG],
    ("rehearse", "profile"): ["rehearse", LONG],
    ("rehearse", "logs"): ["rehearse", PROFILE, "--logs", LONG],
    ("presets list", "directory"): ["presets", "list", "--dir", LONG],
    ("presets show", "directory"): ["presets", "show", "h200-8gpu", "--dir", LONG],
    ("presets approve", "key"): ["presets", "approve", "h200-8gpu", "--by", "A. Engineer", "--key", LONG],
    ("presets approve", "directory"): [
        "presets",
        "approve",
        "h200-8gpu",
        "--by",
        "A. Engineer",
        "--dir",
        LONG,
    ],
    ("presets verify", "directory"): ["presets", "verify", "--dir", LONG],
    ("presets verify", "kubeconfig"): ["presets", "verify", "--live", "--kubeconfig", LONG],
    ("presets policy", "out"): ["presets", "policy", "--out", LONG],
    ("presets policy", "directory"): ["presets", "policy", "--dir", LONG],
    ("presets sync", "kubeconfig"): ["presets", "sync", "--kubeconfig", LONG],
    ("presets publish", "directory"): ["presets", "publish", "--dir", LONG],
}


def _path_parameters() -> set[tuple[str, str]]:
    """(command, parameter) for every parameter whose type is a path, from the CLI itself."""
    out: set[tuple[str, str]] = set()

    def walk(command: object, prefix: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*prefix, name])
            return
        for param in getattr(command, "params", []):
            if "Path" in repr(getattr(param, "type_descriptor", "")):
                out.add((" ".join(prefix), str(param.name)))

    walk(get_command(app), [])
    return out


def test_the_calls_cover_every_path_parameter() -> None:
    assert _path_parameters() - set(CALLS) == set()


@pytest.mark.parametrize("key", sorted(CALLS), ids=lambda k: f"{k[0]}:{k[1]}")
def test_a_name_over_255_bytes_is_never_an_internal_error(
    key: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # never the real ~/.kube
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)
    result = run(*CALLS[key], input="")
    assert result.exit_code != 70 and "internal error" not in result.stderr, result.stderr
    assert result.exit_code in (1, 2, 3), result.stderr


@pytest.mark.parametrize("command", ["validate", "render", "plan", "explain", "rehearse"])
def test_a_long_profile_name_is_bad_input_that_says_which_name(command: str) -> None:
    result = run(command, LONG)
    assert result.exit_code == 2, result.stderr
    assert "a name in this path has 305 bytes; the file system allows 255" in result.stderr
    assert "hint: use a shorter file or folder name" in result.stderr
