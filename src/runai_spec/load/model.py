"""The base of every model read from a file: unknown keys refused, values frozen."""

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

Validator = TypeVar("Validator", bound=Callable[..., Any])


class FileModel(BaseModel):
    """The profile's, a preset's, the site's and the ledger's models: one base, one definition
    of what they share (each base is a model pydantic builds at every start: issue 29).
    populate_by_name: a field with an alias (the profile's `batch.global`) also takes its name."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


# An empty default is `default_factory=lambda: {}` (or `[]`), and a model's default
# `default_factory=lambda: Model()`, not the builtin `dict` or the class itself: pydantic reads
# each factory's signature, and a builtin's is parsed from its text by the tokenizer (its regex
# and the parse: ~17 M instructions of every start-up), a model class's built from its fields
# (issue 29).


def read_once(validator: Validator) -> Validator:
    """VALIDATOR with its signature read now, once: pydantic reads a validator's signature for
    each field whose type names it (to know whether it takes an info argument), and
    inspect.signature returns a function's __signature__ where it has one (~50 K instructions a
    read: the profile's text and count validators serve 25 fields; issue 29)."""
    validator.__signature__ = inspect.signature(validator)  # type: ignore[attr-defined]
    return validator
