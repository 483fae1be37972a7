"""The former name of explain.py: cli.py imports explain_workload from here until it moves."""

from __future__ import annotations

from .explain import ExplainResult as ExplainResult
from .explain import FieldOrigin as FieldOrigin
from .explain import explain_workload as explain_workload
from .plan import Origin as Origin
