"""Rules on the command: the entry point alone, no launcher or its flags, processes per GPU."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError
from ..facts import accelerate as acc
from ..facts import mpi
from ..facts.kubeflow import GPU_RESOURCE, KIND, nproc_flags, pytorch_container, replica_specs, torchrun_procs
from ..facts.torchrun import (
    ACCELERATE,
    DEEPSPEED,
    EXECUTABLE_ENTRY,
    SHELLS,
    entry_point_kind,
    flag_uses,
    launcher_entry,
    split_command,
    without_launcher,
)
from ..findings import Finding
from ..plan.launcher import PROFILE_LAUNCHERS, MpiLauncher, registered_launchers
from ..render.manifests import Manifest
from .env import env_fields
from .rules import Context, finding, rule

# Launchers runai-spec does not render (yet), refused as a command's first word like the ones
# it does (each registered launcher's `programs`) and the shells.
OTHER_LAUNCHERS = (DEEPSPEED, "srun")
LAUNCHERS = frozenset(
    {*(p for launcher in registered_launchers() for p in launcher.programs), *OTHER_LAUNCHERS, *SHELLS}
)
# Each registered launcher's topology flags, `--x` or `--x=v`: the preset decides them. One
# pattern, which the admission policy renders too.
_RESERVED = {
    launcher.name: launcher.reserved_flags for launcher in registered_launchers() if launcher.reserved_flags
}
_ANY = "|".join(_RESERVED.values())
LAUNCHER_FLAGS = re.compile(f"^{_ANY if len(_RESERVED) == 1 else f'(?:{_ANY})'}(=|$)")
# The same flags, one pattern per launcher (launcher name -> pattern): ARG is one of
# LAUNCHER_FLAGS exactly when it matches one of them (the admission policy reads each apart,
# since a regular expression costs the API server by its own length: outputs/admission/rules.py).
LAUNCHER_FLAG_PATTERNS = {name: f"^(?:{flags})(=|$)" for name, flags in _RESERVED.items()}


def launcher_flag(arg: str) -> str | None:
    """The name of the registered launcher whose topology flag ARG is, else None."""
    if not LAUNCHER_FLAGS.match(arg):
        return None
    return next(name for name, pattern in LAUNCHER_FLAG_PATTERNS.items() if re.match(pattern, arg))


@rule("launcher", "error", "The tool adds the launcher; the command is the entry point only")
def check_launcher(ctx: Context) -> Iterator[Finding]:
    """`python` for one GPU, `torchrun` (or the profile's `launcher`) otherwise, flags derived
    from the preset. The command starts with the entry point: torchrun takes unique prefixes of
    its flags and the last copy wins, so anything before the script starting `-` could reshape it.
    The entry point's name says how it runs (the file is in the image, not here to inspect):
    a `*.py` script (or `-m module`) with Python; a wrapper script, `*.sh` (executable, with a
    shebang, and named with a `/`, e.g. `./run.sh`) or `[bash, run.sh]`, as an executable:
    torchrun `--no-python`, and on one GPU the script alone, no `python -u`. Any other name
    is refused: it cannot be told which it is. A launcher's own module as the entry point is
    refused too (it would start processes of its own): `-m torch.distributed.run`,
    `torch.distributed.launch`, `accelerate.commands.launch`,
    `accelerate.commands.accelerate_cli`, `deepspeed.launcher.runner` or
    `deepspeed.launcher.launch`, or a script whose path ends in one of them as a file
    (`.../torch/distributed/run.py`)."""
    yield from _chosen_launcher_findings(ctx)
    command = ctx.loaded.profile.command
    first = command[0]
    kind = entry_point_kind(command)
    program = first.rsplit("/", 1)[-1]
    if program in _PROFILE_PROGRAMS and kind != EXECUTABLE_ENTRY:
        yield _use_the_field(ctx, command, _PROFILE_PROGRAMS[program])
    elif program in LAUNCHERS and kind != EXECUTABLE_ENTRY:
        rest = without_launcher(command)
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"{first!r} is a launcher; runai-spec adds the right one per layout",
            f"start the command with the script: {rest!r}" if rest else "start the command with the script",
        )
    elif (module := launcher_entry(command)) is not None:
        yield finding(
            ctx,
            "launcher",
            "command[0]" if first.endswith(".py") else "command[1]",
            f"{module!r} is a launcher's own module: it would start processes of its "
            "own beside the ones the preset plans (runai-spec already runs torchrun "
            "or python per layout)",
            "start the command with your training script, e.g. [train.py, ...]",
        )
    elif first in ("-m", "--module"):
        if not ctx.site.allow_module_entrypoint:
            yield finding(
                ctx,
                "launcher",
                "command[0]",
                "the module form (`-m package`) is not allowed on this site",
                "start the command with the script's path, e.g. [train.py, ...]",
            )
    elif first.startswith("-"):
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"{first!r} is a flag before the entry point; torchrun would take it "
            "as its own (it accepts unique prefixes, and the last copy wins)",
            "start the command with the script's path; the preset decides the launcher's flags",
        )
    elif any(c.isspace() for c in first):
        words = [*first.split(), *command[1:]]
        if words[0].rsplit("/", 1)[-1] in LAUNCHERS:
            words = without_launcher(words)
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"{first!r} is one string with spaces: it is run as one file name",
            f"write one list item per argument: {words!r}",
        )
    else:
        yield from _entry_point_findings(ctx, command, kind)
    for index, arg in enumerate(command[1:], start=1):
        if (owner := launcher_flag(arg)) is not None:
            yield finding(
                ctx,
                "launcher",
                f"command[{index}]",
                f"{arg!r} is {owner}'s flag; the preset decides the topology",
                "remove it",
            )


# The launchers a profile chooses by name (its `launcher` field), by the program that starts
# each: a command that starts with one is told to use the field instead.
_PROFILE_PROGRAMS = {
    program: launcher.name
    for launcher in registered_launchers()
    if launcher.name in PROFILE_LAUNCHERS[1:]
    for program in launcher.programs
}


def _use_the_field(ctx: Context, command: list[str], name: str) -> Finding:
    """A command that starts with launcher NAME, which the profile chooses by its field."""
    # the script: the first argument its name says how to run (the launcher's flags before it)
    at = next((i for i in range(1, len(command)) if entry_point_kind(command[i:]) is not None), None)
    return finding(
        ctx,
        "launcher",
        "command[0]",
        f"{command[0]!r} is a launcher; the profile chooses it with `launcher: {name}`, and "
        "runai-spec renders it with the preset's topology",
        f"write `launcher: {name}` and start the command with the script"
        + (f": {command[at:]!r}" if at is not None else ""),
    )


def _chosen_launcher_findings(ctx: Context) -> Iterator[Finding]:
    """The profile's `launcher`: one the site and the preset allow, and one the layout can
    express (accelerate has no MIN:MAX node count and no rendezvous id: not elastic)."""
    yield from mpi_transport_findings(ctx)
    yield from deepspeed_runner_findings(ctx)
    asked = ctx.loaded.profile.launcher
    preset = ctx.approved.preset
    if asked == PROFILE_LAUNCHERS[0] or preset.layout == "single-gpu":
        return  # the default, or one GPU: python runs the script whatever the field says
    if preset.elastic is not None:
        yield finding(
            ctx,
            "launcher",
            "launcher",
            f"preset {ctx.approved.name!r} is elastic, which {asked} cannot express: it has no "
            "MIN:MAX node count and no rendezvous id, so pods joining or leaving would not "
            "re-form the job",
            "use `launcher: torchrun` (an Accelerate script runs under torchrun unchanged), "
            "or a fixed-size preset",
        )
        return
    if asked == MpiLauncher.name and ctx.site.mpi_operator not in mpi.OPERATOR_VERSIONS:
        yield _no_mpi_operator(ctx)
        return
    # mpi only where the preset names it: an MPIJob runs the preset's mpi settings (sshd, SSH path)
    named: list[str] = [*preset.launchers] if preset.launchers else [*PROFILE_LAUNCHERS]
    named = [n for n in named if preset.launchers or n != MpiLauncher.name]
    allowed = [n for n in ctx.site.launchers if n in named]
    if asked not in allowed:
        by = "the site" if asked not in ctx.site.launchers else f"preset {ctx.approved.name!r}"
        yield finding(
            ctx,
            "launcher",
            "launcher",
            f"{by} does not allow launcher {asked!r} (allowed here: {', '.join(allowed)})",
            "use `launcher: torchrun`, or ask the AI Engineers for a preset that allows it",
        )


def _no_mpi_operator(ctx: Context) -> Finding:
    """`launcher: mpi` on a site without mpi-operator's MPIJob v2beta1 (site.yaml mpi_operator)."""
    if ctx.site.mpi_operator == mpi.TRAINING_OPERATOR_V1:
        why = (
            "the site runs training-operator's MPIJob kubeflow.org/v1 under the same CRD name "
            f"({mpi.CRD_NAME}), and runai-spec renders mpi-operator's {mpi.API_VERSION} only"
        )
    else:
        why = f"the site runs no MPI operator (site.yaml mpi_operator: {ctx.site.mpi_operator})"
    return finding(
        ctx,
        "launcher",
        "launcher",
        f"launcher 'mpi' renders an MPIJob {mpi.API_VERSION}, which this site cannot run: {why}",
        "use `launcher: torchrun`, or ask the AI Engineers to install mpi-operator v0.6.0 or "
        "later and name it in site.yaml (mpi_operator)",
    )


def deepspeed_runner_findings(ctx: Context) -> Iterator[Finding]:
    """DeepSpeed's OpenMPI runner and its `.deepspeed_env` (DeepSpeed 0.19.8 launcher/runner.py,
    launcher/multinode_runner.py: facts/mpi.py): the transport they set is the engineers'
    (DESIGN 4.8), whatever the profile's launcher."""
    profile = ctx.loaded.profile
    command = profile.command
    runner = command[0].rsplit("/", 1)[-1] in mpi.DEEPSPEED_RUNNERS or (
        command[:1] in (["-m"], ["--module"]) and command[1:2] == [mpi.DEEPSPEED_RUNNERS[1]]
    )
    pairs = zip(command, [*command[1:], ""], strict=True)
    openmpi = any(
        a == f"--launcher={mpi.DEEPSPEED_OPENMPI}" or (a, b) == ("--launcher", mpi.DEEPSPEED_OPENMPI)
        for a, b in pairs
    )
    transport = (
        f"its mpirun line forces {', '.join(mpi.DEEPSPEED_OPENMPI_TRANSPORT)} and it exports every "
        f"line of {mpi.DEEPSPEED_ENV_FILE} (in ~ and the working directory) to the ranks: transport "
        "settings the AI Engineers own (the preset's mpi.mpirun_args and network.env)"
    )
    if runner and openmpi:
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"DeepSpeed's OpenMPI runner (--launcher {mpi.DEEPSPEED_OPENMPI}): {transport}",
            "write `launcher: mpi` and start the command with the script: the preset's mpirun "
            "starts it with the engineers' transport",
        )
    if mpi.DEEPSPEED_ENV_FILE_VAR in profile.env:
        yield finding(
            ctx,
            "launcher",
            f"env.{mpi.DEEPSPEED_ENV_FILE_VAR}",
            f"{mpi.DEEPSPEED_ENV_FILE_VAR} names the file whose lines DeepSpeed's runner exports to "
            "every rank (in place of .deepspeed_env): the transport's variables are the AI Engineers'",
            "remove it; variables of the job belong in the profile's env, transport ones in the preset",
        )
    beside = Path(ctx.loaded.path).parent / mpi.DEEPSPEED_ENV_FILE
    if Path(ctx.loaded.path).is_file() and beside.is_file():
        yield finding(
            ctx,
            "launcher",
            "command",
            f"{beside} is DeepSpeed's runner's env file, whose lines it exports to every rank "
            "(NCCL_*, UCX_*: transport settings the AI Engineers own); runai-spec runs no "
            "DeepSpeed runner, so none of them reaches a rank",
            "move the job's variables into the profile's env; ask for a preset for transport ones",
            severity="warning",
        )


def mpi_transport_findings(ctx: Context) -> Iterator[Finding]:
    """An MPI job's transport variables (OpenMPI's MCA parameters, Intel MPI's, Hydra's, UCX's:
    what DeepSpeed's OpenMPI runner forces) in the profile's env: the engineers' (DESIGN 4.8)."""
    profile, preset = ctx.loaded.profile, ctx.approved.preset
    if profile.launcher != MpiLauncher.name or preset.layout == "single-gpu":
        return
    if profile.strategy == "deepspeed" and preset.network.annotations:
        yield finding(
            ctx,
            "launcher",
            "strategy",
            f"preset {ctx.approved.name!r} attaches a second network: deepspeed.init_distributed, "
            "finding no RANK or LOCAL_RANK under mpirun, runs mpi_discovery, which sets "
            "MASTER_ADDR to rank 0's first `hostname -I` address (DESIGN 4.8), not necessarily "
            "the pod network's, over the rendered one (the launcher's name)",
            "set RANK, WORLD_SIZE and LOCAL_RANK from OMPI_COMM_WORLD_* before "
            "deepspeed.init_distributed: with all five set it skips mpi_discovery",
            severity="warning",
        )
    # in `secret_env` as in `env`: mpirun forwards both to every rank (-x)
    for name, field in env_fields(profile):
        if mpi.operator_env_name(name) or name.startswith("UCX_"):
            yield finding(
                ctx,
                "launcher",
                field,
                f"{name} is an MPI transport setting, which the operator and the AI Engineers own",
                "remove it; ask for a preset whose mpi.mpirun_args or network.env sets it",
            )


def _entry_point_findings(ctx: Context, command: list[str], kind: str | None) -> Iterator[Finding]:
    """Whether the entry point runs with Python or as an executable, told by its name (the
    file is in the image, not here): `*.py` (or `-m module`) with Python; a wrapper script,
    `*.sh` or `[bash|sh, script.sh]`, as an executable (torchrun `--no-python`, and no
    `python -u` on one GPU); another name is refused. An executable named without a `/` is
    looked up on PATH, not in the working directory, by the container runtime and torchrun."""
    first = command[0]
    if kind is None:
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"{first!r}: runai-spec cannot tell whether this is a Python script or "
            "an executable (the file is in the image, so its name decides)",
            "a Python script ends in .py; a wrapper script ends in .sh (executable, "
            "with a shebang) or is written with its interpreter, e.g. "
            "[bash, run.sh]",
        )
    elif kind == EXECUTABLE_ENTRY and first.rsplit("/", 1)[-1] not in SHELLS and "/" not in first:
        yield finding(
            ctx,
            "launcher",
            "command[0]",
            f"{first!r} is run as an executable, and without a '/' it is looked up "
            "on PATH, not in the working directory",
            f"write {['./' + first, *command[1:]]!r} (relative to working_dir), its "
            f"absolute path, or {['bash', first, *command[1:]]!r}",
        )


def _launcher_head(command: list[str]) -> tuple[str | None, tuple[str, ...]]:
    """The launcher's kind (split_command's; None: none it knows) and the launcher and its
    flags before the entry point (torchrun passes everything after the script to the script);
    the whole argv where it starts with no known launcher."""
    try:
        launcher = split_command(command)
    except InputError:
        return None, tuple(command)
    return launcher.kind, launcher.head


@rule("nproc-gpus", "error", "Processes per pod equal the GPUs visible in the pod")
def check_nproc(ctx: Context) -> Iterator[Finding]:
    """The guide: the process count must match the GPUs visible inside the pod. torchrun's
    processes per pod are its `--nproc-per-node` (else the operator's); accelerate's
    `--num_processes` counts every pod's together and `--num_machines` the pods, so they must
    be the GPUs per pod times the pods, and the pods."""
    for manifest in ctx.manifests:
        if manifest.get("kind") != KIND:
            continue
        nproc = manifest["spec"]["nprocPerNode"]
        for role, spec in manifest["spec"]["pytorchReplicaSpecs"].items():
            container = pytorch_container(spec, role)
            gpus = container["resources"]["limits"][GPU_RESOURCE]
            command = container["command"]
            kind, head = _launcher_head(command)  # after the entry point, the flags are the script's
            flags = nproc_flags(head)
            started = torchrun_procs(manifest, head, ctx.site.operator_version)
            if kind == ACCELERATE:
                yield from _accelerate_nproc(ctx, manifest, role, head, gpus)
            if command[:1] == ["torchrun"] and str(started) != str(gpus):
                yield finding(
                    ctx,
                    "nproc-gpus",
                    f"spec.pytorchReplicaSpecs.{role}",
                    f"torchrun would start {started} process(es) per pod on {gpus} GPUs",
                    "this is a runai-spec or preset bug; tell the AI Engineers",
                )
            elif str(gpus) != str(nproc) or any(flag != str(gpus) for flag in flags):
                yield finding(
                    ctx,
                    "nproc-gpus",
                    f"spec.pytorchReplicaSpecs.{role}",
                    f"{gpus} GPUs per pod but nprocPerNode {nproc} / flags {flags}",
                    "this is a runai-spec or preset bug; tell the AI Engineers",
                )


def _accelerate_nproc(
    ctx: Context, job: Manifest, role: str, head: tuple[str, ...], gpus: object
) -> Iterator[Finding]:
    """accelerate launch starts --num_processes in all (the last one given: argparse) over
    --num_machines, num_processes // num_machines per machine (accelerate 1.16.0 utils/launch.py
    prepare_multi_gpu_env): the pods' GPUs, one machine per pod."""
    pods = sum(replicas for _, replicas, _ in replica_specs(job))
    given = {
        name: [use.value for use in flag_uses(head, *acc.spellings(name))][-1:]
        for name in (acc.NUM_PROCESSES_FLAG, acc.NUM_MACHINES_FLAG)
    }
    total = int(str(gpus)) * pods if str(gpus).isdigit() else f"{gpus} x {pods}"
    want = {acc.NUM_PROCESSES_FLAG: str(total), acc.NUM_MACHINES_FLAG: str(pods)}
    if any(given[name] != [value] for name, value in want.items()):
        told = ", ".join(f"{name}={v[0] if v else '(none)'}" for name, v in given.items())
        yield finding(
            ctx,
            "nproc-gpus",
            f"spec.pytorchReplicaSpecs.{role}",
            f"accelerate launch {told} on {pods} pod(s) of {gpus} GPUs "
            f"(expected {', '.join(f'{k}={v}' for k, v in want.items())})",
            "this is a runai-spec or preset bug; tell the AI Engineers",
        )
