"""A built wheel carries templates/ and presets/ and renders outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_wheel_installs_and_renders_from_anywhere(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "runai_spec/templates/pytorchjob.json.j2" in names
    assert "runai_spec/presets/approvals.yaml" in names
    assert "runai_spec/presets/allowed_signers" in names  # installed approvals verify
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    work = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "examples" / "multi-node", work)
    env = dict(os.environ, PYTHONPATH=str(target))
    probe = (
        "import runai_spec, sys; print(runai_spec.__file__);"
        "from runai_spec.cli import main; sys.argv=['runai-spec','render','profile.yaml'];"
        "main()"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=work, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    first, rest = result.stdout.split("\n", 1)
    assert first.startswith(str(target))
    assert rest == (work / "manifest.yaml").read_text()
    # the installed presets are never written: approve needs the presets repository (--dir)
    ledger = (target / "runai_spec" / "presets" / "approvals.yaml").read_bytes()
    approve = (
        "import sys; from runai_spec.cli import main; sys.argv=['runai-spec','presets',"
        "'approve','h200-8gpu','--key','id_ed25519']; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", approve], cwd=work, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert "--dir: the shipped presets are inside the installed package" in result.stderr
    assert (target / "runai_spec" / "presets" / "approvals.yaml").read_bytes() == ledger
