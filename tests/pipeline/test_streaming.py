"""Many-profile commands keep no result per profile in memory: the spool their reports read
back, and profile arguments that stay strings until read (issue 29 item 2)."""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from runai_spec.errors import InputError
from runai_spec.pipeline.spool import LineSpool, Names, Spooled
from runai_spec.pipeline.stream import ProfileArgs, StdinProfile


def test_spooled_items_read_back_in_order_also_in_nested_loops() -> None:
    spool: Spooled[tuple[int, str]] = Spooled()
    assert not spool and len(spool) == 0 and list(spool) == []
    items = [(i, "x" * i) for i in range(3000)]  # past the in-memory MB: on disk
    for item in items:
        spool.append(item)
    assert len(spool) == 3000 and spool
    assert list(spool) == items
    pairs = [(a[0], b[0]) for a in spool if a[0] < 3 for b in spool if b[0] < 2]
    assert pairs == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def test_a_text_spool_past_its_memory_gives_back_its_text_exactly() -> None:
    """The render sink keeps 8 MB in memory, then a temporary file: the same text either way,
    non-ASCII and an item that crosses the limit included."""
    from runai_spec.pipeline.spool import Spool

    out = io.StringIO()
    spool = Spool(out, "---\n")
    pieces = [f"{i}: \u00fcml\u00e4ut \u2713 " * 160 + "\n" for i in range(4000)]  # ~10 MB in UTF-8
    for piece in pieces:
        spool.add("name", piece)
    buffer = spool.buffer
    assert isinstance(buffer, tempfile.SpooledTemporaryFile) and vars(buffer)["_rolled"]  # on disk now
    assert spool.commit() == [] and out.getvalue() == "---\n".join(pieces)


def test_appending_after_reading_works() -> None:
    spool: Spooled[str] = Spooled()
    for word in ("a", "b", "c"):
        spool.append(word)
    assert list(spool) == ["a", "b", "c"]
    spool.append("d")
    assert list(spool) == ["a", "b", "c", "d"]


def test_names_give_the_earlier_positions_of_a_name_and_answer_membership() -> None:
    names = Names()
    many = [f"job-{i}" for i in range(5000)]  # past the filter's first size: it grows
    assert all(names.add(name) == [] for name in many)
    assert names.add("job-17") == [17] and names.add("job-17") == [17]  # the first one
    assert len(names) == 5002
    assert "job-4999" in names and "job-17" in names and "job-5000" not in names
    names.add("job-5000")  # added after a lookup: seen by the next one
    assert "job-5000" in names


def test_names_keep_8_bytes_a_name_and_a_bounded_filter() -> None:
    names = Names()
    for i in range(20_000):
        names.add(f"a-rather-long-workload-name-{i}")
    kept = sys.getsizeof(names._hashes) + sys.getsizeof(names._bits)
    assert kept < 20_000 * 40  # 8 bytes of hash and 8 to 16 of filter; a set of the names: ~120


def test_line_spool_takes_lines_with_plus_equals() -> None:
    lines = LineSpool()
    lines += ["one", "two"]
    lines += iter(["three"])
    assert list(lines) == ["one", "two", "three"]


def test_profile_args_are_kept_as_one_string_and_read_as_their_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "folder").mkdir()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"name: x\n")))
    args = ProfileArgs([str(tmp_path / "folder"), "p.yaml", "-"])
    assert isinstance(args._text, str) and len(args._starts) == 3
    assert len(args) == 3
    assert list(args)[:2] == [tmp_path / "folder" / "profile.yaml", Path("p.yaml")]
    assert isinstance(args[2], StdinProfile) and args[2] is args[-1]
    assert args[0:2] == list(args)[:2]


def test_at_file_stands_for_the_profiles_it_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    names = [f"p{i}.yaml" for i in range(2500)]  # more than one chunk of a thousand
    Path("list.txt").write_text("\n".join(["a b.yaml", "", *names]) + "\n")
    args = ProfileArgs(["first.yaml", "@list.txt", "last.yaml", "@"])
    assert len(args) == 2504
    assert args[0] == Path("first.yaml") and args[1] == Path("a b.yaml")
    assert args[2] == Path("p0.yaml") and args[2501] == Path("p2499.yaml")
    assert args[-2] == Path("last.yaml") and args[-1] == Path("@")


def test_a_missing_list_of_profiles_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        ProfileArgs([f"@{tmp_path / 'nothing.txt'}"])
    assert caught.value.file == str(tmp_path / "nothing.txt")
    assert "no such file" in caught.value.message and "./@name" in (caught.value.hint or "")


def test_validate_reads_the_profiles_of_an_at_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runai_spec.cli import main

    profile = ROOT / "examples" / "single-gpu" / "profile.yaml"
    (tmp_path / "list.txt").write_text(f"{profile}\n")
    monkeypatch.setattr("sys.argv", ["runai-spec", "validate", f"@{tmp_path / 'list.txt'}"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0


def test_validate_spools_each_field_of_a_profile_check_and_of_its_findings() -> None:
    """validate's spool writes ProfileCheck as builtins (marshal): every field of it, of each
    finding and of each location comes back, a field added to one of them included."""
    from runai_spec.errors import Location
    from runai_spec.findings import Finding
    from runai_spec.pipeline import stream

    def own(cls: Any, **given: object) -> object:
        return cls(**{name: given.get(name, f"<{cls.__name__}.{name}>") for name in cls._fields})

    findings = tuple(own(Finding, location=own(Location, line=i), rule=f"rule-{i}") for i in range(3))
    checks = [own(stream.ProfileCheck, findings=findings), own(stream.ProfileCheck, findings=())]
    spool: Spooled[stream.ProfileCheck] = Spooled(stream._check_record, stream._check_from_record)
    for check in checks:
        spool.append(check)  # type: ignore[arg-type]
    assert list(spool) == checks == list(spool)
    # the records themselves, not tuples of the same values (a NamedTuple equals those)
    back = list(spool)
    assert {type(c) for c in back} == {stream.ProfileCheck}
    assert {(type(f), type(f.location)) for c in back for f in c.findings} == {(Finding, Location)}
