"""Record against typing.NamedTuple: the same class for the same body, every record of the
package included, and the same refusals."""

from __future__ import annotations

import ast
import copy
import importlib
import pickle
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest

from conftest import ROOT
from runai_spec.records import Record

PACKAGE = ROOT / "src" / "runai_spec"

# What collections.namedtuple makes itself (compared by behaviour below, not by identity), and
# what only typing's class statement adds (typing.NamedTuple is a function whose __mro_entries__
# is kept as __orig_bases__; Record is a class, which needs none).
GENERATED = {
    "__new__",
    "_make",
    "_replace",
    "__repr__",
    "_asdict",
    "__getnewargs__",
    "__match_args__",
    "__slots__",
    "_fields",
    "_field_defaults",
}
# typing turns a string annotation into a ForwardRef at run time, Record keeps the string: the
# fields are compared by name.
ANNOTATIONS = {"__annotations__"}
TYPING_ONLY = {"__orig_bases__"}


def body(annotations: dict[str, Any], **names: Any) -> Callable[[dict[str, Any]], None]:
    """A class statement's namespace: its module, annotations and NAMES."""

    def fill(namespace: dict[str, Any]) -> None:
        namespace["__module__"] = __name__
        namespace["__annotations__"] = dict(annotations)
        namespace.update(names)

    return fill


def both(name: str, fill: Callable[[dict[str, Any]], None]) -> tuple[Any, Any]:
    """The class typing.NamedTuple makes of a body, and Record's."""
    expected = types.new_class(name, (typing.NamedTuple,), {}, fill)
    got = types.new_class(name, (Record,), {}, fill)
    return expected, got


def own(cls: Any) -> dict[str, Any]:
    return {
        k: v
        for k, v in vars(cls).items()
        if k not in GENERATED | TYPING_ONLY | ANNOTATIONS | set(cls._fields)
    }


def assert_same_class(expected: Any, got: Any) -> None:
    fields: tuple[str, ...] = got._fields
    assert type(got) is type(expected) is type
    assert got.__mro__[1:] == expected.__mro__[1:] == (tuple, object)
    for attribute in ("_fields", "_field_defaults", "__match_args__", "__slots__", "__doc__", "__module__"):
        assert getattr(got, attribute) == getattr(expected, attribute), attribute
    assert (got.__name__, got.__qualname__) == (expected.__name__, expected.__qualname__)
    assert list(got.__annotations__) == list(expected.__annotations__)
    assert own(got) == own(expected)
    for index, field in enumerate(fields):
        assert (
            getattr(got, field).__doc__
            == getattr(expected, field).__doc__
            == f"Alias for field number {index}"
        )


def double(self: Any) -> int:
    return 2 * int(self.a)


SAMPLES: dict[str, Callable[[dict[str, Any]], None]] = {
    "one field": body({"a": int}),
    "defaults": body({"a": int, "b": str, "c": "list[int] | None"}, b="x", c=None),
    "methods and a docstring": body(
        {"a": int, "b": float},
        b=1.5,
        __doc__="A sample.",
        double=double,
        half=property(lambda self: self.a / 2),
        of=classmethod(lambda cls, a: cls(a)),
        limit=10,
    ),
}


@pytest.mark.parametrize("sample", list(SAMPLES))
def test_a_record_is_the_class_typing_makes_and_behaves_alike(sample: str) -> None:
    expected, got = both("Sample", SAMPLES[sample])
    assert_same_class(expected, got)
    width = len(got._fields)
    values = tuple(range(1, width + 1))
    for cls in (expected, got):
        assert cls(*values) == values and hash(cls(*values)) == hash(values)
    made, wanted = got(*values), expected(*values)
    assert repr(made) == repr(wanted)
    assert made._asdict() == wanted._asdict()
    assert made._replace(a=7) == wanted._replace(a=7) == (7, *values[1:])
    assert got._make(values) == values
    assert got(a=1) == expected(a=1)  # every sample's other fields have defaults
    assert copy.deepcopy(made) == made
    with pytest.raises(AttributeError):
        made.a = 5
    with pytest.raises(TypeError):
        got()  # a field without a default is missing
    with pytest.raises(TypeError):
        got(*values, unknown=1)


def test_pickling_finds_a_record_of_the_package_by_its_name() -> None:
    from runai_spec.errors import Location

    where = Location("profile.yaml", 3, "env.HF_TOKEN")
    assert pickle.loads(pickle.dumps(where)) == where  # noqa: S301
    assert type(pickle.loads(pickle.dumps(where))) is Location  # noqa: S301


def records() -> list[Any]:
    """Every record class of the package: each `class X(Record)` of its source, imported."""
    found: list[Any] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Record" for b in node.bases):
                name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                found.append(getattr(importlib.import_module(name), node.name))
    return found


def test_every_record_of_the_package_is_the_class_typing_would_make() -> None:
    found = records()
    assert len(found) >= 26
    for record in found:
        defaults = record._field_defaults
        expected = types.new_class(
            record.__name__,
            (typing.NamedTuple,),
            {},
            body(record.__annotations__, **defaults, **own(record)),
        )
        expected.__module__ = record.__module__
        assert_same_class(expected, record)


def test_the_refusals_are_typing_s() -> None:
    late = body({"a": int, "b": str}, a=1)  # a field without a default after one with
    for base in (typing.NamedTuple, Record):
        with pytest.raises(TypeError):
            types.new_class("Late", (base,), {}, late)
        with pytest.raises(AttributeError):
            types.new_class("Bad", (base,), {}, body({"a": int}, _replace=None))
    with pytest.raises(TypeError, match="derives from Record alone"):
        types.new_class("Mixed", (Record, int), {}, body({"a": int}))
