"""Import discipline at run time: kubernetes and torch stay off the offline paths (test_layering.py
walks the static imports)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PACKAGE = ROOT / "src" / "runai_spec"
PROBE = """
import sys
from runai_spec.cli import main
for argv in {argvs!r}:
    sys.argv = argv
    try:
        main()
    except SystemExit:
        pass
    bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'torch', 'jsonschema'))
    print('IMPORTED:' + ' '.join(argv[1:3]) + ':' + ','.join(bad))
"""
MULTI = str(ROOT / "examples/multi-node/profile.yaml")
OFFLINE = [
    ["runai-spec", "--help"],
    ["runai-spec", "validate", MULTI],
    ["runai-spec", "render", MULTI],
    ["runai-spec", "render", MULTI, "--explain"],
    ["runai-spec", "render", MULTI, "--smoke"],
    ["runai-spec", "plan", MULTI],
    ["runai-spec", "diff", "--help"],
    ["runai-spec", "diff", MULTI, "--against", str(ROOT)],
    ["runai-spec", "presets", "verify"],
    *[
        ["runai-spec", command, "--help"]
        for command in ("submit", "status", "logs", "delete", "rehearse", "init")
    ],
]


def test_offline_commands_and_every_help_never_import_kubernetes_or_torch() -> None:
    # One interpreter runs them in turn (imports only accumulate), printing after each
    # command what has been imported so far: the first offender is the first non-empty line.
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(argvs=OFFLINE)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("IMPORTED:")]
    assert len(lines) == len(OFFLINE)
    assert [ln for ln in lines if not ln.endswith(":")] == []
