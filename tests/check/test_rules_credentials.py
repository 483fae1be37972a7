"""validate's `secret-env` rule and the masking read one list of credential shapes (secrets.py)."""

from __future__ import annotations

import pytest

from runai_spec.secrets import TOKEN_SHAPES, mask_text, secret_value

TOKENS = {
    "AKIA": "AKIA" + "ABCDEFGHIJKLMNOP",
    "ASIA": "ASIA" + "0123456789ABCDEF",
    "gh": "ghp_" + "a1" * 18,
    "github_pat_": "github_pat_" + "A1b_" * 6,
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


@pytest.mark.parametrize(
    "value",
    [
        "eyJhbGciOiJI.eyJzdWIiOiIx.sig",  # a JWT
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "https://user:hunter2@example.org/x",
        *TOKENS.values(),
    ],
)
def test_secret_value_is_the_pattern_s_search_and_its_literal_scan_skips_none(value: str) -> None:
    """secret_value looks for a literal part of each shape before the pattern: every shape the
    pattern knows is found with the text around it, and a text with none is not a secret."""
    import re

    from runai_spec.secrets import SECRET_VALUE

    for text in (value, f"x {value} y", f"--flag={value}"):
        assert secret_value(text) is bool(re.search(SECRET_VALUE, text)) is True
    assert not secret_value("https://example.org/x") and not secret_value("sk_not_a_key")
