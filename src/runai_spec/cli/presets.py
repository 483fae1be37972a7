"""`presets list|show|approve|verify|policy`: the presets, their ledger, their admission policy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK
from ..presets import PresetRegistry, preset_summary
from .common import ContextOpt, KubeconfigOpt, app, err

presets_app = typer.Typer(help="Engineer-owned presets and their approvals ledger.",
                          no_args_is_help=True)
app.add_typer(presets_app, name="presets")

PresetsDir = Annotated[Path | None, typer.Option("--dir", help="presets/ folder (default: the "
                                                  "one shipped with runai-spec).", hidden=True)]


@presets_app.command("list")
def presets_list(directory: PresetsDir = None) -> None:
    """List the approved presets."""
    from .. import report

    for line in report.presets_lines(PresetRegistry(directory)):
        print(line)


@presets_app.command("show")
def presets_show(name: str, directory: PresetsDir = None) -> None:
    """Show one approved preset and its approval record."""
    from ..manifests import dump

    sys.stdout.write(dump([preset_summary(PresetRegistry(directory).get(name))]))


@presets_app.command("approve")
def presets_approve(
    name: Annotated[str, typer.Argument(help="Preset name, or `site` for the site file.")],
    by: Annotated[str, typer.Option("--by", help="Who approves (recorded in the ledger).")],
    expires: Annotated[str | None, typer.Option(help="Expiry date YYYY-MM-DD.")] = None,
    directory: PresetsDir = None,
) -> None:
    """Record the current contents of a preset in the approvals ledger."""
    entry = PresetRegistry(directory).approve(name, by, expires=expires)
    err([f"approved {name}: sha256 {entry.sha256} by {entry.approved_by} on {entry.approved_at}"])


LiveOpt = Annotated[bool, typer.Option("--live", help="Also compare the approved presets with "
                                        "the parameters the cluster's admission policy enforces.")]


@presets_app.command("verify")
def presets_verify(directory: PresetsDir = None, live: LiveOpt = False,
                   kubeconfig: KubeconfigOpt = None, context: ContextOpt = None) -> int:
    """Check every file in presets/ against the ledger; exit 1 when any is refused (for CI).
    --live: also compare them with what the cluster enforces (exit 1 on a difference)."""
    registry = PresetRegistry(directory)
    result = registry.verify()
    for name in result.ok:
        print(f"ok: {name}")
    err(result.problems)
    differs = live and verify_live(registry, kubeconfig, context)
    return EXIT_FINDINGS if result.problems or differs else EXIT_OK


def verify_live(registry: PresetRegistry, kubeconfig: Path | None, context: str | None) -> bool:
    """`presets verify --live`: True when the cluster's parameters differ from the ledger's."""
    from .. import admission
    from ..cluster import Target
    from ..cluster.params import read_params
    from ..errors import InputError

    try:
        local = admission.params_data(registry)
    except InputError as exc:
        err([f"warning: {registry.root}: live: not compared, the presets here do not verify "
             f"({exc.message})"])
        return True
    deployed = read_params(Target(kubeconfig=kubeconfig, context=context),
                           admission.PARAMS_NAMESPACE, admission.PARAMS_NAME)
    if deployed.forbidden is not None:
        err([f"warning: cluster: {admission.DEPLOYED}: not checked: forbidden "
             f"({deployed.forbidden})",
             "hint: ask the AI Engineers to run it, or for read access to that ConfigMap"])
        return False
    out, problems = admission.deployment_report(registry.root, local, deployed.data)
    for line in out:
        print(line)
    err(problems)
    return bool(problems)


@presets_app.command("policy")
def presets_policy(
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write policy.yaml and params.yaml into this folder instead of "
        "printing all three objects.")] = None,
    directory: PresetsDir = None,
) -> None:
    """The ValidatingAdmissionPolicy, its binding and its parameters, from the approved presets
    (Kubernetes >= 1.30): what the cluster admits. See docs/admission.md."""
    from .. import admission
    from ..manifests import dump

    registry = PresetRegistry(directory)
    if out is None:
        sys.stdout.write(dump(admission.policy_documents(registry)))
        return
    err([f"wrote {path}" for path in admission.write_policy(registry, out)])
