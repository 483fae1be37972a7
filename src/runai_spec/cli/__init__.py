"""Typer commands by group: parse, call the core, print; one boundary maps errors to codes."""

from __future__ import annotations

from importlib import import_module

from .common import app, main

# each module registers its commands; this order is the order of `--help`
for _group in ("offline", "init", "cluster", "rehearse", "presets"):
    import_module(f"{__name__}.{_group}")

__all__ = ["app", "main"]
