"""ComputeDomain controller: a drop-in replacement for the controller in NVIDIA's DRA driver."""

import importlib.metadata


def distribution_version() -> str:
    """The installed `computedomain` distribution's version (what --version and the build-info
    metric report)."""
    try:
        return importlib.metadata.version("computedomain")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
