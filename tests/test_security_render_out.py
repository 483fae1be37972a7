"""Issue 12, item 12: `render -o` replaces every file or none."""

from __future__ import annotations

from pathlib import Path

import pytest

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
