"""Typer commands by group: parse, call the core, print; one boundary maps errors to codes.

A run imports only the module of the command it names and builds only that command;
`--version` is answered before Typer is imported, `--help` before any pydantic model."""

from __future__ import annotations

import copy
import os
import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

# Each command, with the module that registers it; this order is the order of `--help`.
COMMANDS: dict[str, str] = {
    "validate": "offline",
    "rules": "offline",
    "plan": "offline",
    "diff": "offline",
    "render": "offline",
    "explain": "offline",
    "schema": "offline",
    "version": "offline",
    "init": "init",
    "submit": "cluster",
    "status": "cluster",
    "logs": "cluster",
    "delete": "cluster",
    "rehearse": "rehearse",
    "presets": "presets",
}
COMPLETE_VAR = "_RUNAI_SPEC_COMPLETE"  # set by the shell's completion script: the whole tree


def load_commands(names: list[str] | None = None) -> typer.Typer:
    """The app with the modules of NAMES (default: every command) imported."""
    from .common import app

    for group in dict.fromkeys(COMMANDS[name] for name in (names or COMMANDS)):
        import_module(f"{__name__}.{group}")
    return app


def command_name(info: Any) -> str:
    from typer.main import get_command_name

    return str(info.name or get_command_name(info.callback.__name__))


def only(app: typer.Typer, name: str) -> typer.Typer:
    """A copy of app that holds the one command (or group) NAME; still a group, so that the
    command line reads the same."""
    view = copy.copy(app)
    view.registered_commands = [c for c in app.registered_commands if command_name(c) == name]
    view.registered_groups = [g for g in app.registered_groups if g.name == name]
    view.callback()(lambda: None)  # a group even with one command
    # --install-completion and --show-completion are the root's options, read only before a
    # command's name: a run that names one never needs them (nor Typer's shell classes)
    view._add_completion = False
    return view


def invoked(args: list[str]) -> str | None:
    """The command ARGS start with; None when they start with an option of the root (its
    help, completion: every command is listed or reachable)."""
    return args[0] if args and not args[0].startswith("-") else None


MANY_ARGUMENTS = 1000


def release_arguments() -> None:
    """A long command line (thousands of profiles) costs the interpreter about 0.5 KiB an
    argument before any of our code runs: decoded copies (most of them freed again during
    start-up), sys.argv and sys.orig_argv. The copy nothing here reads (sys.orig_argv) is
    dropped and what was freed goes back to the system (glibc's malloc_trim; elsewhere
    nothing), so that a 100,000-profile call does not carry ~35 MB it never uses (issue 29)."""
    import contextlib
    import ctypes

    sys.orig_argv.clear()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def main() -> None:
    """Console entry point: no traceback ever reaches a user for their own mistakes."""
    from .. import __version__

    args = sys.argv[1:]
    if len(args) > MANY_ARGUMENTS:
        release_arguments()
    if args in (["--version"], ["version"]):
        print(__version__)
        sys.exit(0)
    name = invoked(args)
    if name in COMMANDS and COMPLETE_VAR not in os.environ:
        view = only(load_commands([name]), name)
    else:  # help, a usage error, completion: every command
        view = copy.copy(load_commands())
    if not sys.stdout.isatty():
        # rich's boxes and colours are for a terminal; piped help is Click's plain text
        view.rich_markup_mode = None
    from typer.main import get_command

    get_command(view)()


def __getattr__(name: str) -> Any:
    # `runai_spec.cli.app`: the whole app, every command registered (tests, completion)
    if name == "app":
        return load_commands()
    raise AttributeError(name)


__all__ = ["app", "main"]
