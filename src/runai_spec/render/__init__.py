"""The Jinja templates through one encoder: precompiled, run on runtime.py (else Jinja); render_plan()."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cache, lru_cache
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import InternalError
from ..facts import kubeflow, mpi
from ..facts.kubeflow import operator_problems
from ..plan.env import env_entries
from ..plan.plan import Plan
from ..resources import shipped_dir
from . import runtime
from .manifests import Manifest, encode, encode_pairs, parse_rendered, quote, scalar

if TYPE_CHECKING:  # jinja2 is imported where Jinja itself compiles or renders (not render's normal path)
    import jinja2

# The manifest families render supports, each with its default workload kind's template; a
# plan's own template is its workload kind's (plan.workload.template, chosen by its launcher).
TEMPLATES = {"kubeflow": "pytorchjob.json.j2"}
CONFIGMAP_TEMPLATE = "configmap.json.j2"


class Encoded(str):
    """JSON the encoder wrote for a whole container (the `json` and `mapping` filters)."""


def _finalize(value: Any) -> str:
    # Every {{ }} ends here: strings become double-quoted YAML scalars, so a value can
    # never open a mapping, a list or a new document, whatever characters it holds. Only a
    # container filter's output passes as it is: the same encoder wrote each of its values.
    if type(value) is Encoded:
        return value
    if type(value) is str:  # the most common value: no encoder dispatch
        return quote(value)
    try:
        return scalar(value)
    except TypeError as exc:
        from jinja2 import Undefined  # only Jinja makes one (runtime.py falls back instead)

        if isinstance(value, Undefined):
            str(value)  # StrictUndefined raises UndefinedError, naming what is missing
        raise InternalError(f"template produced a non-scalar value: {exc}") from None


def _json(value: Any) -> Encoded:
    """`{{ plan.command | json }}`: a mapping, a list of scalars (or of such values), or a
    scalar, as one JSON value: no loop and no comma in the template."""
    try:
        return Encoded(encode(value))
    except TypeError as exc:
        raise InternalError(f"template produced a value it cannot encode: {exc}") from None


def _mapping(pairs: Iterable[tuple[str, Any]], *more: Iterable[tuple[str, Any]]) -> Encoded:
    """`{{ plan.labels | mapping(extra) }}`: (key, value) pairs, then those of each of MORE,
    as one JSON object in that order."""
    try:
        return Encoded(encode_pairs([*pairs, *(pair for extra in more for pair in extra)] if more else pairs))
    except TypeError as exc:
        raise InternalError(f"template produced a value it cannot encode: {exc}") from None


# The operator's names (container, port, kind) come from kubeflow.py, not the template.
GLOBALS: dict[str, Any] = {"kubeflow": kubeflow}
FILTERS: dict[str, Callable[..., Any]] = {"json": _json, "mapping": _mapping, "env_entries": env_entries}
# How the templates are compiled (`undefined`: the name of Jinja's class); part of what a
# compiled module must match.
OPTIONS: dict[str, Any] = {
    "undefined": "StrictUndefined",
    "autoescape": False,
    "keep_trailing_newline": True,
    "trim_blocks": False,
    "lstrip_blocks": False,
}
COMPILED_PACKAGE = f"{__name__}.compiled"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    # No on-disk bytecode cache: a writable cache folder let anyone with access to it change
    # what render emits while validate passed (issue 12, item 6). The shipped templates come
    # precompiled as modules of the package instead (template()), as trusted as its code.
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(shipped_dir("templates"))),
        finalize=_finalize,
        **{**OPTIONS, "undefined": getattr(jinja2, OPTIONS["undefined"])},
    )
    env.globals |= GLOBALS
    env.filters |= FILTERS
    return env


def compiled_module_name(name: str) -> str:
    """`pytorchjob.json.j2` -> its compiled module's name, `pytorchjob_json`."""
    return name.removesuffix(".j2").replace(".", "_").replace("-", "_")


def compiled_stamp(source: bytes, jinja_version: str) -> str:
    """What a compiled module must carry to stand for SOURCE: the template's sha256, the version
    of the Jinja that compiled it and the environment's options (each changes the code)."""
    options = sorted(OPTIONS.items())
    return f"{hashlib.sha256(source).hexdigest()} jinja2-{jinja_version} {options}"


def compiled_source(name: str) -> str:
    """The Python module that stands for template NAME (write_compiled_templates writes it):
    Jinja's code, its STAMP, and RUNTIME: the names of jinja2.runtime the code loads (all are
    imported), which runtime.py must have to run it."""
    import ast

    import jinja2

    env = environment()
    source = (shipped_dir("templates") / name).read_bytes()
    code = env.compile(source.decode("utf-8"), name, raw=True, defer_init=True)
    tree = ast.parse(code)
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "jinja2.runtime"
        for alias in node.names
    }
    loaded = sorted(
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} & imported
    )
    return (
        f'"""{name} compiled by Jinja; generated by runai_spec.render.'
        f'write_compiled_templates(), do not edit."""\n# fmt: off\n# ruff: noqa\n'
        f"# mypy: ignore-errors\nSTAMP = {compiled_stamp(source, jinja2.__version__)!r}\n"
        f"RUNTIME = {tuple(loaded)!r}\n{code}\n"
    )


def write_compiled_templates(folder: Path | None = None) -> list[Path]:
    """Regenerate the compiled modules of every shipped template (run after editing one)."""
    folder = folder or Path(__file__).parent / "compiled"
    written = []
    for name in sorted(p.name for p in shipped_dir("templates").glob("*.j2")):
        path = folder / f"{compiled_module_name(name)}.py"
        path.write_text(compiled_source(name), encoding="utf-8")
        written.append(path)
    return written


@cache
def template(name: str) -> jinja2.Template:
    """Template NAME in Jinja: from its compiled module when that was generated from exactly
    this template text (sha256), Jinja version and options; else compiled from source here."""
    import jinja2

    env = environment()
    source = (shipped_dir("templates") / name).read_bytes()
    try:
        module = import_module(f"{COMPILED_PACKAGE}.{compiled_module_name(name)}")
    except ImportError:
        module = None
    if module is not None and getattr(module, "STAMP", None) == compiled_stamp(source, jinja2.__version__):
        return env.template_class.from_module_dict(env, vars(module), env.make_globals(None))
    return _from_text(name)


def _from_text(name: str) -> jinja2.Template:
    """Template NAME compiled from its text: its code's lines map to the template's (a compiled
    module's lines are shifted by its header), which is what locating an error needs."""
    import jinja2

    try:
        return environment().get_template(name)
    except jinja2.TemplateSyntaxError as exc:
        raise InternalError(f"template does not compile: {exc.message}", file=name, line=exc.lineno) from None


RUNTIME_ENVIRONMENT = runtime.Environment(_finalize, FILTERS)


@cache
def _compiled_root(name: str, folder_of: Callable[[str], Path]) -> runtime.Root | None:
    """Template NAME's compiled module loaded on runtime.py, when it stands for exactly the text
    of NAME in folder_of("templates") (keyed by that function: tests swap it for their own)."""
    module = f"{COMPILED_PACKAGE}.{compiled_module_name(name)}"
    spec = find_spec(module)
    get_code = getattr(spec.loader, "get_code", None) if spec else None
    code = get_code(module) if get_code else None
    if code is None:
        return None
    stamp = compiled_stamp((folder_of("templates") / name).read_bytes(), runtime.JINJA_VERSION)
    return runtime.load_root(code, RUNTIME_ENVIRONMENT, stamp)


def render_compiled(name: str, **context: Any) -> str:
    """Template NAME's output for CONTEXT from its compiled module on runtime.py, without jinja2.
    Raises runtime.Fallback where the module does not stand for the template's text or uses
    what the runtime lacks, and whatever the template's code raised."""
    root = _compiled_root(name, shipped_dir)
    if root is None:
        raise runtime.Fallback(f"{name}: no compiled module runtime.py can run")
    return runtime.render(root, GLOBALS, context)


def render_with_jinja(name: str, **context: Any) -> str:
    """Template NAME's output for CONTEXT through Jinja itself; its errors name their line."""
    import jinja2

    try:
        return template(name).render(**context)
    except jinja2.UndefinedError as exc:
        problem = f"template uses an undefined value: {exc.message}"
    except InternalError as exc:  # a value the encoder refused
        problem = exc.message
    raise InternalError(problem, file=name, line=_failing_line(name, context)) from None


def _render(name: str, **context: Any) -> str:
    if runtime.stands_for_installed_jinja():  # else Jinja's own rendering, a --debug note said once
        try:
            return render_compiled(name, **context)
        except Exception:  # what runtime.py does not cover, errors included: Jinja's output or error stands
            pass
    return render_with_jinja(name, **context)


def render_text(plan: Plan, family: str = "kubeflow", *, smoke: Any = None) -> str:
    """The template's raw output for a plan (with `smoke`, a SmokePlan: its smoke test's job)."""
    return _render(_plan_template(plan, family), plan=plan, smoke=smoke)


def _failing_line(name: str, context: dict[str, Any]) -> int | None:
    """The line of template NAME where rendering CONTEXT fails: Jinja rewrites the traceback
    of a template compiled from its text to the template's own lines."""
    failing = _from_text(name)
    try:
        failing.render(**context)
    except Exception as exc:  # whatever failed the first time fails here again
        lines = [tb.tb_lineno for tb in _frames(exc) if tb.tb_frame.f_code.co_filename == failing.filename]
        return lines[-1] if lines else None
    return None


def _frames(exc: BaseException) -> Iterator[TracebackType]:
    tb = exc.__traceback__
    while tb is not None:
        yield tb
        tb = tb.tb_next


# Before each piece a line-marked render writes, the template line it starts on. NUL: no value
# can hold one raw (the encoder escapes every control character) and no template has one.
_LINE = re.compile("\x00([0-9]+)\x00")


def _line_marked(name: str) -> jinja2.Template:
    """Template NAME compiled from its text, each piece of its output preceded by `NUL line NUL`
    (each line of template text by its own): Jinja's debug_info maps only statements."""
    from jinja2 import nodes

    env = environment()
    if env.loader is None:
        raise InternalError("the template environment has no loader")
    source, filename, _ = env.loader.get_source(env, name)
    tree = env.parse(source, name, filename)
    for output in tree.find_all(nodes.Output):
        marked: list[nodes.Expr] = []
        for node in output.nodes:
            if isinstance(node, nodes.TemplateData):
                text = "\n".join(
                    f"\x00{node.lineno + i}\x00{line}" for i, line in enumerate(node.data.split("\n"))
                )
                marked.append(nodes.TemplateData(text, lineno=node.lineno))
            else:
                marked += [nodes.TemplateData(f"\x00{node.lineno}\x00", lineno=node.lineno), node]
        output.nodes = marked
    return env.from_string(tree)


def _writing_line(name: str, context: dict[str, Any], pos: int | None) -> int | None:
    """The line of template NAME that wrote character POS of its output for CONTEXT."""
    if pos is None:
        return None
    parts = _LINE.split(_line_marked(name).render(**context))
    written, line = len(parts[0]), None  # text, then (line, text) pairs
    for i in range(1, len(parts), 2):
        line, text = int(parts[i]), parts[i + 1]
        if written + len(text) > pos:
            return line
        written += len(text)
    return line


def _checked(rendered: list[tuple[str, dict[str, Any], str]], what: str) -> list[Manifest]:
    """Re-parse each (template name, context, text) strictly and check the operator's rules;
    text that does not parse names the template line that wrote it."""
    manifests = []
    for name, context, text in rendered:
        try:
            manifests.append(parse_rendered(text))
        except ValueError as exc:  # JSONDecodeError included: the template or encoder has a bug
            line = _writing_line(name, context, getattr(exc, "pos", None))
            raise InternalError(
                f"rendered {what} is not a valid manifest: {exc}", file=name, line=line
            ) from None
    rules = {kubeflow.KIND: operator_problems, mpi.KIND: mpi.operator_problems}
    for manifest in manifests:
        problems = rules[manifest["kind"]](manifest) if manifest.get("kind") in rules else []
        if problems:
            raise InternalError(f"rendered {manifest['kind']} breaks an operator rule: {problems[0]}")
    return manifests


def _rendered(name: str, **context: Any) -> tuple[str, dict[str, Any], str]:
    return name, context, _render(name, **context)


def _plan_template(plan: Plan, family: str) -> str:
    """The template of PLAN's workload kind, in a manifest family render supports."""
    if family not in TEMPLATES:
        raise InternalError(f"no template for manifest family {family!r}")
    return plan.workload.template


def render_plan(plan: Plan, family: str = "kubeflow") -> list[Manifest]:
    """Render, re-parse strictly and check the operator's rules."""
    return _checked([_rendered(_plan_template(plan, family), plan=plan, smoke=None)], plan.name)


def render_smoke(smoke: Any, family: str = "kubeflow") -> list[Manifest]:
    """A smoke test (smoke.SmokePlan): its ConfigMap, then its job, through the same encoder,
    strict re-parse and operator checks as the real job."""
    rendered = [
        _rendered(CONFIGMAP_TEMPLATE, config_map=smoke.config_map),
        _rendered(_plan_template(smoke.job, family), plan=smoke.job, smoke=smoke),
    ]
    return _checked(rendered, smoke.job.name)
