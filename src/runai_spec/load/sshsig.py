"""SSH signatures verified in-process: the SSHSIG format (`ssh-keygen -Y sign`) and its public keys."""

# What `ssh-keygen -Y verify` does, in this process (verify_sshsig, and AllowedSigners in
# allowed_signers.py): the SSHSIG blob as OpenSSH's PROTOCOL.sshsig lays it out, the signature
# checked with the `cryptography` package (Ed25519, ECDSA P-256/384/521, RSA with
# rsa-sha2-256/512), and allowed_signers read as ssh-keygen 9.x reads it (sshsig.c: principals
# as match.c patterns, `namespaces=`, `valid-after=`/`valid-before=` at a given time as
# `-Overify-time` would, `cert-authority`).
# What is not verified in-process (certificates, security keys, DSA) is refused, never handed to
# another verifier.

import base64
import binascii
import hashlib
import importlib
import re
from pathlib import Path
from typing import Any

from ..errors import PresetError
from ..records import Record

ALLOWED_SIGNERS_FILE = "allowed_signers"
SIGNATURE_BEGIN = "-----BEGIN SSH SIGNATURE-----"
SIGNATURE_END = "-----END SSH SIGNATURE-----"
ARMOR = re.compile(rf"^{SIGNATURE_BEGIN}\n[A-Za-z0-9+/=\n]+\n{SIGNATURE_END}\n?$")


class SignatureError(PresetError):
    """An approval whose signature is missing, malformed or does not verify."""


def _plain_file(path: Path, field: str) -> None:
    if path.is_symlink() or not path.is_file():
        raise SignatureError("no such plain file", file=str(path), field=field)


MAGIC = b"SSHSIG"
SIG_VERSION = 1
HASH_ALGORITHMS = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}  # sshsig.c HASHALG_ALLOWED
RSA_SIGNATURE_HASHES = {b"rsa-sha2-256": "sha256", b"rsa-sha2-512": "sha512"}  # RSA_SIGN_ALLOWED
RSA_MIN_BITS = 1024  # sshkey.c SSH_RSA_MINIMUM_MODULUS_SIZE
RSA_MAX_BITS = 16384  # SSHBUF_MAX_BIGNUM
ECDSA_CURVES = {"nistp256": "sha256", "nistp384": "sha384", "nistp521": "sha512"}
# the type names sshkey_read accepts at the start of a key, for the key types verified here
KEY_NAMES = {
    "ssh-ed25519": "ssh-ed25519",
    "ssh-rsa": "ssh-rsa",
    "rsa-sha2-256": "ssh-rsa",
    "rsa-sha2-512": "ssh-rsa",
    **{f"ecdsa-sha2-{curve}": f"ecdsa-sha2-{curve}" for curve in ECDSA_CURVES},
}


class Invalid(Exception):
    """Why a signature does not verify (the reason shown in the SignatureError)."""


class _Reader:
    """RFC 4251 section 5 wire types, read from the front of DATA (sshbuf_get_*)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, size: int) -> bytes:
        if size > len(self.data) - self.at:
            raise Invalid("invalid format (truncated)")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def string(self) -> bytes:
        return self.take(self.u32())

    def cstring(self) -> bytes:
        """A string holding no NUL but, maybe, one at its end, which ends it as in C
        (sshbuf_get_cstring)."""
        value = self.string()
        if b"\0" in value[:-1]:
            raise Invalid("invalid format (a NUL inside a string)")
        return value[:-1] if value.endswith(b"\0") else value

    def mpint(self) -> int:
        """A non-negative mpint, leading zeros allowed (sshbuf_get_bignum2_bytes_direct)."""
        value = self.string()
        if len(value) > RSA_MAX_BITS // 8 + 1:
            raise Invalid("invalid format (a number too large)")
        if value and value[0] & 0x80:
            raise Invalid("invalid format (a negative number)")
        return int.from_bytes(value, "big")

    def end(self) -> None:
        if self.at != len(self.data):
            raise Invalid("invalid format (trailing data)")


def _crypto(name: str) -> Any:
    """cryptography.hazmat.primitives.NAME, imported when first needed, only the key type's
    own module (its Rust bindings are most of a verification's cost in a fresh process)."""
    try:
        return importlib.import_module(f"cryptography.hazmat.primitives.{name}")
    except ImportError:  # pragma: no cover - a dependency of runai-spec
        raise SignatureError(
            "the cryptography package is not installed; signed approvals need it to verify",
            field="signature",
            hint="reinstall runai-spec (pip install runai-spec) in this environment",
        ) from None


# Records here are records.Record (NamedTuples), not frozen dataclasses: a frozen dataclass
# costs every start-up ~4 M instructions to define (its methods compiled from generated text), a
# record ~0.5 M; the approvals are verified on every run (issue 29).
class PublicKey(Record):
    """A plain (not certificate) public key of a type verified here; equal keys compare
    equal (sshkey_equal), whatever leading zeros their numbers were written with."""

    kind: str  # ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa
    material: tuple[bytes | int, ...]  # ed25519: (pk,); ecdsa: (Q,); rsa: (e, n)

    @classmethod
    def from_blob(cls, blob: bytes) -> "PublicKey":
        """The key in BLOB (sshkey_from_blob: the whole blob, nothing after it)."""
        reader = _Reader(blob)
        kind = reader.cstring().decode("latin-1")
        if kind == "ssh-ed25519":
            point = reader.string()
            if len(point) != 32:
                raise Invalid("invalid format (an Ed25519 key of the wrong size)")
            key = cls(kind, (point,))
        elif kind.startswith("ecdsa-sha2-") and kind[11:] in ECDSA_CURVES:
            if reader.cstring().decode("latin-1") != kind[11:]:
                raise Invalid("invalid format (the curve is not the key type's)")
            point = reader.string()
            if not point.startswith(b"\x04"):  # sshbuf_get_eckey: uncompressed points only
                raise Invalid("invalid format (an ECDSA point that is not uncompressed)")
            key = cls(kind, (point,))
        elif kind == "ssh-rsa":
            e, n = reader.mpint(), reader.mpint()
            if not RSA_MIN_BITS <= n.bit_length() <= RSA_MAX_BITS:
                raise Invalid(
                    f"RSA key of {n.bit_length()} bits (OpenSSH takes {RSA_MIN_BITS} to {RSA_MAX_BITS})"
                )
            key = cls(kind, (e, n))
        else:
            raise Invalid(
                f"key type {kind!r} is not verified here (plain ssh-ed25519, "
                "ecdsa-sha2-nistp256/384/521 and ssh-rsa keys are; certificates, "
                "security keys and DSA are refused)"
            )
        reader.end()
        key.crypto_key()  # a point that is on no curve, an RSA exponent no one signs with
        return key

    def crypto_key(self) -> Any:
        try:
            if self.kind == "ssh-ed25519":
                ed25519 = _crypto("asymmetric.ed25519")
                return ed25519.Ed25519PublicKey.from_public_bytes(self.material[0])
            if self.kind == "ssh-rsa":
                e, n = self.material
                return _crypto("asymmetric.rsa").RSAPublicNumbers(int(e), int(n)).public_key()
            ec = _crypto("asymmetric.ec")
            curve = {"nistp256": ec.SECP256R1, "nistp384": ec.SECP384R1, "nistp521": ec.SECP521R1}[
                self.kind[11:]
            ]()
            point = self.material[0]
            assert isinstance(point, bytes)
            return ec.EllipticCurvePublicKey.from_encoded_point(curve, point)
        except ValueError as exc:
            raise Invalid(f"invalid {self.kind} key ({exc})") from None

    def verify(self, signature: bytes, data: bytes) -> None:
        """Invalid unless SIGNATURE (the SSH signature encoding) is this key's of DATA
        (sshkey_verify: ssh_ed25519_verify, ssh_ecdsa_verify, ssh_rsa_verify)."""
        from cryptography.exceptions import InvalidSignature

        reader = _Reader(signature)
        sigtype = reader.cstring()
        raw = reader.string()
        reader.end()
        key = self.crypto_key()
        try:
            if self.kind == "ssh-ed25519":
                if sigtype != b"ssh-ed25519" or len(raw) != 64:
                    raise Invalid("not an Ed25519 signature")
                key.verify(raw, data)
            elif self.kind == "ssh-rsa":
                # sshsig_wrap_verify: rsa-sha2-512 or rsa-sha2-256, never SHA-1's ssh-rsa
                algorithm = RSA_SIGNATURE_HASHES.get(sigtype)
                if algorithm is None:
                    raise Invalid(f"unsupported RSA signature algorithm {sigtype!r}")
                size = (int(self.material[1]).bit_length() + 7) // 8
                if len(raw) > size:
                    raise Invalid("RSA signature longer than the key")
                hashes, padding = _crypto("hashes"), _crypto("asymmetric.padding")
                digest = hashes.SHA256() if algorithm == "sha256" else hashes.SHA512()
                key.verify(raw.rjust(size, b"\0"), data, padding.PKCS1v15(), digest)
            else:
                if sigtype != self.kind.encode():
                    raise Invalid("not a signature of this ECDSA key type")
                inner = _Reader(raw)
                r, s = inner.mpint(), inner.mpint()
                inner.end()
                hashes, ec = _crypto("hashes"), _crypto("asymmetric.ec")
                curve_hash = {
                    "sha256": hashes.SHA256(),
                    "sha384": hashes.SHA384(),
                    "sha512": hashes.SHA512(),
                }[ECDSA_CURVES[self.kind[11:]]]
                der = _crypto("asymmetric.utils").encode_dss_signature(r, s)
                key.verify(der, data, ec.ECDSA(curve_hash))
        except InvalidSignature:
            raise Invalid("signature verification failed") from None

    def openssh(self) -> str:
        """The key as an allowed_signers line writes it (`TYPE BASE64`)."""
        out = [_ssh_string(self.kind.encode())]
        if self.kind == "ssh-ed25519":
            out.append(_ssh_string(bytes(self.material[0])))
        elif self.kind == "ssh-rsa":
            out += [_ssh_mpint(int(value)) for value in self.material]
        else:
            out += [_ssh_string(self.kind[11:].encode()), _ssh_string(bytes(self.material[0]))]
        return f"{self.kind} {base64.b64encode(b''.join(out)).decode()}"


def _ssh_string(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


def _ssh_mpint(value: int) -> bytes:
    """A non-negative mpint: a leading zero byte where the top bit is set, none for 0."""
    return _ssh_string(value.to_bytes((value.bit_length() + 8) // 8, "big") if value else b"")


_NO_SPACE = str.maketrans("", "", " \t\n\v\f\r")  # C's isspace: what b64_pton skips


def _b64(text: str) -> bytes:
    """Base64 with white space anywhere, as b64_pton reads it; Invalid otherwise. b64_pton
    (openbsd-compat/base64.c) takes only the canonical form: whole quanta, exactly the
    padding they need, no `=` after a whole quantum and no bits set in the last character's
    unused part; Python's decoder takes more (`QUJD==`), so the text must be what the bytes
    encode to (issue 41 item 7)."""
    plain = text.translate(_NO_SPACE)
    try:
        data = base64.b64decode(plain, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("invalid base64") from None
    if base64.b64encode(data).decode("ascii") != plain:
        raise Invalid("invalid base64 (not its canonical form: padding or trailing bits)")
    return data


def dearmor(signature: str) -> bytes:
    """The SSHSIG blob of an armored signature, read as sshsig_dearmor reads it (OpenSSH
    sshsig.c; PROTOCOL.sshsig section 1): the text starts with the BEGIN line and its newline,
    the body is everything up to the first END marker (white space anywhere in it), and what
    follows the END marker is dropped."""
    head = SIGNATURE_BEGIN + "\n"
    if not signature.startswith(head) or SIGNATURE_END not in signature[len(head) :]:
        raise SignatureError("not an SSH signature (-----BEGIN SSH SIGNATURE-----)", field="signature")
    body = signature[len(head) : signature.index(SIGNATURE_END, len(head))]
    try:
        return _b64(body)
    except Invalid:
        raise SignatureError("not an SSH signature (its base64 does not decode)", field="signature") from None


class Sshsig(Record):
    """The fields of an SSHSIG blob (PROTOCOL.sshsig section 2)."""

    key: PublicKey
    namespace: bytes
    reserved: bytes
    hash_algorithm: str
    signature: bytes

    @classmethod
    def parse(cls, blob: bytes) -> "Sshsig":
        """sshsig_parse_preamble, then sshsig_wrap_verify's reads: every field, nothing
        after the last one; a version above 1 is refused."""
        reader = _Reader(blob)
        if reader.take(len(MAGIC)) != MAGIC:
            raise Invalid("invalid format (no SSHSIG preamble)")
        version = reader.u32()
        if version > SIG_VERSION:
            raise Invalid(f"signature version {version} is larger than supported version {SIG_VERSION}")
        key_blob = reader.string()
        namespace = reader.cstring()
        reserved = reader.string()
        algorithm = reader.cstring().decode("latin-1")
        signature = reader.string()
        reader.end()
        if algorithm not in HASH_ALGORITHMS:
            raise Invalid(f"unsupported hash algorithm {algorithm!r}")
        return cls(PublicKey.from_blob(key_blob), namespace, reserved, algorithm, signature)


def verify_sshsig(signature: str, message: bytes, namespace: str) -> PublicKey:
    """The key that made SIGNATURE (armored) of MESSAGE in NAMESPACE; Invalid (or a
    SignatureError for text that is no signature) otherwise. Which principal may use the
    key is AllowedSigners' question (ssh-keygen -Y verify: sshsig_verify_fd, then
    sshsig_check_allowed_keys)."""
    sig = Sshsig.parse(dearmor(signature))
    if sig.namespace != namespace.encode():
        raise Invalid("namespace does not match")
    # the signed data is built with an empty reserved field, whatever the blob carries
    # (sshsig_wrap_verify), as PROTOCOL.sshsig section 3 lays it out
    digest = HASH_ALGORITHMS[sig.hash_algorithm](message).digest()
    signed = (
        MAGIC
        + _ssh_string(namespace.encode())
        + _ssh_string(b"")
        + _ssh_string(sig.hash_algorithm.encode())
        + _ssh_string(digest)
    )
    sig.key.verify(sig.signature, signed)
    return sig.key


def signer_key(signature: str) -> PublicKey:
    """The public key inside SIGNATURE, not verified (sshsig_get_pubkey)."""
    try:
        return Sshsig.parse(dearmor(signature)).key
    except Invalid as exc:
        raise SignatureError(
            f"not an SSH signature of a key verified here ({exc})", field="signature"
        ) from None
