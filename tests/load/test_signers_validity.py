"""Signers' validity (issue 22, item 4): `valid-after`/`valid-before` in allowed_signers bound
the date an approval may carry, read as ssh-keygen reads them (`-Overify-time` at the
approval's date: sshsig.c check_allowed_keys_line, misc.c parse_absolute_time), the same on
every machine; an approval dated after the registry's today is refused like an edited
preset, by every command that loads the registry and by the admission policy's generator."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

import pytest

from conftest import ENGINEER, ROOT, cli, make_key
from runai_spec.errors import PresetError
from runai_spec.load import signing
from runai_spec.load.registry import PresetRegistry
from runai_spec.load.signing import SignedApproval
from runai_spec.load.sshsig import SignatureError
from runai_spec.outputs.admission import documents as admission

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

SINGLE_NODE = str(ROOT / "examples" / "single-node" / "profile.yaml")  # uses h200-8gpu
SHA = "80f55c9da0a0fa945399b2184436e3acfac0d6daf5aaed18e7e3f4f57467b334"
APPROVED_AT = "2026-12-02"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


@pytest.fixture(scope="module")
def bob(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SignedApproval, str]:
    """Bob's key, his approval dated APPROVED_AT (signed with an open allowed_signers) and
    his allowed_signers line without options."""
    folder = tmp_path_factory.mktemp("bob")
    key = make_key(folder, "bob")
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    signers = folder / "allowed_signers"
    signers.write_text(f"bob@scc.example.org {kind} {blob}\n")
    signed = signing.sign_approval("h200-8gpu.yaml", SHA, key, signers, approved_at=APPROVED_AT)
    return key, signed, f"{kind} {blob}"


WINDOWS = [  # the options of bob's line, and whether his approval of APPROVED_AT verifies
    ('valid-after="20261201"', True),
    ('valid-after="20261202"', True),  # the approval's date is its midnight
    ('valid-after="20261202000001"', False),
    ('valid-after="20261203"', False),
    ('valid-before="20261202"', True),  # bounds are inclusive
    ('valid-before="20261201235959"', False),
    ('valid-after="20261101",valid-before="20261231"', True),
    ('valid-after="20261203",valid-before="20261231"', False),
    ('valid-after="20261202Z"', True),
    ('valid-after="20261202UTC"', True),
    ('valid-after="202612020000"', True),
    ('valid-after="202612020001"', False),
    ('VALID-AFTER="20261203"', False),  # option names are case-insensitive
    ('namespaces="runai-spec",valid-after="20261201"', True),
    ("valid-after=20261201", False),  # unquoted: the line is unreadable, skipped
    ('valid-after="20261201",valid-after="20261101"', False),  # twice: unreadable
    ('valid-after="20261231",valid-before="20261101"', False),  # before <= after
    ('valid-after="2026120"', False),  # no time ssh-keygen reads
    ('valid-after="19700101Z"', False),  # the epoch reads as "no time": refused
    ('valid-before="20261202",valid-after="20261202"', False),
]


@pytest.mark.parametrize(("options", "verifies"), WINDOWS)
def test_a_key_s_window_bounds_the_approval_s_date(
    tmp_path: Path, options: str, verifies: bool, bob: tuple[Path, SignedApproval, str]
) -> None:
    _, signed, public = bob
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"bob@scc.example.org {options} {public}\n")
    if verifies:
        assert signing.verify_approval(signed, signers) == "bob@scc.example.org"
    else:
        with pytest.raises(SignatureError, match="does not verify for 'bob@scc.example.org'"):
            signing.verify_approval(signed, signers)


@pytest.mark.parametrize("zone", ["Etc/GMT-14", "Etc/GMT+12", "UTC"])
def test_the_machine_s_time_zone_never_changes_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str, bob: tuple[Path, SignedApproval, str]
) -> None:
    """A window written in UTC (Z) and one written without a zone verify the approval of its
    own day on a machine at UTC+14 or UTC-12 as on one at UTC (ssh-keygen reads the
    approval's date in the local zone: at UTC+14 its midnight was the day before in UTC)."""
    monkeypatch.setenv("TZ", zone)
    _, signed, public = bob
    signers = tmp_path / "allowed_signers"
    for options, verifies in (
        ('valid-after="20261202Z"', True),
        ('valid-before="20261202Z"', True),
        ('valid-after="20261202000001Z"', False),
        ('valid-before="20261201235959Z"', False),
        ('valid-after="20261202"', True),
    ):
        signers.write_text(f"bob@scc.example.org {options} {public}\n")
        if verifies:
            assert signing.verify_approval(signed, signers) == "bob@scc.example.org", options
        else:
            with pytest.raises(SignatureError, match="does not verify"):
                signing.verify_approval(signed, signers)


def _future_approval(presets_dir: Path, key: Path, days: int = 30) -> tuple[Path, str]:
    """h200-8gpu re-approved by the engineer's key on a date DAYS from today."""
    future = (dt.date.today() + dt.timedelta(days=days)).isoformat()
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("backoff_limit: 3", "backoff_limit: 5"))
    PresetRegistry(presets_dir, today=dt.date.fromisoformat(future)).approve("h200-8gpu", key)
    return path, future


def test_an_approval_dated_in_the_future_is_refused_like_an_edited_preset(
    presets_dir: Path, engineer_key: Path
) -> None:
    path, future = _future_approval(presets_dir, engineer_key)
    expected = (
        f"error: {path}: approved_at: approval dated {future}, after today ({dt.date.today().isoformat()})"
    )
    code, stdout, stderr = cli("presets", "verify", "--dir", str(presets_dir))
    assert code == 1
    assert "ok: h200-1gpu.yaml" in stdout and "ok: h200-8gpu.yaml" not in stdout
    assert error_lines(stderr) == [expected]
    for command in ("render", "validate"):
        code, _, stderr = cli(command, SINGLE_NODE)
        assert code == 2 and error_lines(stderr) == [expected], stderr
        assert (
            "hint: an SCC AI Engineer reviews it and runs `runai-spec presets approve h200-8gpu --key"
            in stderr
            and "Traceback" not in stderr
        )
    # the admission policy's parameters are generated only from a registry that verifies:
    # refused, or (were the generator to skip what does not verify) left out
    try:
        params = admission.params_data(PresetRegistry(presets_dir))
    except PresetError as exc:
        assert "approved_at: approval dated" in str(exc)
    else:
        assert not [key for key in params if key.startswith("h200-8gpu.")], params
    # on its date (and after), the same approval verifies
    later = PresetRegistry(presets_dir, today=dt.date.fromisoformat(future))
    assert later.get("h200-8gpu").preset.run_policy.backoff_limit == 5
    assert any(key.startswith("h200-8gpu.") for key in admission.params_data(later))


def test_an_approval_outside_its_key_s_window_is_refused_by_every_command(
    presets_dir: Path, engineer_key: Path
) -> None:
    path = presets_dir / "h200-8gpu.yaml"
    path.write_text(path.read_text().replace("backoff_limit: 3", "backoff_limit: 5"))
    assert cli("presets", "approve", "h200-8gpu", "--key", str(engineer_key))[0] == 0
    yesterday = (dt.date.today() - dt.timedelta(days=1)).strftime("%Y%m%d")
    signers = presets_dir / "allowed_signers"
    signers.write_text(signers.read_text().replace(f"{ENGINEER} ", f'{ENGINEER} valid-before="{yesterday}" '))
    code, stdout, stderr = cli("presets", "verify", "--dir", str(presets_dir))
    assert code == 1 and "ok: h200-8gpu.yaml" not in stdout
    (error,) = error_lines(stderr)
    assert error.startswith(
        f"error: {path}: signature: the signature of h200-8gpu.yaml's "
        f"approval does not verify for '{ENGINEER}'"
    ), error
    for command in ("render", "validate"):
        code, _, stderr = cli(command, SINGLE_NODE)
        assert code == 2 and error_lines(stderr) == [error]
        assert "hint: " in stderr and "Traceback" not in stderr
    try:
        params = admission.params_data(PresetRegistry(presets_dir))
    except PresetError as exc:
        assert "does not verify" in str(exc)
    else:
        assert not [key for key in params if key.startswith("h200-8gpu.")], params
    # the key cannot sign a new approval today either
    code, _, stderr = cli("presets", "approve", "h200-8gpu", "--key", str(engineer_key))
    (error,) = error_lines(stderr)
    assert code == 2 and re.match(
        rf"error: {re.escape(str(engineer_key))}: --key: allowed_signers does not admit this "
        r"key \(allowed_signers:\d+: key has expired: verify time ",
        error,
    ), error
