"""runai-spec: approved-preset PyTorchJob manifests for Run:ai clusters."""

__version__ = "0.1.0"

import os as _os

# runai-spec uses no pydantic plugins; looking for them scans every installed package's
# entry points (~20 ms of each short command).
_os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
