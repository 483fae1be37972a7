"""The Typer app, the one error boundary, and the options several commands share."""

from __future__ import annotations

import dataclasses
import errno
import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer
from typer.core import TyperGroup

from .. import __version__
from ..errors import (
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    ClusterError,
    InputError,
    RunaiSpecError,
    visible,
)

if TYPE_CHECKING:
    from ..pipeline.workload import Workload

EXIT_INTERRUPTED = 130
Options = TypeVar("Options")
Result = TypeVar("Result")


def with_options(command: Callable[[Options], Result]) -> Callable[..., Result]:
    """COMMAND(options) as Typer reads it: the fields of its one parameter's frozen dataclass
    are the command's parameters (their `Annotated[..., typer.Option(...)]` types and defaults,
    in order), and Typer's call is made into one instance of it."""
    hints = get_type_hints(command)
    (kind,) = [hint for name, hint in hints.items() if name != "return"]
    types = get_type_hints(kind, include_extras=True)
    params = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=types[f.name],
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
        )
        for f in dataclasses.fields(kind)
    ]

    @functools.wraps(command)
    def call(**values: Any) -> Result:
        return command(kind(**values))

    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=hints.get("return", inspect.Signature.empty)
    )
    call.__annotations__ = {p.name: p.annotation for p in params}
    return call


def stop_on_errors(workload: Workload, done: str) -> Workload:
    """WORKLOAD (a prepared Workload) with its findings printed on stderr; exit 1, with
    `nothing was DONE`, where one is an error: before any request or process."""
    err(line for finding in workload.findings for line in finding.lines())
    if workload.errors:
        err([f"{workload.path}: {len(workload.errors)} error finding(s): nothing was {done}"])
        raise typer.Exit(EXIT_FINDINGS)
    return workload


def err(lines: Iterable[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def usage_lines(exc: typer.TyperException) -> list[str]:
    """A Typer/Click usage error (unknown option, bad value) as one error line and a hint."""
    from typer._click.exceptions import NoArgsIsHelpError

    if isinstance(exc, NoArgsIsHelpError):  # no arguments: the help, as it is
        return exc.format_message().rstrip("\n").splitlines()
    message = " ".join(exc.format_message().split())
    if not message:  # the help has been printed already
        return []
    ctx = getattr(exc, "ctx", None)
    where = f"see `{ctx.command_path} --help`" if ctx is not None else "see `runai-spec --help`"
    return [f"error: {message}", f"hint: {where}"]


def boundary(call: Callable[[], Any]) -> int:
    """Run the parsed command; every way it ends becomes its lines on stderr and an exit code.
    Commands return their exit code (None: 0)."""
    try:
        code = call()
    except RunaiSpecError as exc:
        err(exc.lines())
        return exc.exit_code
    except typer.Abort:
        err(["error: aborted"])
        return 1
    except typer.TyperException as exc:  # Click's usage errors
        err(usage_lines(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            err(internal_lines(exc))
            return EXIT_INTERNAL
        # a path argument the file system cannot even look up: the user's input, wherever a
        # command first touched it (exit 2, never 70)
        err(name_too_long(exc).lines())
        return EXIT_INPUT
    except Exception as exc:  # a bug: say so, never look like findings
        err(internal_lines(exc))
        return EXIT_INTERNAL
    if code == EXIT_INTERRUPTED:  # Typer turns Ctrl-C into this code
        err(["error: interrupted"])
    return EXIT_OK if code is None else int(code)


def internal_lines(exc: BaseException) -> list[str]:
    return [
        f"error: internal error (a bug in runai-spec {__version__}): "
        f"{type(exc).__name__}: {visible(str(exc))}",
        "hint: please report it with the command you ran",
    ]


NAME_MAX_BYTES = 255  # Linux NAME_MAX: the longest name of one path component


def name_too_long(exc: OSError) -> InputError:
    """ENAMETOOLONG on a path: which part of it is too long, and by how much."""
    path = str(exc.filename if exc.filename is not None else "")
    parts = [p for p in path.split("/") if p]
    longest = max(parts, key=lambda p: len(p.encode("utf-8", "surrogateescape")), default="")
    size = len(longest.encode("utf-8", "surrogateescape"))
    where = visible(path if len(path) <= 80 else f"{path[:40]}...{path[-20:]}")
    if size > NAME_MAX_BYTES:
        what = f"a name in this path has {size} bytes; the file system allows {NAME_MAX_BYTES}"
    else:
        what = "the path is longer than the file system allows"
    return InputError(what, file=where, hint="use a shorter file or folder name")


HELP_NAMES = ["-h", "--help"]


def one_paragraph_lines(text: str | None) -> str | None:
    """Help text without the hard line breaks of a docstring: paragraphs stay apart."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


def print_version(ctx: Any, param: Any, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        print(__version__)
        ctx.exit()


def polish(command: Any) -> None:
    """Every command and group: `-h`, `--version`, help without hard line breaks and without
    `<bool>` after a flag."""
    from typer._click import Context
    from typer._coercion import bool_flag_type_descriptor
    from typer.core import TyperOption

    if getattr(command, "_polished", False):
        return
    command._polished = True
    command.help = one_paragraph_lines(command.help)
    if not any("--version" in p.opts for p in command.params):
        command.params.append(
            TyperOption(
                param_decls=["--version"],
                type_descriptor=bool_flag_type_descriptor(),
                is_flag=True,
                default=False,
                expose_value=False,
                is_eager=True,
                callback=print_version,
                help="Print the runai-spec version and exit.",
            )
        )
    help_option = command.get_help_option(Context(command, help_option_names=HELP_NAMES))
    if help_option is not None:
        # Typer gives its help flag no default: None is not a bool, so every run would build
        # a pydantic TypeAdapter to coerce it (typer/core.py process_value skips a bool).
        help_option.default = False
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if getattr(param, "help", None):
            param.help = one_paragraph_lines(param.help)
    for sub in getattr(command, "commands", {}).values():
        polish(sub)


class Boundary(TyperGroup):
    """The root group: parses without Click's own error printing, then `boundary`."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        polish(self)
        code = boundary(
            lambda: super(Boundary, self).main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        )
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="runai-spec",
    cls=Boundary,
    help="Approved-preset PyTorchJob manifests for the Run:ai cluster, from a small profile.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=True,  # --install-completion / --show-completion
    context_settings={"help_option_names": HELP_NAMES},
)


def main() -> None:
    """Console entry point: no traceback ever reaches a user for their own mistakes."""
    app()


class Format(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"


def one_profile_path(path: Path) -> Path:
    from ..pipeline.stream import profile_path

    return profile_path(path)


class TextJson(StrEnum):
    text = "text"
    json = "json"


class MarkdownJson(StrEnum):
    markdown = "markdown"
    json = "json"


TextJsonOpt = Annotated[TextJson, typer.Option("--format", "-f", help="Output format.")]
MarkdownJsonOpt = Annotated[MarkdownJson, typer.Option("--format", "-f", help="Output format.")]
# Strings, each made its Path only when read (pipeline.ProfileArgs): 100,000 Path objects
# alone would take ~40 MB, and Typer copies a list argument after its callback.
Profiles = Annotated[
    list[str],
    typer.Argument(
        help="Profile files (profile.yaml); a folder means its profile.yaml, `-` standard input, "
        "`@FILE` the profiles FILE lists, one a line.",
        show_default=False,
        metavar="PROFILE",
    ),
]
ProfileArg = Annotated[
    Path,
    typer.Argument(
        help="Profile file (profile.yaml); a folder means its profile.yaml, `-` standard input.",
        metavar="PROFILE",
        callback=one_profile_path,
    ),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)."),
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context to use.")]


def debug_from_the_start(debug: bool) -> bool:
    """--debug on as the command's options are read: what the command notes before its first
    request (render's, where the installed Jinja is not the one its runtime follows) shows too."""
    if debug:
        from ..cluster.backend import enable_debug

        enable_debug()
    return debug


DebugOpt = Annotated[
    bool,
    typer.Option(
        "--debug",
        help="Log each API request to stderr (never headers, tokens or the kubeconfig).",
        callback=debug_from_the_start,
    ),
]
RequestTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--request-timeout",
        metavar="SECONDS",
        min=0.1,
        show_default=False,
        help="How long to wait for the API server's answer to one request (default 30); a request "
        "without one is retried a few times, each retry said on stderr.",
    ),
]


def progress_line(line: str) -> None:
    """A cluster wait's progress (a retried request) on stderr, as it happens."""
    print(line, file=sys.stderr, flush=True)


def watch_status(
    fetch: Callable[[], Any],
    what: str,
    source: str,
    fmt: TextJson,
    watch: bool,
    interval: float,
    watch_timeout: float,
) -> str:
    """FETCH a status (a JobStatus-shaped dataclass) and print it again whenever it changes,
    until it is running or has ended; the one poll loop of both submit paths."""
    from ..outputs import report

    waited = 0.0
    shown: list[str] = []
    while True:
        result = fetch()
        lines = (
            [json.dumps(dataclasses.asdict(result), indent=2)]
            if fmt is TextJson.json
            else report.status_lines(result)
        )
        if lines != shown:
            print("\n".join(lines), flush=True)
            shown = lines
        settled = result.phase if getattr(result, "settles", None) is None else result.settles
        if not watch or settled in SETTLED:
            return str(settled)
        if waited + interval > watch_timeout:
            raise ClusterError(
                f"{what}: still {result.phase} after {waited:g} s",
                file=source,
                hint="watch longer with --watch-timeout SECONDS; the reasons above say what it waits for",
            )
        watch_sleep(interval)
        waited += interval


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


def asks_first(yes: bool) -> bool:
    """Whether delete asks before it deletes: not with --yes; never where no one can answer."""
    if not yes and not stdin_is_terminal():
        raise InputError(
            "refusing to delete without confirmation", field="--yes", hint="pass --yes in scripts"
        )
    return not yes


SETTLED = ("Running", "Succeeded", "Failed")


def watch_sleep(seconds: float) -> None:
    """The pause between --watch polls (tests replace it)."""
    import time

    time.sleep(seconds)
