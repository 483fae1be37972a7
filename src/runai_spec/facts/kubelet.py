"""What the kubelet does to a container's command before it starts it: `$(VAR)` expansion.

Kubernetes (`third_party/forked/golang/expansion/expand.go`, used by the kubelet's
`ExpandContainerCommandAndArgs` and for env values in `makeEnvironmentVariables`):
- `$(NAME)` becomes NAME's value when NAME is in the mapping, else stays `$(NAME)` as written;
- `$$` is an escaped `$`: `$$(NAME)` becomes the literal `$(NAME)`;
- `$(` without a closing `)` stays as it is, and so does `$` before any other character or at
  the end of the text.
Every element of `command` and of `args` is expanded on its own, from the container's env (its
`env` list in order, the operator's variables appended to it); an env value is expanded from
the variables defined before it in that list. The shell's own environment plays no part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def expand(text: str, env: Mapping[str, str]) -> str:
    """`text` with every `$(NAME)` that `env` defines replaced, `$$` read as `$`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # escaped operator
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:  # incomplete reference: kept
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            out.append(env.get(name, f"$({name})"))
            i = close + 1
        else:  # an operator that opens nothing: kept with the character after it
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def container_env(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The container's env as the kubelet builds it: in order, each value expanded from the
    variables defined before it; a name given twice keeps its last value."""
    env: dict[str, str] = {}
    for name, value in items:
        env[name] = expand(value, env)
    return env


def expand_command(argv: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """Each element of a container's command (or args) expanded on its own."""
    return [expand(arg, env) for arg in argv]
