"""Issue 12: the profile reader reads only regular files; render has no on-disk cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runai_spec import render
from runai_spec.errors import InputError
from runai_spec.loading import read_text


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_text(fifo)


def test_a_device_is_refused() -> None:
    with pytest.raises(InputError, match="not a regular file"):
        read_text(Path("/dev/null"))


def test_render_keeps_no_bytecode_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    render.environment.cache_clear()
    try:
        assert render.environment().bytecode_cache is None
    finally:
        render.environment.cache_clear()
    assert not any(tmp_path.rglob("*"))  # nothing written where a poisoned file could sit
