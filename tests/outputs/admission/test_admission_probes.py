"""The probe profiles cover the profile model (issue 37 item 3): every field a profile can set
has a probe token, or is UNPROBED with the reason; a new profile field fails here, never slips
past the policy's generator unprobed."""

from __future__ import annotations

from runai_spec.load.profile import Profile
from runai_spec.outputs.admission.probes import UNPROBED, Token, probe_tokens, profile_fields
from runai_spec.outputs.admission.rules import RULES


def test_every_profile_field_has_a_probe_token_or_a_reason_it_has_none() -> None:
    fields = set(profile_fields())
    probed = {token.field for token in probe_tokens(False).values()}
    missing = fields - probed - set(UNPROBED)
    assert missing == set(), (
        f"profile fields with no probe token: {sorted(missing)}; give each a Token in "
        "outputs/admission/probes.py (or, when no render can depend on it, an UNPROBED reason)"
    )
    assert probed - fields == set(), "a token names no field of the profile model"
    assert set(UNPROBED) - fields == set(), "UNPROBED names no field of the profile model"
    assert probed.isdisjoint(set(UNPROBED) - {"command[]"}), probed & set(UNPROBED)
    assert all(UNPROBED.values())


def test_the_fields_are_derived_from_the_profile_model() -> None:
    fields = profile_fields()
    assert len(fields) == len(set(fields))
    assert {"name", "checkpoint.dir", "command[]", "env{key}", "env{value}", "batch.global"} <= set(fields)
    assert {"secret_env{value}.secret", "secret_env{value}.key", "data[].read_only"} <= set(fields)
    assert {f.split(".")[0].split("[")[0].split("{")[0] for f in fields} == {
        info.alias or name for name, info in Profile.model_fields.items()
    }


def test_every_token_has_two_distinct_texts_and_a_rule_of_the_policy() -> None:
    tokens: dict[str, Token] = probe_tokens(False)
    assert probe_tokens(True).items() <= tokens.items()
    for key, token in tokens.items():
        assert token.a != token.b, key
        assert token.rule in RULES, key
    texts = [str(v) for t in tokens.values() for v in (t.a, t.b) if isinstance(v, str)]
    assert len(texts) == len(set(texts))
