"""What looks like a credential, and how it is masked, for every output."""

from __future__ import annotations

import re
from typing import Any

from .loading import looks_secret

MASK = "***"

# Whole PEM blocks (keys and certificates), also cut short, and their base64 form
# ("-----BEGIN" is "LS0tLS1CRUdJTi" in base64: what kubeconfig `*-data` fields hold).
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----(?:.*?-----END [A-Z0-9 ]+-----|.*)", re.S)
_PEM_B64 = re.compile(r"LS0tLS1[A-Za-z0-9+/=]*")
# `key: value`, `"key": "value"`, `key=value` where the key names a credential.
_KEYED = re.compile(
    r"(?i)(\b(?:[\w-]*[-_])?(?:token|password|passwd|secret|api[-_]?key|apikey|auth|"
    r"authorization|credentials?|client-key-data|client-certificate-data|"
    r"certificate-authority-data|private[-_]?key)[\"']?\s*[:=]\s*[\"']?)"
    r"((?:bearer|basic)\s+)?(?!\*\*\*)[^\s\"',;}]+")
_SCHEME = re.compile(r"(?i)\b(bearer|basic)\s+(?!\*\*\*)[A-Za-z0-9._~+/=-]+")
_SHAPES = re.compile(
    r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"  # JWT (service-account tokens)
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}"                      # AWS access key id
    r"|\bgh[pousr]_[A-Za-z0-9]{36,}|\bgithub_pat_[A-Za-z0-9_]{22,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bhf_[A-Za-z0-9]{30,}|\bsk-[A-Za-z0-9_-]{20,}")
_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@")
# One-line server and library text only: a long unbroken base64-like run that mixes upper
# and lower case and digits, as random tokens do (API paths, label keys and hex digests
# do not). Too broad for manifests.
_LONG_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{40,}")


def _random_looking(match: re.Match[str]) -> str:
    run = match.group(0)
    mixed = (any(c.isupper() for c in run) and any(c.islower() for c in run)
             and any(c.isdigit() for c in run))
    return MASK if mixed else run


# Every pattern above needs one of these: one search tells most strings apart at once.
_HINTS = re.compile(r"(?i)-----BEGIN|LS0tLS1|eyJ|bearer|basic|://|token|passw|secret|api.?key|"
                    r"auth|credential|-data|private|AKIA|ASIA|gh[pousr]_|github_pat_|glpat-|"
                    r"xox|hf_|sk-")


def mask_text(text: str, *, runs: bool = False) -> str:
    """TEXT with every credential-shaped part replaced by `***`: PEM keys and certificates
    (also base64), `token:`/`password=`/`auth:`/`client-key-data:` values, bearer and basic
    credentials, JWTs, known token formats, URL passwords; with `runs`, also every long
    base64-like run (for one-line messages, never for manifests)."""
    if runs:
        text = _LONG_RUN.sub(_random_looking, text)
    if not _HINTS.search(text):
        return text
    text = _PEM.sub(MASK, text)
    text = _PEM_B64.sub(MASK, text)
    text = _KEYED.sub(lambda m: m.group(1) + MASK, text)
    text = _SCHEME.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _SHAPES.sub(MASK, text)
    return _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)


def looks_credential(text: str) -> bool:
    """True when mask_text would change TEXT."""
    return mask_text(text) != text


def mask_object(value: Any) -> Any:
    """A copy of a parsed object (a manifest, a live object) with credentials masked: the
    values of secret-named variables (`{name: HF_TOKEN, value: ...}` and mapping keys such as
    `password`) and every credential-shaped part of any string (keys, certificates, tokens)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        named = value.get("name")
        for key, item in value.items():
            secret_value = key == "value" and isinstance(named, str) and looks_secret(named)
            secret_key = (isinstance(key, str) and looks_secret(key)
                          and not isinstance(item, dict | list))
            out[key] = MASK if secret_value or secret_key else mask_object(item)
        return out
    if isinstance(value, list):
        return [mask_object(item) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value
