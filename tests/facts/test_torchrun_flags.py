"""torchrun's flag grammar (facts/torchrun.py): each use of a flag with its value, any
spelling, `--x=v` or `--x v`; the rdzv conf's keys."""

from __future__ import annotations

from runai_spec.facts.torchrun import FlagUse, flag_uses, flag_value, has_flag, rdzv_conf_keys

HEAD = [
    "torchrun",
    "--nnodes=2",
    "--rdzv-conf=join_timeout=60",
    "--rdzv_conf",
    "read_timeout=60",
    "--standalone",
    "--log-dir",
]


def test_every_use_of_a_flag_in_either_spelling_with_its_value() -> None:
    assert flag_uses(HEAD, "--rdzv-conf", "--rdzv_conf") == [
        FlagUse(2, 1, "--rdzv-conf", "join_timeout=60"),
        FlagUse(3, 2, "--rdzv_conf", "read_timeout=60"),
    ]
    assert flag_value(HEAD, "--rdzv-conf", "--rdzv_conf") == "join_timeout=60"  # the first
    assert flag_value(HEAD, "--nnodes") == "2"


def test_a_flag_last_with_no_value_is_no_use_and_an_empty_value_is_one() -> None:
    assert flag_uses(HEAD, "--log-dir") == [] and flag_value(HEAD, "--log-dir") is None
    assert has_flag(HEAD, "--log-dir")
    assert flag_value(["--log-dir=", "x"], "--log-dir") == ""


def test_a_value_is_not_read_as_a_flag_of_its_own() -> None:
    head = ["--rdzv-conf", "--rdzv-conf=x", "--rdzv-conf=y"]
    assert [u.value for u in flag_uses(head, "--rdzv-conf")] == ["--rdzv-conf=x", "y"]


def test_the_keys_of_an_rdzv_conf() -> None:
    assert rdzv_conf_keys("join_timeout=60, is_host=1,,last") == {"join_timeout", "is_host", "last"}
    assert rdzv_conf_keys("") == set()
