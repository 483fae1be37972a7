"""constraints.txt pins the test environment (issue 37 item 4): every package CI and the benchmarks
install, at one version each, within the ranges pyproject.toml gives users; the README's test
command installs with it. Run as a script, this file writes it from the virtualenv (docs/ci.md)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
CONSTRAINT_OPTION = "-c constraints.txt"
REFRESH = ".venv/bin/python tests/project/test_constraints.py"
HEADER = f"""\
# The test environment, pinned (issue 37 item 4): the README's test command and .ci/run install
# with `{CONSTRAINT_OPTION}`, so that CI and the benchmarks measure the same versions. Users
# installing the package keep pyproject.toml's ranges. Written by `{REFRESH}`
# from the virtualenv (docs/ci.md); tests/project/test_constraints.py checks it against pyproject.
"""
VALUED = {"-c", "--constraint", "-e", "--editable", "-r", "--requirement"}  # pip's options with a value
TEST_COMMAND = re.compile(r"<!-- test-command -->\n```sh\n(.*?)\n```", re.S)


def constraints_text(frozen: str) -> str:
    """`pip freeze --all --exclude-editable --exclude pip`'s output as constraints.txt: a local
    version label dropped (torch's `+cpu`: the same release from a local wheel or from the index
    satisfies the pin), sorted by name, under HEADER."""
    pins = []
    for line in frozen.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        release = Version(spec.version).public
        pins.append((canonicalize_name(requirement.name), f"{requirement.name}=={release}"))
    return HEADER + "".join(f"{line}\n" for _, line in sorted(pins))


def pins() -> dict[str, Requirement]:
    """constraints.txt's pins by canonical name."""
    found: dict[str, Requirement] = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            name = canonicalize_name(requirement.name)
            assert name not in found, f"constraints.txt pins {name} twice"
            found[name] = requirement
    return found


def readme_test_command() -> str:
    found = TEST_COMMAND.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md: no test command after <!-- test-command -->"
    return found.group(1)


def install_requirements() -> list[Requirement]:
    """What the README's test command installs by name besides the project (torch==...)."""
    words = shlex.split(readme_test_command().split(" && ")[0])[2:]  # past `.venv/bin/pip install`
    named, before = [], ""
    for word in words:
        if not word.startswith("-") and before not in VALUED:
            named.append(Requirement(word))
        before = word
    return named


def declared() -> list[Requirement]:
    """Every dependency pyproject.toml names: the package's, each extra's, the build system's."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    names = [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]
    for extra in pyproject["project"]["optional-dependencies"].values():
        names += extra
    return [Requirement(name) for name in names]


def test_each_line_pins_one_release_exactly() -> None:
    for name, requirement in pins().items():
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{name}: not an exact pin: {requirement}"
        assert not requirement.marker and not requirement.extras and not requirement.url, requirement
        assert Version(specs[0].version).local is None, f"{name}: a local version label: {requirement}"


def test_every_dependency_pyproject_and_the_test_command_name_is_pinned_within_its_range() -> None:
    pinned = pins()
    wanted = [*declared(), *install_requirements()]
    assert {"jinja2", "pydantic", "typer", "pytest", "mkdocs", "torch"} <= {
        canonicalize_name(r.name) for r in wanted
    }
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} ({requirement}) is not pinned in constraints.txt; refresh: {REFRESH}"
        (pin,) = pinned[name].specifier
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"constraints.txt pins {name}=={pin.version}, outside pyproject's {requirement}"
        )


def test_the_test_command_installs_with_the_constraints_and_the_users_install_does_not() -> None:
    install = readme_test_command().split(" && ")[0]
    assert f" {CONSTRAINT_OPTION} " in f" {install} ", install
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"```sh\n(python3 -m venv .*)\n```", readme)
    assert first and "pip install -e ." in first.group(1) and "-c " not in first.group(1)
    # .ci/run runs the README's install step, and refuses one without the constraints
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "<!-- test-command -->" in ci and CONSTRAINT_OPTION in ci


def test_the_refresh_writes_the_freeze_sorted_without_local_labels() -> None:
    frozen = "Jinja2==3.1.6\ntorch==2.13.0+cpu\n# Editable install (runai-spec==0.1.0)\naiohttp==3.14.5\n"
    text = constraints_text(frozen)
    assert text == HEADER + "aiohttp==3.14.5\nJinja2==3.1.6\ntorch==2.13.0\n"
    # the committed file is in the same form: its header and its pins sorted by name
    committed = CONSTRAINTS.read_text(encoding="utf-8")
    assert committed.startswith(HEADER)
    assert constraints_text(committed.removeprefix(HEADER)) == committed


def main() -> None:
    frozen = subprocess.run(
        # --all: setuptools too (torch requires it); pip itself is .ci/run's to upgrade
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable", "--exclude", "pip"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    CONSTRAINTS.write_text(constraints_text(frozen), encoding="utf-8")
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
