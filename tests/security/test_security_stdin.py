"""Issue 12, item 13: a profile on standard input (`-`) is read up to the loader's cap and no
further; an endless stream is refused as a too-large file is, without filling memory."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path

from conftest import ROOT
from runai_spec.load.yaml import MAX_BYTES

CHUNK = 1 << 16
SENT_AT_MOST = 64 << 20  # the writer's own end: far more than the cap


def validate_stdin_fed(limit: int, folder: Path) -> tuple[int, str, int]:
    """`validate -` fed zero bytes through a pipe until the reader stops reading (or limit);
    (exit code, stderr, bytes the pipe took)."""
    with (folder / "stderr").open("w+b") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runai_spec", "validate", "-"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        sent = 0

        def feed() -> None:  # the only one to touch the pipe (communicate() would close it)
            nonlocal sent
            assert proc.stdin is not None
            try:
                while sent < limit:
                    proc.stdin.write(b"\0" * CHUNK)
                    sent += CHUNK
                proc.stdin.close()
            except BrokenPipeError:  # the reader stopped reading: as it should
                with contextlib.suppress(BrokenPipeError):  # closed, its last bytes unsent
                    proc.stdin.close()

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            code = proc.wait(timeout=60)
        finally:
            proc.kill()
        writer.join(timeout=10)
        err.seek(0)
        return code, err.read().decode(), sent


def test_an_endless_profile_on_stdin_is_refused_after_the_cap(tmp_path: Path) -> None:
    code, stderr, sent = validate_stdin_fed(SENT_AT_MOST, tmp_path)
    assert code == 2, stderr
    # the same lines a file one byte too large gets, under the name <stdin>
    big = tmp_path / "big.yaml"
    big.write_bytes(b"\0" * (MAX_BYTES + 1))
    as_file = subprocess.run(
        [sys.executable, "-m", "runai_spec", "validate", str(big)], cwd=ROOT, capture_output=True, timeout=60
    )
    assert as_file.returncode == 2
    assert stderr.splitlines() == [
        line.replace(str(big), "<stdin>") for line in as_file.stderr.decode().splitlines()
    ]
    assert stderr.splitlines() == [
        f"error: <stdin>: file is larger than {MAX_BYTES} bytes",
        "hint: profiles and presets are small; is this the right file?",
    ]
    # it stopped reading at the cap: the writer was cut off long before its own end
    assert sent < 16 * MAX_BYTES, f"the whole stream was read: {sent} bytes"


def test_a_profile_on_stdin_below_the_cap_is_read_whole() -> None:
    profile = (ROOT / "examples" / "multi-node" / "profile.yaml").read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "runai_spec", "validate", "-"],
        cwd=ROOT,
        input=profile + b"#" * (MAX_BYTES - len(profile) - 1) + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert b"ok: <stdin>: llm-7b-fsdp" in result.stderr
