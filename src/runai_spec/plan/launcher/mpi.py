"""mpirun in an MPIJob's launcher (mpi-operator v2beta1): the world size, the preset's flags, the program."""

from ...facts import mpi
from ...facts.torchrun import EXECUTABLE_ENTRY, SINGLE_GPU_LAUNCHER, entry_point_kind
from ...load.presets import MpiSettings, Preset
from ...records import Record
from ..origins import Entry, Origin, Sources, derived, same
from .base import LauncherFile, LaunchSetup, WorkloadKind
from .rendezvous import RendezvousPlan

# mpi-operator's MPIJob: a Launcher (a batch/v1 Job running mpirun) and Workers (running sshd).
# The launcher runs as a worker too (spec.runLauncherAsWorker): it gets the preset's GPUs and
# the hostfile's first line, so the pods are the PyTorchJob's (one lead, nodes - 1 workers).
MPIJOB = WorkloadKind(mpi.API_VERSION, mpi.KIND, "mpijob.json.j2", mpi.REPLICA_TYPES)
FORWARD_FLAG = "-x"  # OpenMPI: export this variable of mpirun's env to every rank
MASTER_ADDR, MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"  # torch's env:// rendezvous


def settings(setup: LaunchSetup) -> MpiSettings:
    return setup.mpi if setup.mpi is not None else MpiSettings()


class MpiPlan(Record):
    """The MPIJob's own spec values (the preset's mpi settings), as the template reads them."""

    implementation: str
    ssh_auth_mount_path: str
    launcher_creation_policy: str
    launcher_restart_policy: str
    worker_restart_policy: str
    worker_command: tuple[str, ...]


def plan_mpi(
    workload: WorkloadKind, setup: LaunchSetup, src: Sources, o: dict[str, Origin]
) -> MpiPlan | None:
    """The MPIJob's spec values for a job of WORKLOAD (None unless an MPIJob); their origins into O."""
    if workload != MPIJOB:
        return None
    s = settings(setup)
    plan = MpiPlan(
        s.implementation,
        s.ssh_auth_mount_path,
        s.launcher_creation_policy,
        s.launcher_restart_policy,
        s.worker_restart_policy,
        tuple(s.worker_command),
    )
    for name in plan._fields:
        o[f"mpi.{name}"] = src.preset(f"mpi.{name}")
    for i in range(len(plan.worker_command)):
        o[f"mpi.worker_command[{i}]"] = src.preset(f"mpi.worker_command[{i}]")
    return plan


class MpiLauncher:
    """`mpirun -np WORLD [preset's flags] [-x VAR]... PROGRAM`, PID 1 of the launcher pod. The
    ranks on the other pods are started over SSH (the operator's hostfile at /etc/mpi), where
    the pod's env does not reach them: every variable of the profile and the preset is
    forwarded with `-x`. No re-rendezvous: a lost rank ends mpirun, and the launcher Job's
    back-off (run_policy.backoff_limit) restarts the whole job from its last checkpoint."""

    name = "mpi"
    workload = MPIJOB
    programs: tuple[str, ...] = mpi.PROGRAMS
    reserved_flags = mpi.RESERVED_FLAGS
    reserved_modules: tuple[str, ...] = ()
    restarts_ranks = False
    forwards_sigterm = True  # mpirun passes SIGTERM on to every rank

    def rendezvous(self, preset: Preset, job: str) -> RendezvousPlan | None:
        return None  # MPI_Init wires the ranks; torch reads OMPI_COMM_WORLD_* (no store to plan)

    def head(self, setup: LaunchSetup) -> tuple[str, ...]:
        return (mpi.PROGRAM, mpi.NP_FLAG, str(setup.pods * setup.procs_per_pod), *settings(setup).mpirun_args)

    def argv(self, setup: LaunchSetup) -> tuple[str, ...]:
        argv = self.head(setup)
        for name in dict.fromkeys((*setup.env_names, MASTER_ADDR, MASTER_PORT)):
            argv += (FORWARD_FLAG, name)
        # mpirun starts a program: a Python script needs its interpreter, a wrapper runs itself
        if entry_point_kind(setup.entrypoint) == EXECUTABLE_ENTRY:
            return argv
        return (*argv, *SINGLE_GPU_LAUNCHER)

    def rank_logs(self, setup: LaunchSetup) -> str | None:
        return None  # mpirun gathers every rank's output in the launcher pod's log

    def rendezvous_env(self, setup: LaunchSetup) -> dict[str, str]:
        # torch's env:// store on the launcher pod, by the job's name (a smoke job's is its own)
        return {MASTER_ADDR: mpi.launcher_name(setup.job)}

    def env(self, setup: LaunchSetup, src: Sources) -> dict[str, Entry]:
        """torch's env:// rendezvous on rank 0's pod: the launcher's (the hostfile's first host,
        which OpenMPI fills first), by the name the operator's DNS search path resolves; the
        operator itself injects OMPI_MCA_* in the launcher (facts/mpi.launcher_env)."""
        why = derived("rank 0 runs in the launcher pod (runLauncherAsWorker: the hostfile's first host)")
        return {
            MASTER_ADDR: same(why, MASTER_ADDR, self.rendezvous_env(setup)[MASTER_ADDR]),
            MASTER_PORT: (MASTER_PORT, str(setup.master_port), why, src.preset("master_port")),
        }

    def origin(self, arg: str, setup: LaunchSetup, src: Sources) -> Origin:
        # by value (the protocol passes no position): the preset's flags first, as mpirun reads them
        if arg in (mpi.PROGRAM, mpi.NP_FLAG):
            return derived("launcher of an MPIJob (profile launcher: mpi)")
        if arg in settings(setup).mpirun_args:
            return src.preset("mpi.mpirun_args")
        if arg == str(setup.pods * setup.procs_per_pod):
            return derived("world size: preset nodes x gpus_per_pod (one rank per GPU)")
        if arg == FORWARD_FLAG or arg in (*setup.env_names, MASTER_ADDR, MASTER_PORT):
            return derived("a rank started over SSH sees none of the pod's env: mpirun forwards it (-x)")
        if arg in SINGLE_GPU_LAUNCHER:
            return src.profile("command[0]")
        return derived("launcher of an MPIJob (profile launcher: mpi)")

    def shutdown_window(self, torch_version: str | None, grace_s: int) -> int | None:
        return None  # how long OpenMPI's mpirun waits between SIGTERM and SIGKILL: not modelled

    def files(self, setup: LaunchSetup) -> tuple[LauncherFile, ...]:
        return ()


def program_launcher(launcher: tuple[str, ...]) -> tuple[str, ...]:
    """A rendered mpirun launcher (MpiLauncher.argv: the job's plan.launcher) that starts a
    Python script: the same mpirun, flags and forwarded variables, then the interpreter, which
    a job whose program runs itself (a wrapper) has not (the smoke test's and the rehearsal's
    preflight.py)."""
    tail = len(SINGLE_GPU_LAUNCHER)
    return launcher if launcher[-tail:] == SINGLE_GPU_LAUNCHER else (*launcher, *SINGLE_GPU_LAUNCHER)
