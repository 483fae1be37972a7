"""validate's `secret-env` rule and the masking read one list of credential shapes (secrets.py)."""

from __future__ import annotations

import pytest

from runai_spec.secrets import TOKEN_SHAPES, mask_text, secret_value

TOKENS = {
    "AKIA": "AKIA" + "ABCDEFGHIJKLMNOP",
    "ASIA": "ASIA" + "0123456789ABCDEF",
    "gh": "ghp_" + "a1" * 18,
    "glpat-": "glpat-" + "x" * 20,
    "xox": "xoxb-" + "1234567890",
    "hf_": "hf_" + "Ab1" * 10,
    "sk-": "sk-" + "proj_" + "z" * 20,
}


def test_every_token_shape_has_a_sample() -> None:
    assert set(TOKENS) == set(TOKEN_SHAPES)


@pytest.mark.parametrize("start", sorted(TOKENS))
def test_a_token_validate_refuses_is_one_every_output_masks(start: str) -> None:
    value = f"--key={TOKENS[start]}"
    assert secret_value(value)
    assert TOKENS[start] not in mask_text(value)
