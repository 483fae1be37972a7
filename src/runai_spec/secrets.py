"""What looks like a credential, and how it is masked, for every output."""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Any

MASK = "***"

# Whole PEM blocks (keys and certificates), also cut short, and their base64 form
# ("-----BEGIN" is "LS0tLS1CRUdJTi" in base64: what kubeconfig `*-data` fields hold).
_PEM = r"(?s)-----BEGIN [A-Z0-9 ]+-----(?:.*?-----END [A-Z0-9 ]+-----|.*)"
_PEM_B64 = r"LS0tLS1[A-Za-z0-9+/=]*"
# `key: value`, `"key": "value"`, `key=value` where the key names a credential: the key
# alone or after a `-`/`_` prefix (`HF_TOKEN`, `id-token`; never `tokenizer`).
_KEY_SEP = r"(?<![\w-])([\w-]++)[\"']?[ \t]*[:=][ \t]*[\"']?"
_VALUE = r"(?i:(?:bearer|basic)[ \t]+)?[^\s\"',;}]+"
_KEY_WORDS = (
    "token",
    "password",
    "passwd",
    "secret",
    "apikey",
    "api-key",
    "api_key",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "client-key-data",
    "client-certificate-data",
    "certificate-authority-data",
    "privatekey",
    "private-key",
    "private_key",
)


def _secret_key(key: str) -> bool:
    key = key.lower()
    return any(key == w or key.endswith(("-" + w, "_" + w)) for w in _KEY_WORDS)


def _mask_keyed(text: str, m: _Masking) -> str:
    out: list[str] = []
    done = 0
    for match in m.key_sep.finditer(text):
        if match.start() < done or not _secret_key(match.group(1)):
            continue
        value = m.value.match(text, match.end())
        if value is None or value.group(0) == MASK:
            continue
        out += [text[done : match.end()], MASK]
        done = value.end()
    return "".join(out) + text[done:] if out else text


_SCHEME = r"(?i)\b(bearer|basic)\s+(?!\*\*\*)[A-Za-z0-9._~+/=-]+"

# --- credential shapes: written once, for masking and for validate's `secret-env` rule ---
# (which the admission policy translates into CEL)

# Known token formats, each by its literal start (masking and validate scan for it first:
# each shape must contain its key).
TOKEN_SHAPES: dict[str, str] = {
    "AKIA": r"AKIA[0-9A-Z]{16}",
    "ASIA": r"ASIA[0-9A-Z]{16}",  # AWS access key id
    "gh": r"gh[pousr]_[A-Za-z0-9]{36,}",  # GitHub (classic)
    "github_pat_": r"github_pat_[A-Za-z0-9_]{22,}",  # GitHub (fine-grained)
    "glpat-": r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    "xox": r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    "hf_": r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
    "sk-": r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI-style API keys
}
_B64URL = r"[A-Za-z0-9_-]"
# A JWT (service account tokens): masking hides any three parts after `eyJ`; validate refuses
# only a header and a payload that are both JSON objects (`eyJ` is base64 for `{"`).
_JWT_ANY = rf"eyJ{_B64URL}+\.{_B64URL}+\.{_B64URL}*"
JWT = rf"eyJ{_B64URL}{{8,}}\.eyJ{_B64URL}{{8,}}\.{_B64URL}*"
PRIVATE_KEY = r"-----BEGIN [A-Z ]*PRIVATE KEY-----"  # validate's; masking hides every PEM block
# A URL with user:password: its part up to the password, then the password.
URL_USER = r"[a-z][a-z0-9+.-]*://[^/\s:@]+:"
URL_PASSWORD = r"[^/\s@]+@"

_USERINFO = rf"(\b{URL_USER}){URL_PASSWORD}"
# validate: a value that holds any of them anywhere is a credential written as a plain value
# (the pattern; the admission policy writes it in CEL). Each shape, by a literal part that
# every match of it holds: a value without the part cannot match the shape (the policy reads
# a shape only where its part is there: a regular expression costs by its length).
SECRET_VALUE_SHAPES: tuple[tuple[str, str], ...] = (
    *TOKEN_SHAPES.items(),
    ("eyJ", JWT),
    ("-----BEGIN ", PRIVATE_KEY),
    ("://", URL_USER + URL_PASSWORD),
)
SECRET_VALUE = "|".join(shape for _, shape in SECRET_VALUE_SHAPES)
_VALUE_LITERALS = tuple(part for part, _ in SECRET_VALUE_SHAPES)
# One-line server and library text only: a long unbroken base64-like run that mixes upper
# and lower case and digits, as random tokens do (API paths, label keys and hex digests
# do not). Too broad for manifests.
_LONG_RUN = r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{40,}"


class _Masking:
    """The masking patterns above, compiled: on first use (_masking), since a command that
    masks nothing (render, validate) would otherwise compile them at every start (~10 M
    instructions: benchmarks/README.md, round 5)."""

    def __init__(self) -> None:
        self.pem = re.compile(_PEM)
        self.pem_b64 = re.compile(_PEM_B64)
        self.key_sep = re.compile(_KEY_SEP)
        self.value = re.compile(_VALUE)
        self.scheme = re.compile(_SCHEME)
        # each token format at a word start, found by its literal start (one fast scan each)
        self.shapes = {
            "eyJ": re.compile(_JWT_ANY),
            **{start: re.compile(rf"\b(?:{shape})") for start, shape in TOKEN_SHAPES.items()},
        }
        self.userinfo = re.compile(_USERINFO)
        self.long_run = re.compile(_LONG_RUN)


@cache
def _masking() -> _Masking:
    return _Masking()


def _random_looking(match: re.Match[str]) -> str:
    run = match.group(0)
    mixed = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
    return MASK if mixed else run


def mask_text(text: str, *, runs: bool = False) -> str:
    """TEXT with every credential-shaped part replaced by `***` (see _mask_text)."""
    if len(text) <= 256:  # names, images, labels: the same few, in every object of a diff
        return _mask_short(text, runs)
    return _mask_text(text, runs)


@lru_cache(maxsize=8192)
def _mask_short(text: str, runs: bool) -> str:
    return _mask_text(text, runs)


def _mask_text(text: str, runs: bool) -> str:
    """TEXT with every credential-shaped part replaced by `***`: PEM keys and certificates
    (also base64), `token:`/`password=`/`auth:`/`client-key-data:` values, bearer and basic
    credentials, JWTs, known token formats, URL passwords; with `runs`, also every long
    base64-like run (for one-line messages, never for manifests)."""
    m = _masking()
    if runs:
        text = m.long_run.sub(_random_looking, text)
    low = text.lower()  # each pattern runs only where its literal part occurs
    if "-----begin" in low:
        text = m.pem.sub(MASK, text)
    if "LS0tLS1" in text:
        text = m.pem_b64.sub(MASK, text)
    if any(word in low for word in _KEY_WORDS):
        text = _mask_keyed(text, m)
    if "bearer" in low or "basic" in low:
        text = m.scheme.sub(lambda found: f"{found.group(1)} {MASK}", text)
    for literal, shape in m.shapes.items():
        if literal in text:
            text = shape.sub(MASK, text)
    if "://" not in text:
        return text
    return m.userinfo.sub(lambda found: found.group(1) + MASK + "@", text)


# Words that name a credential in what is masked, beyond looks_secret's (which the
# `secret-env` rule reads too, so it stays narrow): DB_PASS, DB_PW, REGISTRY_AUTH, API_CREDS.
_NAME_WORDS = frozenset({"PASS", "PW", "AUTH", "CREDS", "COOKIE", "PASSPHRASE", "PASSWORD"})
# ...and last words that do with a word before them: SSH_KEY, MYSQL_PWD, tls.key, ssh-keys
# (never `key` alone as a mapping key, a toleration's or a selector's, nor camelCase such
# as `topologyKey`; the shell's own `PWD` stays visible).
_LAST_WORDS = frozenset({"KEY", "KEYS", "PWD", "PRIVKEY", "RSA", "DSA", "ECDSA", "ED25519"})
# a name's words: split at non-alphanumerics and at a lower-to-upper change (camelCase)
_WORD = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")


def secret_name(name: str, *, variable: bool = False) -> bool:
    """True when a value under this name (a variable's, with `variable`, or a mapping key's)
    is a credential: looks_secret's names, the credential keys of _KEY_WORDS
    (`auth`, `client-key-data`), and _NAME_WORDS / _LAST_WORDS."""
    if looks_secret(name) or _secret_key(name) or re.search(r"(?i)passw(or)?d", name):
        return True
    words = [w.upper() for w in _WORD.split(name) if w]
    if _NAME_WORDS.intersection(words):
        return True
    separated = variable or bool(re.search(r"[-_.]", name))
    return separated and len(words) >= 2 and words[-1] in _LAST_WORDS or (variable and words == ["KEY"])


def mask_object(value: Any) -> Any:
    """A copy of a parsed object (a manifest, a live object) with credentials masked: the
    values of secret-named variables (`{name: HF_TOKEN, value: ...}`, also DB_PASS,
    REGISTRY_AUTH, SSH_KEY) and mapping keys (`password`, `auth`, `client-key-data`; see
    secret_name) and every credential-shaped part of any string (keys, certificates, tokens)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        named = value.get("name")
        for key, item in value.items():
            named_secret = key == "value" and isinstance(named, str) and secret_name(named, variable=True)
            secret_key = isinstance(key, str) and secret_name(key) and not isinstance(item, dict | list)
            out[key] = MASK if named_secret or secret_key else mask_object(item)
        return out
    if isinstance(value, list):
        return [mask_object(item) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


SECRET_WORDS = {
    "TOKEN",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "PRIVATEKEY",
    "ACCESSKEY",
}


SECRET_PAIRS = {
    ("API", "KEY"),
    ("PRIVATE", "KEY"),
    ("ACCESS", "KEY"),
    ("SECRET", "KEY"),
    ("AUTH", "KEY"),
    ("CLIENT", "SECRET"),
}


@lru_cache(maxsize=4096)  # the same few names, on every object a diff masks
def looks_secret(name: str) -> bool:
    """True for variable names that name a credential (`HF_TOKEN`, `WANDB_API_KEY`), not for
    look-alikes such as `TOKENIZERS_PARALLELISM`, `MAX_NEW_TOKENS` or the shell's `PWD`."""
    upper = [w.upper() for w in _WORD.split(name) if w]
    return bool(SECRET_WORDS.intersection(upper)) or any(
        pair in SECRET_PAIRS for pair in zip(upper, upper[1:], strict=False)
    )


def secret_value(value: str) -> bool:
    """True for values shaped like a known token, key or password-bearing URL. The pattern
    (~2 M instructions to compile) only for a value holding one of their literal parts."""
    return any(part in value for part in _VALUE_LITERALS) and _secret_value_re().search(value) is not None


@cache
def _secret_value_re() -> re.Pattern[str]:
    return re.compile(SECRET_VALUE)
