"""Record: a typing.NamedTuple's class statement, made by collections.namedtuple alone."""

# A record is written as a NamedTuple is (annotated fields, defaults, methods, a docstring), and
# mypy reads `Record` as typing.NamedTuple. At run time the class is the one typing.NamedTuple
# returns, collections.namedtuple's with the body's names set on it, without the two steps of
# NamedTupleMeta (Python 3.11's typing.py) that cost a third of a record and change nothing: a
# run-time check of each annotation (mypy checks them; a string stays a string) and the
# re-assignment of the class's own __bases__ (~0.3 M instructions a record, 6.4 M of every
# start: issue 29, benchmarks/README.md round 6). tests/project/test_records.py compares every
# record with the class the running Python's typing.NamedTuple makes of the same body.
import collections
from typing import TYPE_CHECKING, Any

__all__ = ["Record"]

if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    # typing.py's _prohibited and _special: what a body may not set, what the class has already
    _PROHIBITED = frozenset(
        {
            "__new__",
            "__init__",
            "__slots__",
            "__getnewargs__",
            "_fields",
            "_field_defaults",
            "_make",
            "_replace",
            "_asdict",
            "_source",
        }
    )
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _RecordMeta(type):
        def __new__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
            if not bases:  # Record itself
                return super().__new__(cls, name, bases, namespace)
            if bases != (Record,):
                raise TypeError(f"{name}: a record derives from Record alone")
            annotations: dict[str, Any] = namespace.get("__annotations__", {})
            defaults: list[Any] = []
            for field in annotations:
                if field in namespace:
                    defaults.append(namespace[field])
                elif defaults:
                    raise TypeError(f"{name}: field {field} without a default follows one with a default")
            record = collections.namedtuple(
                name, annotations, defaults=defaults, module=namespace["__module__"]
            )
            record.__annotations__ = dict(annotations)
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"{name}: a record may not set {key}")
                if key not in _SPECIAL and key not in annotations:
                    setattr(record, key, value)
            return record

    class Record(metaclass=_RecordMeta):
        """The base a record's class statement names."""
