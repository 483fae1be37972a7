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
from runai_spec import files as pipeline
from runai_spec.errors import InputError
from runai_spec.files import StagedFiles


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
    tmp_path: Path,
    write_profile: Callable[..., Path],
    base_profile: dict[str, Any],
    immutable: Callable[[Path], None],
    option: str,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.yaml").write_text("old a\n")
    (out / "b.yaml").write_text("old b\n")
    immutable(out / "b.yaml")
    result = run("render", *two_profiles(write_profile, base_profile), option, str(out))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {out / 'b.yaml'}: cannot write: Operation not permitted; no file was changed"
    ], result.stderr
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


def fail_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exchange of the new folder with the old one fails (issue 23: DIR is replaced as a
    whole, by one rename)."""

    def refuse(a: Path, b: Path) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pipeline, "_exchange", refuse)


def hidden_beside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def test_a_failed_swap_leaves_every_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a", "b", "c"):
        (out / f"{name}.yaml").write_text(f"old {name}\n")
    (out / "notes.txt").write_text("mine\n")
    sink = StagedFiles(out)
    for name in ("a", "b", "c"):
        sink.add(f"{name}.yaml", "new\n")
    fail_swap(monkeypatch)
    with pytest.raises(InputError) as caught:
        sink.commit()
    assert caught.value.lines() == [
        f"error: {out}: cannot write: Operation not permitted; no file was changed",
        "hint: check the folder's permissions and attributes (`lsattr`), or choose another --out-dir folder",
    ]
    for name in ("a", "b", "c"):
        assert (out / f"{name}.yaml").read_text() == f"old {name}\n", links
    assert sorted(p.name for p in out.iterdir()) == ["a.yaml", "b.yaml", "c.yaml", "notes.txt"]
    assert hidden_beside(out) == []  # the new folder is gone again


def test_a_file_new_in_the_folder_never_appears_when_the_swap_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b.yaml").write_text("old b\n")
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    fail_swap(monkeypatch)
    with pytest.raises(InputError, match="no file was changed"):
        sink.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yaml"]
    assert (tmp_path / "b.yaml").read_text() == "old b\n"


def test_a_previous_set_that_cannot_be_removed_is_named_and_the_next_render_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.yaml").write_text("old a\n")
    sink = StagedFiles(out)
    sink.add("a.yaml", "new\n")
    real = shutil.rmtree

    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(shutil, "rmtree", refuse)
    lines = list(sink.commit())
    (kept,) = hidden_beside(out)
    assert lines == [
        f"wrote {out / 'a.yaml'}",
        f"warning: the previous files stay in {out.parent / kept}: Operation not permitted",
    ]
    assert (out / "a.yaml").read_text() == "new\n"
    assert (out.parent / kept / "a.yaml").read_text() == "old a\n"
    monkeypatch.setattr(shutil, "rmtree", real)
    monkeypatch.setattr(pipeline, "_STALE_S", -1.0)  # no render holds it locked: stale at once
    again = StagedFiles(out)
    again.add("a.yaml", "newer\n")
    assert list(again.commit()) == [f"wrote {out / 'a.yaml'}"]  # read: its list of names is closed
    assert hidden_beside(out) == [] and (out / "a.yaml").read_text() == "newer\n"


def test_every_backup_is_removed_after_a_commit(tmp_path: Path, links: str) -> None:
    (tmp_path / "a.yaml").write_text("old\n")
    sink = StagedFiles(tmp_path)
    sink.add("a.yaml", "new\n")
    sink.add("b.yaml", "new\n")
    assert list(sink.commit()) == [f"wrote {tmp_path / 'a.yaml'}", f"wrote {tmp_path / 'b.yaml'}"]
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    assert list(sink.commit()) == [f"wrote {out / 'a.yaml'}"]
    assert precious.read_text() == "precious\n"
    assert (out / "a.yaml").read_text() == "new\n" and not (out / "a.yaml").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [".a.yaml.bak-guessed", ".a.yaml.tmp-guessed", "a.yaml"]
