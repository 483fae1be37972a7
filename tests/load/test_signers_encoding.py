"""The in-process verifier is exactly as strict as `ssh-keygen -Y verify` on a signature's
encoding (issue 41 item 7): the base64 padding and trailing bits, and the armor around it."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from load.test_sshsig_inprocess import KEY_TYPES, PRINCIPAL, armor, both, keys
from runai_spec.load import sshsig

__all__ = ["keys"]  # the fixture, shared with test_sshsig_inprocess


def _body(signature: str) -> str:
    return "".join(signature.splitlines()[1:-1])


def _armored(body: str, width: int = 70) -> str:
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return "\n".join([sshsig.SIGNATURE_BEGIN, *lines, sshsig.SIGNATURE_END]) + "\n"


def _padding_variants(blob: bytes) -> dict[str, str]:
    """Bodies of BLOB with its padding or last character changed."""
    good = base64.b64encode(blob).decode()
    core = good.rstrip("=")
    pad = len(good) - len(core)
    out = {
        "canonical": good,
        "one-more-pad": good + "=",
        "two-more-pad": good + "==",
        "no-pad": core,
        "space-in-pad": good[:-1] + " =" if pad else good + " ",
    }
    if pad:
        out["one-pad-less"] = good[:-1]
        # the last data character with a bit of its unused part set
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        last = alphabet.index(core[-1])
        out["trailing-bits"] = core[:-1] + alphabet[last | 1] + "=" * pad
    return out


@pytest.mark.parametrize("kind", KEY_TYPES)
def test_the_padding_of_a_signature_is_read_as_ssh_keygen_reads_it(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], kind: str
) -> None:
    _, public, signature = keys[kind]
    signers = f"{PRINCIPAL} {public}\n"
    blob = sshsig.dearmor(signature)
    verdicts = {}
    for name, body in _padding_variants(blob).items():
        verdicts[name] = both(tmp_path, signers, _armored(body))
    assert verdicts["canonical"] is True
    # the excess padding the in-process verifier took before issue 41 is refused, as by ssh-keygen
    assert verdicts["one-more-pad"] is False


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda s: s.rstrip("\n"), id="no-final-newline"),
        pytest.param(lambda s: s + "\n", id="blank-line-after"),
        pytest.param(lambda s: " " + s, id="space-before-begin"),
        pytest.param(lambda s: s.replace("-----\n", "----- \n", 1), id="space-after-begin"),
        pytest.param(lambda s: _armored(_body(s), 64), id="64-wide"),
        pytest.param(lambda s: _armored(_body(s), 1000), id="one-line"),
    ],
)
def test_the_armor_is_read_as_ssh_keygen_reads_it(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], change: object
) -> None:
    _, public, signature = keys["ed25519"]
    assert callable(change)
    both(tmp_path, f"{PRINCIPAL} {public}\n", change(signature))


def test_the_canonical_armor_verifies(tmp_path: Path, keys: dict[str, tuple[Path, str, str]]) -> None:
    _, public, signature = keys["ed25519"]
    assert both(tmp_path, f"{PRINCIPAL} {public}\n", armor(sshsig.dearmor(signature)))
