"""What defining the models costs at every start-up (issue 29 item 1), checked by what they
hold, never by time."""

from __future__ import annotations

import types
import typing

import pytest
from pydantic import BaseModel

from runai_spec.load.ledger import Ledger
from runai_spec.load.presets import Preset
from runai_spec.load.profile import Profile
from runai_spec.load.site import Site


def models(top: type[BaseModel]) -> list[type[BaseModel]]:
    """TOP and every model its fields hold, at any depth."""
    found: list[type[BaseModel]] = []
    todo = [top]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for info in model.model_fields.values():
            stack: list[object] = [info.annotation]
            while stack:
                hint = stack.pop()
                if isinstance(hint, type) and issubclass(hint, BaseModel):
                    todo.append(hint)
                stack.extend(typing.get_args(hint))
    return found


@pytest.mark.parametrize("top", [Profile, Preset, Site, Ledger])
def test_no_default_factory_is_a_builtin(top: type[BaseModel]) -> None:
    # pydantic reads each factory's signature; a builtin's (dict, list) is parsed from its
    # text by the tokenizer, whose regex every start-up would compile
    for model in models(top):
        for name, info in model.model_fields.items():
            factory = info.default_factory
            if factory is not None:
                assert isinstance(factory, types.FunctionType) or issubclass(
                    typing.cast(type, factory), BaseModel
                ), f"{model.__name__}.{name}: default_factory={factory!r}"


def test_the_records_of_every_signature_check_are_no_dataclasses() -> None:
    # every run verifies the site's and the preset's approvals: a frozen dataclass costs each
    # start-up ~4 M instructions to define, a NamedTuple ~1 M (sshsig.py)
    import dataclasses

    from runai_spec.load import allowed_signers, registry, signing, sshsig

    records = [
        sshsig.PublicKey,
        sshsig.Sshsig,
        allowed_signers.SignerOptions,
        allowed_signers.SignerLine,
        allowed_signers.AllowedSigners,
        signing.SignedApproval,
        registry.VerifyResult,
    ]
    assert not [r.__name__ for r in records if dataclasses.is_dataclass(r)]
    assert all(issubclass(r, tuple) and getattr(r, "_fields", ()) for r in records)
