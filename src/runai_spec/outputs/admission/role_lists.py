"""What a role's main container holds of the profile's, read by variables of that role.

A profile's arguments and variables are the only values of a job whose length a researcher
chooses, and a regular expression costs the API server by the text's length times its own:
so they are checked in variables of their role (`<prefix>g<n>`), which every family of a
preset reads (a variable is evaluated once, when first read): the arguments in one variable
per part of their rule (rules.arg_parts: each part's patterns cost a tenth of the
per-expression limit on the longest command validate accepts), the variables in one
(benchmarks/bench_policy_cost.py measures it on the longest `env` validate accepts).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...facts.kubeflow import CONTAINER
from .rules import RULES, RuleContext, arg_parts, balanced, lit

ARG_INDEXES = "variables.argIndexes"
ROLE = "\0ROLE\0"  # a role's name in a message, filled in by the loop over the roles
# The variables' names, and their value where the policy does not evaluate them (a list).
ROLE_LIST = re.compile(r"g[0-9]+$")
ROLE_LIST_DEFAULT = "[]"
MAIN_PLACE = ("template", "spec", "containers", ("name", CONTAINER))
MAIN_FIELD = re.compile(
    r"^spec\.([A-Za-z]+)\.([^.]+)\.template\.spec\.containers\[" + re.escape(CONTAINER) + r"\]\.([A-Za-z]+)$"
)


class RoleLists:
    """The role variables of one preset's checks (a part of cel.Emitter)."""

    ctx: RuleContext
    prefix: str
    anchors: dict[tuple[object, ...], tuple[str, str]]
    replicas: str  # the job's key of its roles, and their names
    roles: list[str]
    lists: dict[tuple[str, str], str]  # (field, role) -> its variable

    def locate(self, path: tuple[object, ...]) -> tuple[str, list[str], str]:
        raise NotImplementedError

    def per_role(
        self, field: str, where: str, inline: str, every: str, parts: Callable[[str], list[str]]
    ) -> str:
        """INLINE (a list expression on the value at WHERE), read from the variables of a role
        (ROLE_LIST) where WHERE is FIELD of a role's main container: PARTS gives, for that
        field's absolute expression, the lists whose concatenation INLINE is, in order (one
        variable each, and one that joins them: the policy keeps a tenth of the API server's
        per-expression cost limit with each of them on the costliest profile validate accepts,
        and a variable is evaluated once however many families read it). In the loop over the
        roles, the variables of the role `r` (EVERY, every item, for any other)."""
        found = MAIN_FIELD.match(where)
        if not found or found.group(1) != self.replicas or found.group(3) != field:
            return inline
        if found.group(2) != ROLE:
            return self._role_list(field, found.group(2), parts) if found.group(2) in self.roles else inline
        # a role the render has not (denied by the roles' own check): every item counts
        chosen = [f"r == {lit(role)} ? {self._role_list(field, role, parts)} : " for role in self.roles]
        return "(" + "".join(chosen) + every + ")"

    def _role_list(self, field: str, role: str, parts: Callable[[str], list[str]]) -> str:
        key = (f"\0{field}", role)
        if key not in self.lists:
            c, guards, _ = self.locate(("spec", self.replicas, role, *MAIN_PLACE))
            present = balanced("&&", [*guards, f"has({c}.{field})"], "true")
            names: list[str] = []
            for part in parts(f"{c}.{field}"):
                name = f"{self.prefix}g{len(self.anchors)}"
                self.anchors[(*key, len(names))] = (name, f"({present}) ? {part} : {ROLE_LIST_DEFAULT}")
                names.append(f"variables.{name}")
            if len(names) > 1:  # positions, in order: those in any part
                name = f"{self.prefix}g{len(self.anchors)}"
                held = balanced("||", [f"i in {n}" for n in names], "false")
                self.anchors[key] = (name, f"{ARG_INDEXES}.filter(i, {held})")
                names = [f"variables.{name}"]
            self.lists[key] = names[0]
        return self.lists[key]

    def bad_args(self, c: str, where: str) -> str:
        """The positions of the command C (at WHERE) whose item is no argument validate allows,
        in order (a role's main container's: its role's variables, per_role)."""
        # the command's own positions first: a rule is read on each item, not on each index
        arg = RULES["arg"].cel(f"{c}[i]", self.ctx)
        inline = f"{ARG_INDEXES}.filter(i, i < size({c})).filter(i, !({arg}))"

        def parts(command: str) -> list[str]:
            return [
                f"[{command}].map(x, {ARG_INDEXES}.filter(i, i < size(x)).filter(i, !({part})))[0]"
                for part in arg_parts("x[i]")
            ]

        return self.per_role("command", where, inline, f"{ARG_INDEXES}.filter(i, i < size({c}))", parts)
