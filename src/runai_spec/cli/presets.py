"""`presets list|show|approve|verify|policy|sync|publish`: presets, ledger, policy, distribution."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import EXIT_FINDINGS, EXIT_OK, RunaiSpecError
from .common import ContextOpt, KubeconfigOpt, app, err

if TYPE_CHECKING:
    from ..load.distribution import SyncResult
    from ..load.registry import PresetRegistry

presets_app = typer.Typer(help="Engineer-owned presets and their approvals ledger.", no_args_is_help=True)
app.add_typer(presets_app, name="presets")

PresetsDir = Annotated[
    Path | None, typer.Option("--dir", help="presets/ folder (default: the one shipped with runai-spec).")
]


GrantedToOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="Only the presets this Run:ai project is granted (site.yaml `grants`).",
        show_default=False,
    ),
]


@presets_app.command("list")
def presets_list(directory: PresetsDir = None, project: GrantedToOpt = None) -> None:
    """List the approved presets (--project: those a project may use), and where they came from."""
    from ..load.registry import PresetRegistry
    from ..outputs import report

    registry = PresetRegistry(directory)
    lines = report.presets_lines(registry, project)
    for line in lines:
        print(line)
    err(list_notes(registry, project, bool(lines)))


def list_notes(registry: PresetRegistry, project: str | None, listed: bool) -> list[str]:
    """stderr of `presets list`: which presets these are (synced: from where, when, verified
    against what), and a project granted nothing."""
    from ..load.distribution import synced_record

    notes = []
    if registry.synced:
        record = synced_record() or {}
        notes.append(
            f"presets: synced from {record.get('from', '?')} at {record.get('synced_at', '?')} "
            f"into {registry.root}; verified now against {registry.allowed_signers_path}"
        )
    if project is not None and not listed:
        notes += [
            f"warning: project {project!r} is granted no approved preset",
            "hint: ask the SCC AI Engineers for a grant (site.yaml `grants`); "
            "`runai-spec presets sync` fetches the site's latest",
        ]
    return notes


@presets_app.command("show")
def presets_show(name: str, directory: PresetsDir = None) -> None:
    """Show one approved preset (or `site`, the site file) and its approval record."""
    from ..load.registry import PresetRegistry, preset_summary, site_summary
    from ..render.manifests import dump

    registry = PresetRegistry(directory)
    summary = site_summary(registry.approved_site()) if name == "site" else preset_summary(registry.get(name))
    sys.stdout.write(dump([summary]))


@presets_app.command("approve")
def presets_approve(
    name: Annotated[str, typer.Argument(help="Preset name, or `site` for the site file.")],
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="Your SSH signing key (or its .pub, the private half in ssh-agent), "
            "listed in the folder's allowed_signers; the approver is its principal there.",
        ),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(
            help="Expiry date YYYY-MM-DD (today or later), or `never`; left out, a re-approval "
            "keeps the earlier approval's expiry (one that has passed must be given anew)."
        ),
    ] = None,
    directory: PresetsDir = None,
    by: Annotated[str | None, typer.Option("--by", hidden=True)] = None,
) -> None:
    """Sign the current contents of a preset with your SSH key (`ssh-keygen -Y sign`) and
    record the signed approval in the ledger."""
    registry, signing_key = approval_registry(name, key, directory, by)
    entry = registry.approve(name, signing_key, expires=expires)
    until = (
        f"; expires {entry.expires}"
        + (" (kept from the earlier approval; `--expires never` drops it)" if expires is None else "")
        if entry.expires
        else ""
    )
    err(
        [
            f"approved {name}: sha256 {entry.sha256} signed by {entry.approved_by} "
            f"on {entry.approved_at}{until}",
            *unpinned_warning(entry.signature or "", entry.approved_by, entry.approved_at),
        ]
    )


def unpinned_warning(signature: str, principal: str, approved_at: str) -> list[str]:
    """A warning where the key that signed is not one this installation pins for PRINCIPAL
    (the shipped allowed_signers): researchers' `presets sync` refuses the approval until a
    release of runai-spec ships the key (issue 41 item 7). [] where it is pinned."""
    from ..load import allowed_signers, signing, sshsig
    from ..load.registry import pinned_signers

    pinned = pinned_signers()
    try:
        key = sshsig.signer_key(signature)
        seconds = allowed_signers.parse_absolute_time(approved_at.replace("-", "")) or 0
        allowed_signers.AllowedSigners.read(pinned).check(key, principal, signing.NAMESPACE, seconds)
    except (sshsig.Invalid, RunaiSpecError):
        return [
            f"warning: {pinned}: the key that signed is not pinned for {principal} by this "
            "installation of runai-spec: researchers' `presets sync` refuses this approval until "
            "a release of runai-spec ships allowed_signers with it (docs/presets-distribution.md)"
        ]
    return []


def approval_registry(
    name: str, key: Path | None, directory: Path | None, by: str | None
) -> tuple[PresetRegistry, Path]:
    """The presets folder `presets approve` may sign into; bad input for a typed approver,
    no key, or the shipped presets inside the installed package."""
    from ..errors import InputError
    from ..load.registry import PresetRegistry
    from ..resources import inside_installed_package

    if by is not None:
        raise InputError(
            "an approval carries its engineer's SSH signature; the approver is the "
            "principal allowed_signers lists for the signing key, never a typed "
            "name",
            field="--by",
            hint=f"sign it: `runai-spec presets approve {name} --key "
            "~/.ssh/id_ed25519` (a key listed in presets/allowed_signers)",
        )
    if key is None:
        raise InputError(
            "an approval needs an AI Engineer's SSH signature: no signing key given",
            field="--key",
            hint=f"`runai-spec presets approve {name} --key ~/.ssh/id_ed25519` "
            "(a key listed in presets/allowed_signers)",
        )
    registry = PresetRegistry(directory)
    if directory is None and registry.synced:
        raise InputError(
            "the presets in use are a synced copy (`presets sync`); approve writes only into "
            "the presets repository",
            file=str(registry.root),
            field="--dir",
            hint=f"run it in the presets repository's checkout: "
            f"`runai-spec presets approve {name} --key KEY --dir presets/`",
        )
    if directory is None and inside_installed_package(registry.root):
        raise InputError(
            "the shipped presets are inside the installed package; approve writes "
            "only into a presets repository",
            file=str(registry.root),
            field="--dir",
            hint=f"run it in the presets repository's checkout: "
            f"`runai-spec presets approve {name} --key KEY --dir presets/`",
        )
    return registry, key


LiveOpt = Annotated[
    bool,
    typer.Option(
        "--live",
        help="Also compare the approved presets with the parameters the cluster's admission policy enforces.",
    ),
]


@presets_app.command("verify")
def presets_verify(
    directory: PresetsDir = None,
    live: LiveOpt = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
) -> int:
    """Check every file of the presets folder (--dir, default: the shipped one) against the
    ledger and its signatures; exit 1 when any is refused (for CI). --live: also compare them
    with what the cluster enforces (exit 1 on a difference)."""
    from ..load.registry import PresetRegistry

    registry = PresetRegistry(directory)
    result = registry.verify()
    for name in result.ok:
        print(f"ok: {name}")
    err(result.problems)
    differs = live and verify_live(registry, kubeconfig, context)
    return EXIT_FINDINGS if result.problems or differs else EXIT_OK


def verify_live(registry: PresetRegistry, kubeconfig: Path | None, context: str | None) -> bool:
    """`presets verify --live`: True when the cluster's parameters differ from the ledger's."""
    from ..cluster.backend import kubernetes_target, read_admission, read_params
    from ..errors import InputError
    from ..outputs.admission import documents as admission
    from ..outputs.admission import live

    try:
        local = admission.params_data(registry)
    except InputError as exc:
        err([f"warning: {registry.root}: live: not compared, the presets here do not verify ({exc.message})"])
        return True
    target = kubernetes_target(kubeconfig, context)
    deployed = read_params(target, admission.PARAMS_NAMESPACE, admission.PARAMS_NAME)
    if deployed.forbidden is not None:
        err(
            [
                f"warning: cluster: {admission.DEPLOYED}: not checked: forbidden ({deployed.forbidden})",
                "hint: ask the AI Engineers to run it, or for read access to that ConfigMap",
            ]
        )
        return False
    policies = [o.split("/", 1)[1] for o in live.OBJECTS if o.startswith("validatingadmissionpolicies/")]
    gate = live.read_gate(read_admission(target, policies, policies))
    if gate.forbidden:
        err(
            [
                f"warning: cluster: {', '.join(gate.forbidden)}: not checked: forbidden",
                "hint: ask the AI Engineers to run it, or for read access to the admission policies",
            ]
        )
    out, problems = admission.deployment_report(registry.root, local, deployed.data, gate=gate)
    for line in out:
        print(line)
    err(problems)
    return bool(problems)


@presets_app.command("policy")
def presets_policy(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Write policy.yaml and params.yaml into this folder instead of printing all three objects.",
        ),
    ] = None,
    directory: PresetsDir = None,
) -> None:
    """The ValidatingAdmissionPolicy, its binding and its parameters, from the approved presets
    (Kubernetes >= 1.30): what the cluster admits. See docs/admission.md."""
    from ..load.registry import PresetRegistry
    from ..outputs.admission import documents as admission
    from ..render.manifests import dump

    registry = PresetRegistry(directory)
    if out is None:
        sys.stdout.write(dump(admission.policy_documents(registry)))
    else:
        err([f"wrote {path}" for path in admission.write_policy(registry, out)])
    err(_guard_off_warning(registry))


def _guard_off_warning(registry: PresetRegistry) -> list[str]:
    """Issue 41 item 6: the policy's scope, stated where the workload guard is off."""
    if registry.site().workload_guard.enabled:
        return []
    return [
        f"warning: {registry.root / 'site.yaml'}: workload_guard: off: in the project "
        "namespaces only PyTorchJobs are judged; Pods, Jobs, MPIJobs, JobSets and other "
        "workloads that ask for GPUs are not (docs/admission.md, the workload guard)"
    ]


FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="`cluster` (the ConfigMap the AI Engineers publish, read with your kubeconfig), a "
        "folder (the presets repository's presets/, e.g. a checkout on NFS), or `shipped` (back to "
        "this installation's own). Default: $RUNAI_SPEC_PRESETS_FROM, else the last sync's source.",
        show_default=False,
    ),
]


@presets_app.command("sync")
def presets_sync(
    source: FromOpt = None, kubeconfig: KubeconfigOpt = None, context: ContextOpt = None
) -> None:
    """Fetch the site's current approved presets and use them from now on, once every approval
    verifies against the allowed_signers this installation pins; a set that does not is
    refused whole, and the presets in use stay as they were (exit 2)."""
    from ..load.distribution import sync_source

    result = sync_from(sync_source(source), kubeconfig, context)
    for name in result.files:
        print(f"ok: {name}")
    err([result.summary])


def sync_from(source: str, kubeconfig: Path | None, context: str | None) -> SyncResult:
    """`presets sync` from SOURCE: the cluster's published ConfigMap, a folder, or back to the
    shipped presets."""
    from ..errors import ClusterError
    from ..load import distribution

    if source == distribution.SHIPPED:
        return distribution.forget_synced()
    if source != distribution.CLUSTER:
        folder = Path(source).expanduser().absolute()
        return distribution.sync_files(distribution.read_folder(folder), str(folder), str(folder))
    from ..cluster.backend import kubernetes_target, read_params
    from ..outputs.admission.documents import PARAMS_NAMESPACE

    got = read_params(kubernetes_target(kubeconfig, context), PARAMS_NAMESPACE, distribution.FILES_CONFIGMAP)
    publish = "`runai-spec presets publish --dir presets/ | kubectl apply -f -`"
    if got.data is None:
        why = f"forbidden ({got.forbidden})" if got.forbidden else "not found: no presets are published"
        hint = (
            "ask the SCC AI Engineers for read access to it, or use `--from DIR`"
            if got.forbidden
            else f"the SCC AI Engineers publish them: {publish}"
        )
        raise ClusterError(f"{got.ref}: {why}", file="cluster", hint=hint)
    return distribution.sync_files(distribution.configmap_files(got.data), got.ref, distribution.CLUSTER)


@presets_app.command("publish")
def presets_publish(directory: PresetsDir = None) -> None:
    """The ConfigMap that `presets sync --from cluster` reads (print it; `kubectl apply -f -`):
    the folder's approved files byte for byte, never its allowed_signers."""
    from ..load.distribution import files_configmap
    from ..load.registry import PresetRegistry
    from ..outputs.admission.documents import PARAMS_NAMESPACE
    from ..render.manifests import dump

    sys.stdout.write(dump([files_configmap(PresetRegistry(directory), PARAMS_NAMESPACE)]))
