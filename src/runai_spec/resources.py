"""The data shipped with the package (templates/, presets/): found installed or in a checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_dir(name: str) -> Path:
    """A top-level data folder (templates/, presets/): inside the installed wheel, else the
    source checkout's."""
    packaged = Path(str(resources.files("runai_spec"))) / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name


def inside_installed_package(path: Path) -> bool:
    """PATH lies inside the installed runai_spec package (a wheel's site-packages), where
    nothing is written: a reinstall replaces it, and it is no reviewed repository."""
    package = Path(str(resources.files("runai_spec"))).resolve()
    return path.resolve().is_relative_to(package)
