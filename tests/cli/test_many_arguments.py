"""A command line of thousands of profiles: the interpreter's copy nothing reads is dropped
(issue 29 item 2: memory does not grow with the number of profiles)."""

from __future__ import annotations

import sys

import pytest

from runai_spec import cli


def test_a_long_command_line_drops_the_interpreters_unused_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    args = [f"p{i}.yaml" for i in range(cli.MANY_ARGUMENTS + 1)]
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "runai_spec", "validate", *args])
    monkeypatch.setattr(sys, "argv", ["runai-spec", "--version", *args])
    released: list[bool] = []
    monkeypatch.setattr(cli, "release_arguments", lambda: released.append(True))
    with pytest.raises(SystemExit):
        cli.main()
    assert released == [True]


def test_release_arguments_clears_orig_argv_and_keeps_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "runai_spec", "validate", "a.yaml"])
    monkeypatch.setattr(sys, "argv", ["runai-spec", "validate", "a.yaml"])
    cli.release_arguments()
    assert sys.orig_argv == [] and sys.argv == ["runai-spec", "validate", "a.yaml"]


def test_a_short_command_line_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["runai-spec", "--version"])
    monkeypatch.setattr(cli, "release_arguments", lambda: pytest.fail("released"))
    with pytest.raises(SystemExit):
        cli.main()
