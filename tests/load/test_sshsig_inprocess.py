"""The in-process SSHSIG verifier (sshsig.verify_sshsig, allowed_signers.AllowedSigners) against
`ssh-keygen -Y verify` / `-Y find-principals` on the same signatures and allowed_signers
files: good and tampered, Ed25519, ECDSA P-256/384/521 and RSA keys (issue 29, item 3).
Every verdict is compared, never assumed: a disagreement either way fails."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runai_spec.errors import InputError
from runai_spec.load import allowed_signers, signing, sshsig
from runai_spec.load.allowed_signers import AllowedSigners
from runai_spec.load.sshsig import Invalid, PublicKey

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")

KEY_TYPES = {
    "ed25519": ["-t", "ed25519"],
    "ecdsa256": ["-t", "ecdsa", "-b", "256"],
    "ecdsa384": ["-t", "ecdsa", "-b", "384"],
    "ecdsa521": ["-t", "ecdsa", "-b", "521"],
    "rsa": ["-t", "rsa", "-b", "2048"],
}
PRINCIPAL = "alice@scc.example.org"
MESSAGE = signing.Statement("h200-8gpu.yaml", "0" * 64, PRINCIPAL, "2026-12-02").text()
VERIFY_AT = "20261202"
# SSHSIG_EXAMPLES=2000 for a long, random run (each example runs ssh-keygen)
EXAMPLES = int(os.environ.get("SSHSIG_EXAMPLES", "0"))
SETTINGS = settings(
    max_examples=EXAMPLES or 60,
    deadline=None,
    derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def keygen(*args: str, data: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh-keygen", *args],
        input=data,
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
        check=False,
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, str]]:
    """Each key type: the private key, its `TYPE BASE64` and a signature of MESSAGE."""
    folder = tmp_path_factory.mktemp("sshsig-keys")
    found = {}
    for name, args in KEY_TYPES.items():
        key = folder / name
        assert keygen("-q", *args, "-N", "", "-C", name, "-f", str(key)).returncode == 0
        public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        signed = keygen("-Y", "sign", "-n", signing.NAMESPACE, "-f", str(key), data=MESSAGE)
        assert signed.returncode == 0, signed.stderr
        found[name] = (key, public, signed.stdout)
    return found


def armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    lines = [text[i : i + 70] for i in range(0, len(text), 70)]
    return "\n".join([sshsig.SIGNATURE_BEGIN, *lines, sshsig.SIGNATURE_END]) + "\n"


def ssh_keygen_verdict(
    folder: Path,
    signers: str,
    signature: str,
    message: str,
    principal: str = PRINCIPAL,
    namespace: str = signing.NAMESPACE,
    at: str = VERIFY_AT,
) -> bool:
    (folder / "signers").write_text(signers, encoding="latin-1")
    (folder / "sig").write_text(signature, encoding="latin-1")
    done = keygen(
        "-Y",
        "verify",
        "-f",
        str(folder / "signers"),
        "-I",
        principal,
        "-n",
        namespace,
        "-s",
        str(folder / "sig"),
        f"-Overify-time={at}",
        data=message,
    )
    return done.returncode == 0


def in_process_verdict(
    signers: str,
    signature: str,
    message: str,
    principal: str = PRINCIPAL,
    namespace: str = signing.NAMESPACE,
    at: str = VERIFY_AT,
) -> bool:
    try:
        key = sshsig.verify_sshsig(signature, message.encode(), namespace)
        seconds = allowed_signers.parse_absolute_time(at)
        if not seconds:  # ssh-keygen refuses such a -Overify-time
            return False
        AllowedSigners.parse(signers.encode("latin-1")).check(key, principal, namespace, seconds)
    except (Invalid, InputError):
        return False
    return True


def both(tmp_path: Path, signers: str, signature: str, message: str = MESSAGE, **kwargs: str) -> bool:
    ours = in_process_verdict(signers, signature, message, **kwargs)
    theirs = ssh_keygen_verdict(tmp_path, signers, signature, message, **kwargs)
    assert ours == theirs, (ours, theirs, signers, signature, kwargs)
    return ours


@pytest.mark.parametrize("kind", KEY_TYPES)
def test_a_good_signature_of_each_key_type_verifies_in_both(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], kind: str
) -> None:
    _, public, signature = keys[kind]
    signers = f"{PRINCIPAL} {public}\n"
    assert both(tmp_path, signers, signature)
    assert not both(tmp_path, signers, signature, MESSAGE.replace("2026-12-02", "2026-12-03"))
    assert not both(tmp_path, signers, signature, namespace="git")
    assert not both(tmp_path, signers, signature, principal="bob@scc.example.org")
    other = next(k for k in keys if k != kind)
    assert not both(tmp_path, f"{PRINCIPAL} {keys[other][1]}\n", signature)
    assert not both(tmp_path, signers, keys[other][2])  # another key's signature


@pytest.mark.parametrize("kind", KEY_TYPES)
@SETTINGS
@given(data=st.data())
def test_a_tampered_signature_gets_the_same_verdict_in_both(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], kind: str, data: st.DataObject
) -> None:
    """Any byte of the blob changed, the blob cut or lengthened: both refuse (or, where
    the change is one OpenSSH ignores, such as the reserved field's content, both accept)."""
    _, public, signature = keys[kind]
    blob = bytearray(sshsig.dearmor(signature))
    how = data.draw(st.sampled_from(["flip", "cut", "append", "set"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del blob[data.draw(st.integers(0, len(blob) - 1)) :]
    elif how == "append":
        blob += data.draw(st.binary(min_size=1, max_size=8))
    else:
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
    verdict = both(tmp_path, f"{PRINCIPAL} {public}\n", armor(bytes(blob)))
    event(f"verifies: {verdict}")


def _field_offsets(blob: bytes) -> dict[str, tuple[int, int]]:
    """Where each string of the SSHSIG blob lies: name -> (start of its length, end)."""
    at, found = 10, {}
    for name in ("publickey", "namespace", "reserved", "hash_algorithm", "signature"):
        size = int.from_bytes(blob[at : at + 4], "big")
        found[name] = (at, at + 4 + size)
        at += 4 + size
    return found


def _with_field(blob: bytes, name: str, value: bytes) -> bytes:
    start, end = _field_offsets(blob)[name]
    return blob[:start] + len(value).to_bytes(4, "big") + value + blob[end:]


@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
@pytest.mark.parametrize(
    "change",
    [
        ("version", 0),
        ("version", 2),
        ("magic", b"SSHSIH"),
        ("reserved", b"tag"),
        ("namespace", b"git"),
        ("namespace", b"runai-spec\0"),
        ("hash_algorithm", b"sha384"),
        ("hash_algorithm", b"sha256"),
        ("hash_algorithm", b"SHA512"),
    ],
)
def test_each_field_of_the_blob_is_read_as_ssh_keygen_reads_it(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], kind: str, change: tuple[str, bytes | int]
) -> None:
    _, public, signature = keys[kind]
    blob = sshsig.dearmor(signature)
    name, value = change
    if name == "version":
        assert isinstance(value, int)
        blob = blob[:6] + value.to_bytes(4, "big") + blob[10:]
    elif name == "magic":
        assert isinstance(value, bytes)
        blob = value + blob[6:]
    else:
        assert isinstance(value, bytes)
        blob = _with_field(blob, name, value)
    both(tmp_path, f"{PRINCIPAL} {public}\n", armor(blob))


@pytest.mark.parametrize("hashalg", ["sha256", "sha512"])
@pytest.mark.parametrize("kind", ["ed25519", "ecdsa384", "rsa"])
def test_both_hash_algorithms_verify(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], kind: str, hashalg: str
) -> None:
    key, public, _ = keys[kind]
    signed = keygen(
        "-Y", "sign", "-n", signing.NAMESPACE, "-f", str(key), "-O", f"hashalg={hashalg}", data=MESSAGE
    )
    assert signed.returncode == 0, signed.stderr
    assert both(tmp_path, f"{PRINCIPAL} {public}\n", signed.stdout)


def _rsa_signature(key: Path, sigtype: str, hashalg: str = "sha512") -> str:
    """An SSHSIG of MESSAGE by the RSA KEY with signature algorithm SIGTYPE (ssh-keygen
    always signs rsa-sha2-512), built with cryptography's own signing."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    private = serialization.load_ssh_private_key(key.read_bytes(), None)
    assert isinstance(private, rsa.RSAPrivateKey)
    numbers = private.public_key().public_numbers()
    key_blob = base64.b64decode(PublicKey("ssh-rsa", (numbers.e, numbers.n)).openssh().split()[1])

    def string(value: bytes) -> bytes:
        return len(value).to_bytes(4, "big") + value

    digest = hashes.Hash(hashes.SHA512() if hashalg == "sha512" else hashes.SHA256())
    digest.update(MESSAGE.encode())
    signed = (
        b"SSHSIG"
        + string(signing.NAMESPACE.encode())
        + string(b"")
        + string(hashalg.encode())
        + string(digest.finalize())
    )
    algorithm = {"rsa-sha2-256": hashes.SHA256(), "rsa-sha2-512": hashes.SHA512(), "ssh-rsa": hashes.SHA1()}[
        sigtype
    ]
    raw = private.sign(signed, padding.PKCS1v15(), algorithm)
    blob = (
        b"SSHSIG"
        + (1).to_bytes(4, "big")
        + string(key_blob)
        + string(signing.NAMESPACE.encode())
        + string(b"")
        + string(hashalg.encode())
        + string(string(sigtype.encode()) + string(raw))
    )
    return armor(blob)


@pytest.mark.parametrize(
    ("sigtype", "verifies"), [("rsa-sha2-256", True), ("rsa-sha2-512", True), ("ssh-rsa", False)]
)  # SHA-1: refused
def test_rsa_signature_algorithms(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], sigtype: str, verifies: bool
) -> None:
    key, public, _ = keys["rsa"]
    assert both(tmp_path, f"{PRINCIPAL} {public}\n", _rsa_signature(key, sigtype)) == verifies


def test_the_key_written_back_is_the_key_read(keys: dict[str, tuple[Path, str, str]]) -> None:
    for _, public, signature in keys.values():
        assert sshsig.signer_key(signature).openssh() == public


# -- allowed_signers: lines drawn at random, read by both -----------------------------------

PATTERNS = st.sampled_from(
    [
        PRINCIPAL,
        "*@scc.example.org",
        "alice*",
        "?lice@scc.example.org",
        "bob@scc.example.org",
        f"!{PRINCIPAL}",
        "*",
        "",
        "alice@*.org",
        f'"{PRINCIPAL}"',
        "ALICE@scc.example.org",
    ]
)
TIMES = st.sampled_from(
    [
        "20261201",
        "20261202",
        "20261203",
        "202612020000",
        "202612012359",
        "20261202000001",
        "20261202Z",
        "20261201utc",
        "20270231",
        "2026120",
        "19700101Z",
        "20261301",
        "20261200",
        "202612022400",
        "20261202235960",
        "20261202000061",
        "20261202000062",
        "abcdefgh",
        "",
        "20261202 ",
    ]
)
NAMESPACES = st.sampled_from(
    [
        "runai-spec",
        "git",
        "runai-*",
        "git,runai-spec",
        "!runai-spec",
        "*,!runai-spec",
        "runai-spec,file",
        "RUNAI-SPEC",
        "",
    ]
)


@st.composite
def option_lists(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(
            st.sampled_from(
                ["valid-after", "valid-before", "namespaces", "cert-authority", "VALID-BEFORE", "unknown"]
            )
        )
        if kind == "cert-authority":
            parts.append(kind)
        elif kind == "unknown":
            parts.append(draw(st.sampled_from(["no-touch-required", 'foo="bar"', ""])))
        else:
            value = draw(NAMESPACES if kind == "namespaces" else TIMES)
            quote = draw(st.sampled_from(['"', '"', '"', ""]))
            parts.append(f"{kind}={quote}{value}{quote}")
    return ",".join(parts)


@st.composite
def signer_files(draw: st.DrawFn, keys: dict[str, tuple[Path, str, str]]) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        principals = ",".join(draw(st.lists(PATTERNS, min_size=1, max_size=3)))
        options = draw(option_lists())
        public = keys[draw(st.sampled_from(["ed25519", "ed25519", "rsa", "ecdsa256"]))][1]
        spacing = draw(st.sampled_from([" ", " ", "\t", "  "]))
        line = spacing.join(part for part in (principals, options, public) if part)
        if draw(st.booleans()):
            line += " a comment"
        lines.append(draw(st.sampled_from(["", "", "  ", "# "])) + line)
    newline = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    text = newline.join(lines)
    return text + (newline if draw(st.booleans()) else "")


@SETTINGS
@given(data=st.data())
def test_any_allowed_signers_file_gets_the_same_verdict_in_both(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], data: st.DataObject
) -> None:
    signers = data.draw(signer_files(keys))
    kind = data.draw(st.sampled_from(["ed25519", "rsa"]))
    at = data.draw(st.sampled_from(["20261202", "20261201", "20261203", "202612020001", "20261202Z"]))
    event(f"verifies: {both(tmp_path, signers, keys[kind][2], at=at)}")


@SETTINGS
@given(data=st.data())
def test_find_principals_finds_what_ssh_keygen_finds(
    tmp_path: Path, keys: dict[str, tuple[Path, str, str]], data: st.DataObject
) -> None:
    signers = data.draw(signer_files(keys))
    kind = data.draw(st.sampled_from(["ed25519", "rsa"]))
    (tmp_path / "signers").write_text(signers)
    (tmp_path / "sig").write_text(keys[kind][2])
    done = keygen(
        "-Y",
        "find-principals",
        "-s",
        str(tmp_path / "sig"),
        "-f",
        str(tmp_path / "signers"),
        f"-Overify-time={VERIFY_AT}",
    )
    theirs = done.stdout.splitlines() if done.returncode == 0 else []
    seconds = allowed_signers.parse_absolute_time(VERIFY_AT)
    assert seconds
    ours, _ = AllowedSigners.parse(signers.encode()).principals(sshsig.signer_key(keys[kind][2]), seconds)
    assert ours == theirs, (signers, ours, theirs)
    event(f"principals found: {bool(ours)}")


@pytest.mark.parametrize(
    "text",
    [
        "20261202",
        "20261202Z",
        "20270231",
        "202612312359",
        "20261231235961",
        "20380119031408",
        "99991231235959Z",
        "19700101000001Z",
        "20261202UTC",
    ],
)
def test_times_are_read_as_ssh_keygen_reads_them(
    tmp_path: Path, text: str, keys: dict[str, tuple[Path, str, str]]
) -> None:
    """A window bound one second either side of the time read here: ssh-keygen agrees on
    which side the approval falls (the approval's time drawn from the bound itself)."""
    seconds = allowed_signers.parse_absolute_time(text)
    assert seconds
    public, signature = keys["ed25519"][1], keys["ed25519"][2]
    import datetime as dt

    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    at = moment.strftime("%Y%m%d%H%M%S")
    for options, verifies in ((f'valid-after="{text}"', True), (f'valid-before="{text}"', True)):
        assert both(tmp_path, f"{PRINCIPAL} {options} {public}\n", signature, at=at) == verifies
    before = (moment - dt.timedelta(seconds=1)).strftime("%Y%m%d%H%M%S")
    assert not both(tmp_path, f'{PRINCIPAL} valid-after="{text}" {public}\n', signature, at=before)


def test_a_certificate_or_a_security_key_signature_is_refused_in_process() -> None:
    """What is not verified here is refused (never handed to ssh-keygen)."""
    for kind in ("ssh-ed25519-cert-v01@openssh.com", "sk-ssh-ed25519@openssh.com", "ssh-dss"):
        blob = len(kind).to_bytes(4, "big") + kind.encode() + bytes(40)
        with pytest.raises(Invalid, match="is not verified here"):
            PublicKey.from_blob(blob)
