"""runai-spec: approved-preset PyTorchJob manifests for Run:ai clusters."""

__version__ = "0.1.0"
