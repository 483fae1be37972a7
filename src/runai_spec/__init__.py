"""runai-spec: approved-preset PyTorchJob manifests for Run:ai clusters."""

__version__ = "0.1.0"

import os as _os
import sys as _sys
import types as _types

# runai-spec uses no pydantic plugins; looking for them scans every installed package's
# entry points (~20 ms of each short command).
_os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# pydantic looks its plugins up for every model (pydantic/plugin/_schema_validator.py:
# `from ._loader import get_plugins`), and its loader module imports importlib.metadata
# (and email, csv: ~40 M instructions, 3 % of `render`) before reading the variable
# above. The loader is imported only where get_plugins would look: while plugins are
# disabled its answer is the one pydantic's own gives, `()` (issue 29).
_PLUGINS_OFF = ("__all__", "1", "true")  # pydantic's get_plugins: the values that disable all
_LOADER = "pydantic.plugin._loader"


def _real_loader() -> _types.ModuleType:
    """pydantic's own loader module, imported on first use outside sys.modules' stand-in."""
    loaded = _lazy_loader.__dict__.get("_real")
    if loaded is None:
        import importlib.machinery
        import importlib.util

        import pydantic.plugin

        spec = importlib.machinery.PathFinder.find_spec(_LOADER, pydantic.plugin.__path__)
        if spec is None or spec.loader is None:
            raise ImportError(_LOADER)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        _lazy_loader.__dict__["_real"] = loaded
    return loaded


def _get_plugins() -> object:
    if _os.getenv("PYDANTIC_DISABLE_PLUGINS") in _PLUGINS_OFF:
        return ()
    return _real_loader().get_plugins()


def _loader_attribute(name: str) -> object:
    # the import system asks a module for __path__, __spec__...: a stand-in has none
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_real_loader(), name)


_lazy_loader = _types.ModuleType(_LOADER, "pydantic's plugin loader, imported when plugins may be on.")
_lazy_loader.get_plugins = _get_plugins  # type: ignore[attr-defined]
_lazy_loader.__getattr__ = _loader_attribute  # type: ignore[method-assign]
_sys.modules.setdefault(_LOADER, _lazy_loader)
