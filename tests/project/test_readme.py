"""The README and the documentation site are what people copy: every profile block in them
validates clean, and every `runai-spec` command of their `sh` blocks runs (issue 16, item 9;
the docs pages since issue 26).

How each command is run:
- offline commands (validate, plan, explain, render, rules, schema, presets ...) run as
  written, in a folder holding the page's first profile (else the README's) as `profile.yaml`
  and a copy of `examples/`; `presets approve` runs against a copy of `presets/`;
- a block that needs a cluster says so in its first line, visibly: `# needs: cluster`. Only
  there may cluster commands (submit, status, logs, delete, and any `--live`) stand; they run
  against the fake API server of tests/kube_fixtures.py, in the page's order, the operator's
  part played here (each submitted job gets its pods and a log line);
- `init` runs on a pseudo-terminal (tests/outputs/test_init.py's), each question answered, in an
  empty folder; the profile it writes validates;
- `rehearse` commands: only their arguments are checked (parsed and handed to the rehearsal
  as written); the rehearsal itself is covered by tests/rehearse/test_rehearse_cpu.py and
  tests/rehearse/test_rehearse_cli.py, and would cost half a minute per line here. A block of
  commands that need a GPU says `# needs: gpu` in its first line.
- a block whose first line says `# needs: presets checkout` runs in the engineers' presets
  checkout: its commands read the presets from ./presets (where its `cp` copies a proposal and
  `presets approve` signs it with a throwaway key), not from the tool's own presets;
Commands that are not runai-spec's (venv, pip, ruff, mypy, pytest, kubectl, ...) are listed in
NOT_RUN with the reason; a command of any other kind fails test_every_command_is_classified.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ENGINEER, ROOT, allow_signer, run
from kubeapi import KubeAPI
from outputs.test_init import IMAGE, interview
from runai_spec import rehearse as rehearse_module
from runai_spec.load import registry as registry_module
from runai_spec.load.registry import PresetRegistry
from runai_spec.rehearse import RehearseResult

pytest_plugins = ("kube_fixtures",)

README = ROOT / "README.md"
# The pages this test runs: the README, and every page of the documentation site.
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
NEEDS = re.compile(r"^# needs: ([a-z, ]+)\n")  # a block's first line: what it needs to run

OFFLINE = {"validate", "plan", "explain", "render", "rules", "schema", "presets", "diff", "version"}
CLUSTER = {"submit", "status", "logs", "delete"}
REHEARSE = {"rehearse"}
INTERACTIVE = {"init"}
# What the code blocks run besides runai-spec, and why this test does not run it.
NOT_RUN = {
    "python3": "creates the virtual environment the README starts from (CI does this)",
    ".venv/bin/pip": "installs packages from the network: CI's own first step",
    "pip": "installs packages from the network",
    ".venv/bin/ruff": "CI runs it (the test command)",
    ".venv/bin/mypy": "CI runs it (the test command)",
    ".venv/bin/mkdocs": "CI runs it (the test command): the documentation site, warnings as errors",
    ".venv/bin/python": "this is the test suite itself (`python -m pytest`), or a generator CI checks",
    "kubectl": "the cluster's own client: in a cluster block, `apply -f` and `create namespace` are played",
    "ssh-keygen": "OpenSSH's; tests/load runs it on throwaway keys (tests/conftest.py)",
    "git": "the presets repository's own workflow",
}
# What the code blocks run besides runai-spec that this test plays (test_every_offline_command_runs).
PLAYED = {"cp": "copies files in the reader's folder (an engineer's proposal into presets/)"}
CHECKOUT = "presets checkout"  # a block's need: its commands read ./presets (the module's docstring)


def blocks(lang: str, page: Path = README) -> list[str]:
    return [body for fence, body in FENCE.findall(page.read_text(encoding="utf-8")) if fence == lang]


def needs(body: str) -> set[str]:
    """What a block says it needs, in its first line (`# needs: cluster`)."""
    match = NEEDS.match(body)
    return {word.strip() for word in match.group(1).split(",")} if match else set()


def profile_blocks(page: Path = README) -> list[str]:
    return [
        body
        for body in blocks("yaml", page)
        if isinstance(doc := yaml.safe_load(body), dict) and "preset" in doc
    ]


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    stdout_to: str | None  # `> FILE`
    needs: frozenset[str] = frozenset()

    @property
    def runai_spec(self) -> bool:
        return self.argv[0].rsplit("/", 1)[-1] == "runai-spec"

    @property
    def cluster(self) -> bool:
        return self.runai_spec and (self.argv[1] in CLUSTER or "--live" in self.argv)

    def __str__(self) -> str:
        return shlex.join(self.argv) + (f" > {self.stdout_to}" if self.stdout_to else "")


def commands(page: Path = README) -> list[Command]:
    """Every command of the page's `sh` blocks: one per line, split at `&&`, comments off."""
    out: list[Command] = []
    for body in blocks("sh", page):
        wants = frozenset(needs(body))
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            while words and ASSIGNMENT.match(words[0]):  # `VAR=value command`: the command
                words = words[1:]
            while words:
                part = words[: words.index("&&")] if "&&" in words else words
                words = words[len(part) + 1 :]
                target = None
                if ">" in part:
                    at = part.index(">")
                    part, target = part[:at], part[at + 1]
                out.append(Command(tuple(part), target, wants))
    return out


def of_kind(kind: set[str], page: Path = README) -> list[Command]:
    return [
        c
        for c in commands(page)
        if c.runai_spec and c.argv[1] in kind and not (c.cluster and kind == OFFLINE)
    ]


def test_the_readme_has_what_this_test_runs() -> None:
    assert len(profile_blocks()) >= 1
    assert of_kind(OFFLINE) and of_kind(CLUSTER) and of_kind(REHEARSE) and of_kind(INTERACTIVE)


# A newcomer's first page (issue 26, item 10), and the site's pages written for people to read.
CELL_WORDS = 60  # "a few lines" of a table cell
GUIDES = ["index", "tutorial", "profile", "commands", "engineer", "ci"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def cells(page: Path) -> list[str]:
    rows = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    return [cell for row in rows for cell in re.split(r"(?<!\\)\|", row.strip("|"))]


@pytest.mark.parametrize("page", [README, *(ROOT / "docs" / f"{name}.md" for name in GUIDES)], ids=str)
def test_no_table_cell_is_over_a_few_lines(page: Path) -> None:
    long = [cell[:60] for cell in cells(page) if len(cell.split()) > CELL_WORDS]
    assert not long, f"{page.name}: cells over {CELL_WORDS} words: {long}"


def test_the_readme_is_short_and_links_only_inside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 100
    assert "../" not in text, "a reference to a folder outside the repository"
    links = LINK.findall(text)
    assert "docs/tutorial.md" in links and "docs/engineer.md" in links
    for link in links:
        assert (ROOT / link).is_file(), link


def test_the_tutorial_runs_every_step_of_a_researcher_s_first_jobs() -> None:
    tutorial = ROOT / "docs" / "tutorial.md"
    ran = {c.argv[1] for c in commands(tutorial) if c.runai_spec}
    assert {"validate", "rehearse", "plan", "submit", "status", "logs"} <= ran
    for example in ("single-gpu", "single-node", "multi-node"):
        assert any(f"examples/{example}/profile.yaml" in c.argv for c in commands(tutorial)), example


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_command_is_classified(page: Path) -> None:
    where = page.relative_to(ROOT)
    for command in commands(page):
        if command.runai_spec:
            assert command.argv[1] in OFFLINE | CLUSTER | REHEARSE | INTERACTIVE, str(command)
            assert not command.cluster or "cluster" in command.needs, (
                f"{where}: {command}: a cluster command in a block without `# needs: cluster`"
            )
        else:
            assert command.argv[0] in NOT_RUN or (command.argv[0] in PLAYED and CHECKOUT in command.needs), (
                f"{where}: {command}: run it here or say why not"
            )


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, i) for page in PAGES for i in range(len(profile_blocks(page)))],
    ids=[
        f"{name}-{i}"
        for page, name in zip(PAGES, PAGE_IDS, strict=True)
        for i in range(len(profile_blocks(page)))
    ],
)
def test_every_profile_block_validates_clean(page: Path, index: int, tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text(profile_blocks(page)[index], encoding="utf-8")
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "error:" not in result.stderr and "warning:" not in result.stderr, result.stderr


@pytest.fixture
def readme_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """Where a reader runs the page: their profile.yaml (the page's first, else the README's), and
    examples/."""
    callspec = getattr(request.node, "callspec", None)
    page: Path = callspec.params.get("page", README) if callspec else README
    work = tmp_path / "work"
    work.mkdir()
    (work / "profile.yaml").write_text((profile_blocks(page) or profile_blocks())[0], encoding="utf-8")
    shutil.copytree(ROOT / "examples", work / "examples")
    monkeypatch.chdir(work)
    return work


def invoke(command: Command, key: Path | None = None) -> Any:
    """The command as written; `~/.ssh/id_ed25519` (the engineer's key) becomes KEY."""
    argv = [str(key) if key is not None and a == "~/.ssh/id_ed25519" else a for a in command.argv[1:]]
    result = run(*argv)
    if command.stdout_to:
        Path(command.stdout_to).parent.mkdir(parents=True, exist_ok=True)
        Path(command.stdout_to).write_text(result.stdout, encoding="utf-8")
    return result


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_offline_command_runs(
    page: Path, readme_folder: Path, presets_dir: Path, _engineer_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the engineer runs `presets approve ... --dir presets/` in the presets repository's
    # checkout: a copy here, whose allowed_signers lists the engineer's (throwaway) key
    shutil.copytree(presets_dir, readme_folder / "presets")
    allow_signer(readme_folder / "presets", _engineer_key, ENGINEER)
    ran = []
    for command in commands(page):
        checkout = CHECKOUT in command.needs
        if command.argv[0] in PLAYED and checkout:  # `cp FILE... DIR/`
            play_cp(command, readme_folder)
        if command not in of_kind(OFFLINE, page):
            continue
        # the engineers' checkout (./presets) for its blocks, else the tool's own presets
        monkeypatch.setattr(
            registry_module,
            "default_presets_dir",
            (lambda: readme_folder / "presets") if checkout else (lambda: presets_dir),
        )
        result = invoke(command, _engineer_key)
        assert result.exit_code == 0, f"{command}: {result.output}"
        ran.append(command.argv[1:3])
        if (
            command.argv[1:2] == ("render",)
            and len(command.argv) == 3
            and command.argv[2].startswith("examples/")
        ):
            golden = readme_folder / Path(command.argv[2]).parent / "manifest.yaml"
            assert result.stdout == golden.read_text(encoding="utf-8")
        if command.stdout_to and command.argv[1] == "plan":
            assert (readme_folder / command.stdout_to).read_text().startswith("# Review request")
        if command.argv[1:3] == ("presets", "approve"):
            signed = PresetRegistry(readme_folder / "presets")
            approved = (
                signed.approved_site() if command.argv[3] == "site" else signed.get(command.argv[3])
            ).approval
            assert approved.approved_by == ENGINEER and approved.signature
    if page == README:
        assert ("validate", "profile.yaml") in ran and ("plan", "profile.yaml") in ran


def operator_starts_pods(api: KubeAPI) -> None:
    """The operator's and the kubelet's part: each job submitted gets its pods, running, each with a
    line of log (what `status` and `logs` then read)."""
    for (plural, namespace, name), job in list(api.kube.objects.items()):
        if plural != "pytorchjobs":
            continue
        for role, spec in job["spec"]["pytorchReplicaSpecs"].items():
            for index in range(int(spec.get("replicas", 1))):
                pod = f"{name}-{role.lower()}-{index}"
                if api.kube.get("pods", namespace, pod) is None:
                    api.kube.add_pod(name, namespace, role.lower(), index)
                    api.kube.logs[(namespace, pod, False)] = "[rank0]: step 1 loss 2.5\n"


def kubectl(argv: tuple[str, ...], api: KubeAPI) -> None:
    """What an engineer's `kubectl` does in a cluster block, played on the fake API server:
    `create namespace NS`, and `apply [--server-side] -f FILE` of what runai-spec generated
    (the admission policy, its parameters, the published presets)."""
    if argv[1:3] == ("create", "namespace"):
        api.kube.namespaces.add(argv[3])
    elif argv[1] == "apply" and "-f" in argv:
        text = Path(argv[argv.index("-f") + 1]).read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if d]
        api.kube.store_policy([i for d in documents for i in (d["items"] if d["kind"] == "List" else [d])])


@pytest.mark.parametrize("page", [p for p in PAGES if any(c.cluster for c in commands(p))], ids=str)
def test_every_cluster_command_runs_against_the_fake_api(
    page: Path, readme_folder: Path, api: KubeAPI, kubeconfig: Path, presets_dir: Path, _engineer_key: Path
) -> None:
    """Each `# needs: cluster` block, in the page's order: its runai-spec commands (rehearse and
    init have their own tests) and its kubectl commands."""
    shutil.copytree(presets_dir, readme_folder / "presets")
    allow_signer(readme_folder / "presets", _engineer_key, ENGINEER)
    for command in commands(page):
        if "cluster" not in command.needs:
            continue
        if command.argv[0] == "kubectl":
            kubectl(command.argv, api)
        if not command.runai_spec or command.argv[1] in REHEARSE | INTERACTIVE:
            continue
        if command.argv[1] == "delete":  # a resubmit (`delete ... && submit ...`) is of a job submitted
            invoke(Command(("runai-spec", "submit", *command.argv[2:3]), None))
        result = invoke(command, _engineer_key)
        assert result.exit_code == 0, f"{page.relative_to(ROOT)}: {command}: {result.output}"
        operator_starts_pods(api)
    assert api.kube.sent("GET") or api.kube.writes(), "nothing reached the cluster"


def play_cp(command: Command, folder: Path) -> None:
    """`cp FILE... DIR` in FOLDER."""
    for source in command.argv[1:-1]:
        shutil.copy(folder / source, folder / command.argv[-1])


def play_checkout(page: Path, folder: Path, key: Path) -> None:
    """The page's `# needs: presets checkout` blocks' `cp` and `presets approve` commands, on
    FOLDER/presets (a copy of the tool's presets whose allowed_signers lists KEY)."""
    for command in commands(page):
        if CHECKOUT in command.needs and command.argv[0] in PLAYED:
            play_cp(command, folder)
        elif CHECKOUT in command.needs and command.runai_spec and command.argv[1:3] == ("presets", "approve"):
            assert invoke(command, key).exit_code == 0, str(command)


@pytest.mark.parametrize("page", [p for p in PAGES if of_kind(REHEARSE, p)], ids=str)
def test_every_rehearse_command_parses_and_reaches_the_rehearsal(
    page: Path,
    readme_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    presets_dir: Path,
    _engineer_key: Path,
) -> None:
    # arguments only (see the module's docstring): the rehearsal is the slow tests' subject
    calls: list[dict[str, Any]] = []

    def rehearse_manifests(manifests: list[Any], spec: Any) -> RehearseResult:
        calls.append(vars(spec))
        return RehearseResult(True, (), (), readme_folder / "logs", 4, "gloo", False)

    monkeypatch.setattr(rehearse_module, "rehearse_manifests", rehearse_manifests)
    shutil.copytree(presets_dir, readme_folder / "presets")
    allow_signer(readme_folder / "presets", _engineer_key, ENGINEER)
    play_checkout(page, readme_folder, _engineer_key)
    for command in of_kind(REHEARSE, page):
        checkout = readme_folder / "presets" if CHECKOUT in command.needs else presets_dir
        monkeypatch.setattr(registry_module, "default_presets_dir", lambda folder=checkout: folder)
        result = invoke(command)
        assert result.exit_code == 0, f"{command}: {result.output}"
        kw = calls.pop()
        argv = command.argv
        if "--procs-per-pod" in argv:
            assert kw["procs_per_pod"] == int(argv[argv.index("--procs-per-pod") + 1])
        assert kw["restart_after_checkpoint"] == ("--restart-after-checkpoint" in argv)
        assert kw["own_script"] == ("--own-script" in argv)
        assert kw["network"] == (argv[argv.index("--network") + 1] if "--network" in argv else "auto")


@pytest.mark.parametrize("page", [p for p in PAGES if of_kind(INTERACTIVE, p)], ids=str)
def test_every_interactive_command_runs_on_a_terminal(page: Path, tmp_path: Path) -> None:
    answers = {
        "Run:ai project": "nlp-lab",
        "Layout": "h200-2x8-ib",
        "Workload name": "readme",
        "Image": IMAGE,
        "Entry point": "train.py --config c.yaml",
        "Model size": "7B",
        "local batch": "4",
        "accumulation": "8",
        "Parallelism": "fsdp",
    }
    for command in of_kind(INTERACTIVE, page):
        folder = tmp_path / "-".join(command.argv[1:]).replace("/", "_")
        folder.mkdir()
        code, shown = interview([sys.executable, "-m", "runai_spec", *command.argv[1:]], folder, answers)
        assert code == 0, shown
        into = [a for a in command.argv[2:3] if not a.startswith("-")]  # `init [DIR]`
        result = run("validate", str(folder.joinpath(*into, "profile.yaml")))
        assert result.exit_code == 0 and "warning:" not in result.stderr, result.output
