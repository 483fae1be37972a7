"""Issue 12, item 12: `render -o` / `render -d` replaces every file or none, and writes only
files it made itself (never through a link placed at a name it would use)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import run
from runai_spec.errors import InputError
from runai_spec.pipeline import StagedFiles


def test_a_directory_as_second_target_leaves_the_first_file_unchanged(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("old\n")
    (tmp_path / "b.yaml").mkdir()
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    with pytest.raises(InputError, match="not a regular file"):
        sink.commit()
    assert (tmp_path / "a.yaml").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]  # no temporaries


# --- a rename that fails half-way: every file already replaced is put back -------------

@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Mark a file immutable (`chattr +i`, root only); undone in teardown. Skips where the
    file system or the user cannot."""
    marked: list[Path] = []

    def mark(path: Path) -> None:
        if shutil.which("chattr") is None:
            pytest.skip("no chattr")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i refused: {done.stderr.strip()}")
        marked.append(path)

    yield mark
    for path in marked:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def two_profiles(write_profile: Callable[..., Path], base_profile: dict[str, Any]) -> list[str]:
    """Two profiles rendering a.yaml, then b.yaml."""
    paths = []
    for name in ("a", "b"):
        base_profile["name"] = name
        paths.append(str(write_profile(base_profile, f"{name}-profile.yaml")))
    return paths


@pytest.mark.parametrize("option", ["-d", "-o"])
def test_an_immutable_second_target_leaves_the_first_file_unchanged(
        tmp_path: Path, write_profile: Callable[..., Path], base_profile: dict[str, Any],
        immutable: Callable[[Path], None], option: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.yaml").write_text("old a\n")
    (out / "b.yaml").write_text("old b\n")
    immutable(out / "b.yaml")
    result = run("render", *two_profiles(write_profile, base_profile), option, str(out))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {out / 'b.yaml'}: cannot write: Operation not permitted; "
                      "no file was changed"], result.stderr
    assert "\nhint: " in result.stderr and "Traceback" not in result.stderr
    assert (out / "a.yaml").read_text() == "old a\n"  # put back
    assert (out / "b.yaml").read_text() == "old b\n"
    assert sorted(p.name for p in out.iterdir()) == ["a.yaml", "b.yaml"]  # no temporaries, backups


@pytest.fixture(params=["hard links", "no hard links"])
def links(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Backups as a second hard link, or (a file system without them) by renaming."""
    if request.param == "no hard links":
        def no_link(*args: object, **kwargs: object) -> None:
            raise PermissionError(1, "Operation not permitted")
        monkeypatch.setattr(os, "link", no_link)
    return str(request.param)


def fail_replace_on_call(monkeypatch: pytest.MonkeyPatch, which: Callable[[str, str], bool]
                         ) -> None:
    """os.replace fails for the renames `which(source, target)` picks (by name)."""
    real = os.replace

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if which(os.path.basename(src), os.path.basename(dst)):
            raise PermissionError(1, "Operation not permitted")
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def test_a_failed_second_rename_puts_the_first_file_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: str) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text(f"old {name}\n")
    sink = StagedFiles(tmp_path)
    for name in ("a", "b", "c"):
        sink.add(f"{name}.yaml", "new\n")
    # the staged file's rename over b.yaml fails; the backups' renames go through
    fail_replace_on_call(monkeypatch, lambda src, dst: ".tmp-" in src and dst == "b.yaml")
    with pytest.raises(InputError) as caught:
        sink.commit()
    assert caught.value.lines() == [
        f"error: {tmp_path / 'b.yaml'}: cannot write: Operation not permitted; no file was "
        "changed",
        "hint: check the file's permissions and attributes (`lsattr`), or choose another "
        "--out-dir folder"]
    for name in ("a", "b", "c"):
        assert (tmp_path / f"{name}.yaml").read_text() == f"old {name}\n", links
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml", "c.yaml"]


def test_a_file_new_in_the_folder_is_removed_when_a_later_rename_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b.yaml").write_text("old b\n")
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    fail_replace_on_call(monkeypatch, lambda src, dst: ".tmp-" in src and dst == "b.yaml")
    with pytest.raises(InputError, match="no file was changed"):
        sink.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yaml"]
    assert (tmp_path / "b.yaml").read_text() == "old b\n"


def test_a_backup_that_cannot_be_put_back_is_named_and_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(f"old {name}\n")
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    fail_replace_on_call(monkeypatch, lambda src, dst: dst == "b.yaml" or ".bak-" in src)
    with pytest.raises(InputError) as caught:
        sink.commit()
    message = caught.value.lines()[0]
    backup = next(p for p in tmp_path.iterdir() if p.name.startswith(".a.yaml.bak-"))
    assert f"could not undo: {tmp_path / 'a.yaml'}'s previous content is in {backup}" in message
    assert backup.read_text() == "old a\n" and caught.value.hint


def test_every_backup_is_removed_after_a_commit(tmp_path: Path, links: str) -> None:
    (tmp_path / "a.yaml").write_text("old\n")
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    assert sink.commit() == [f"wrote {tmp_path / 'a.yaml'}", f"wrote {tmp_path / 'b.yaml'}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"], links
    assert (tmp_path / "a.yaml").read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "b.yaml").stat().st_mode & 0o777 == 0o666 & ~umask  # as any new file


# --- never through a link placed at a name render would use -----------------------------

def test_render_never_writes_through_a_link_at_its_old_temporary_name(tmp_path: Path) -> None:
    """The temporary name was `.NAME.tmp-PID`: a link placed there was written through."""
    out = tmp_path / "out"
    out.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    link = out / f".llm-7b-fsdp.yaml.tmp-{os.getpid()}"  # the CLI runs in this process
    link.symlink_to("../precious.txt")
    result = run("render", "examples/multi-node/profile.yaml", "-d", str(out))
    assert result.exit_code == 0, result.output
    assert precious.read_text() == "precious\n"
    assert link.is_symlink() and not (out / "llm-7b-fsdp.yaml").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [link.name, "llm-7b-fsdp.yaml"]


def test_temporaries_and_backups_are_new_files_whatever_name_is_guessed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link already at the random name drawn (for the staged file, then for the backup) is
    skipped: the name is created exclusively, never opened or linked over."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.yaml").write_text("old\n")
    for name in (".a.yaml.tmp-guessed", ".a.yaml.bak-guessed"):
        (out / name).symlink_to("../precious.txt")
    draws = iter(["guessed", "fresh1", "guessed", "fresh2"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    sink = StagedFiles(out)
    sink.add("a.yaml", "new\n")
    sink.commit()
    assert precious.read_text() == "precious\n"
    assert (out / "a.yaml").read_text() == "new\n" and not (out / "a.yaml").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [
        ".a.yaml.bak-guessed", ".a.yaml.tmp-guessed", "a.yaml"]
