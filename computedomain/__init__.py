"""ComputeDomain controller: a drop-in replacement for the controller in NVIDIA's DRA driver."""


def distribution_version() -> str:
    """The installed `computedomain` distribution's version (what --version and the build-info
    metric report)."""
    # Imported here: importlib.metadata costs ~50 ms, and this package is imported first by
    # the controller and by its credential child, on the path to the first reconcile.
    import importlib.metadata

    try:
        return importlib.metadata.version("computedomain")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
