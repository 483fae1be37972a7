"""The `pytorch` container's env as one list of Kubernetes EnvVar entries."""

from __future__ import annotations

from typing import Any

from .plan import Plan

EnvEntry = dict[str, Any]


def env_entries(plan: Plan) -> list[EnvEntry]:
    """PLAN's env entries, `{name, value}` or `{name, valueFrom}`: the downward API first (the
    kubelet expands `$(POD_NAME)` in a value only from variables listed before it), then the
    values, then the Secret references (never a value)."""
    return [
        *({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in plan.field_env),
        *({"name": name, "value": value} for name, value in plan.env),
        *(
            {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for name, secret, key in plan.secret_env
        ),
    ]
