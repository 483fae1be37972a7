"""Jinja 3.1.6's runtime: only what the shipped templates' compiled code uses, without jinja2."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from importlib.util import find_spec
from types import CodeType, SimpleNamespace
from typing import Any, NoReturn

# The Jinja whose compiled code these names serve and whose semantics they follow (the files
# named below, jinja2 3.1.6). A compiled module's STAMP names the Jinja that wrote it. Where
# the installed Jinja is another (pyproject allows any 3.x from 3.1), Jinja renders and its
# output stands (stands_for_installed_jinja); the tests compare the two on every template.
JINJA_VERSION = "3.1.6"
_VERSION_LINE = '\n__version__ = "'  # how jinja2/__init__.py declares its version (3.0 to 3.1.6)


def installed_jinja() -> str | None:
    """The version the installed jinja2 declares in its `__init__.py`, read without importing it
    (render's normal path never does): None where none is installed or it is not written out."""
    spec = find_spec("jinja2")
    if spec is None or not spec.origin:
        return None
    try:
        with open(spec.origin, encoding="utf-8") as file:
            text = file.read()
    except OSError:
        return None
    at = text.find(_VERSION_LINE)
    start = at + len(_VERSION_LINE)
    end = text.find('"', start)
    return text[start:end] if at >= 0 and end > start else None


@cache
def stands_for_installed_jinja() -> bool:
    """Whether the installed Jinja is JINJA_VERSION, the one this runtime follows. Where it is
    not, render goes through Jinja itself (slower, its output the same where both agree) and
    says so once, a debug line that --debug shows."""
    installed = installed_jinja()
    if installed == JINJA_VERSION:
        return True
    import logging  # only here: render's normal path loads no logging

    logging.getLogger(__name__).debug(
        "the installed Jinja is %s, not the %s that render/runtime.py follows: the templates "
        "render through Jinja itself",
        installed or "of a version not written in jinja2/__init__.py",
        JINJA_VERSION,
    )
    return False


class Fallback(Exception):
    """What this runtime does not cover: render through Jinja, whose output or error stands."""


class TemplateRuntimeError(Fallback):
    """The compiled code's own error (no such filter; `set` on what is no namespace)."""


class _Missing:
    """jinja2/utils.py `missing`: a name the context does not hold."""


missing: Any = _Missing()


def internalcode(function: Callable[..., Any]) -> Callable[..., Any]:
    return function  # jinja2/utils.py internalcode only hides the frame from tracebacks


def undefined(*args: Any, **kwargs: Any) -> NoReturn:
    # Jinja would build a StrictUndefined, which fails on use: its message and line are Jinja's.
    raise Fallback("an undefined value")


def do_string(value: Any) -> str:
    """The `string` filter (jinja2/filters.py FILTERS: markupsafe.soft_str) for a str or a number;
    anything else (its str() could name this runtime's own types) falls back."""
    if isinstance(value, str):
        return value
    if type(value) in (int, float, bool):
        return str(value)
    raise Fallback("string of a non-scalar")


class Namespace:
    """jinja2/utils.py Namespace, the `namespace()` global: attributes set by `{% set %}`."""

    def __init__(self, /, *args: Any, **kwargs: Any) -> None:
        self.__attrs = dict(*args, **kwargs)

    def __getattribute__(self, name: str) -> Any:
        if name in {"_Namespace__attrs", "__class__"}:
            return object.__getattribute__(self, name)
        try:
            return self.__attrs[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setitem__(self, name: str, value: Any) -> None:
        self.__attrs[name] = value


class LoopContext:
    """jinja2/runtime.py LoopContext: the iteration, and `loop.last` (its one peeked item)."""

    def __init__(self, iterable: Iterable[Any], undefined: Any) -> None:
        self._iterator = iter(iterable)
        self._after: Any = missing

    def __iter__(self) -> LoopContext:
        return self

    def __next__(self) -> tuple[Any, LoopContext]:
        if self._after is not missing:
            item, self._after = self._after, missing
            return item, self
        return next(self._iterator), self

    @property
    def last(self) -> bool:
        if self._after is missing:
            self._after = next(self._iterator, missing)
        return self._after is missing


class Context:
    """jinja2/runtime.py Context: the names a render sees, what `set` writes, call()."""

    def __init__(self, parent: dict[str, Any]) -> None:
        self.parent, self.vars, self.exported_vars = parent, dict[str, Any](), set[str]()

    def resolve_or_missing(self, key: str) -> Any:
        if key in self.vars:
            return self.vars[key]
        return self.parent.get(key, missing)

    def call(self, function: Any, /, *args: Any, **kwargs: Any) -> Any:
        # Context.call: a callable that asks for the context or environment is Jinja's to call
        method = getattr(function, "__call__", None)  # noqa: B004 (Jinja's own test: a callable class)
        if hasattr(function, "jinja_pass_arg") or hasattr(method, "jinja_pass_arg"):
            raise Fallback("a callable taking the context")
        kwargs.pop("_block_vars", None)
        kwargs.pop("_loop_vars", None)
        try:
            return function(*args, **kwargs)
        except StopIteration:  # Jinja makes an undefined value of it
            raise Fallback("StopIteration") from None


class Environment:
    """What compiled code reads of jinja2/environment.py Environment."""

    concat = "".join
    undefined = staticmethod(undefined)

    def __init__(self, finalize: Callable[[Any], str], filters: dict[str, Callable[..., Any]]) -> None:
        self.finalize, self.filters = finalize, {"string": do_string, **filters}

    def getattr(self, obj: Any, attribute: str) -> Any:
        # Environment.getattr's first step; an item lookup or an undefined value is Jinja's.
        # No `_` name: this runtime's own objects differ from Jinja's only there.
        if attribute.startswith("_"):
            raise Fallback(f"attribute {attribute}")
        try:
            return getattr(obj, attribute)
        except AttributeError:
            raise Fallback(f"attribute {attribute}") from None


NAMES: dict[str, Any] = {
    "LoopContext": LoopContext,
    "Namespace": Namespace,
    "TemplateRuntimeError": TemplateRuntimeError,
    "Undefined": undefined,
    "internalcode": internalcode,
    "missing": missing,
}
GLOBALS: dict[str, Any] = {"namespace": Namespace}  # of Jinja's DEFAULT_NAMESPACE, the one used


Root = Callable[[Context], Iterator[str]]  # a compiled module's `root`: the pieces of its output


def load_root(code: CodeType, environment: Environment, stamp: str) -> Root | None:
    """The render function of a compiled module's CODE, on this runtime: None unless the module
    carries STAMP and every name its code loads from jinja2.runtime (its RUNTIME) is here."""
    imported: list[str] = []

    def import_runtime(
        name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if name != "jinja2.runtime" or level:
            raise Fallback(f"import of {name}")
        imported.extend(fromlist)
        # the names its code never loads (RUNTIME, checked below) are bound to None
        return SimpleNamespace(**{n: NAMES.get(n) for n in fromlist})

    module: dict[str, Any] = {"__builtins__": {**vars(builtins), "__import__": import_runtime}}
    try:
        exec(code, module)
    except Exception:  # a module this runtime cannot even load is Jinja's to run
        return None
    uses = set(module.get("RUNTIME", ("?",)))
    if module.get("STAMP") != stamp or not uses <= NAMES.keys() or not uses <= set(imported):
        return None
    module["environment"] = environment  # what Jinja's Template.from_module_dict sets
    root: Root = module["root"]
    return root


def render(root: Root, globals: dict[str, Any], context: dict[str, Any]) -> str:
    """Template.render: the context's names over the globals, the pieces joined. Raises
    Fallback, or whatever the template's code raised."""
    return "".join(root(Context({**GLOBALS, **globals, **context})))
