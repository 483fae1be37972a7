"""The data shipped with the package (templates/, presets/): found installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

# The package's folder: what importlib.resources.files("runai_spec") gives for a package on
# the file system (installed or a checkout's src/), without importing importlib's readers and
# zipfile at every start-up (issue 29).
PACKAGE = Path(__file__).parent


def shipped_dir(name: str) -> Path:
    """A top-level data folder (templates/, presets/): inside the installed wheel, else the
    source checkout's."""
    packaged = PACKAGE / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name


def inside_installed_package(path: Path) -> bool:
    """PATH lies inside the installed runai_spec package (a wheel's site-packages), where
    nothing is written: a reinstall replaces it, and it is no reviewed repository."""
    return path.resolve().is_relative_to(PACKAGE.resolve())
