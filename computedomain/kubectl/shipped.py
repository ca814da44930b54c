"""What the plugin carries besides code, for an install without a checkout (pip or krew): our
CRDs.

The CRDs have one source, the repository's ``crds/``: the wheel carries it as
``computedomain/crds`` (pyproject's force-include), and so does the krew zipapp (hack/krew.py).
Run from a checkout, the package has no such directory and ``crds/`` is read where it is.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from computedomain.api.constants import CRDS_COMMAND

__all__ = ["CRDS_COMMAND", "crds"]


def _crd_directory() -> Traversable:
    packaged = resources.files("computedomain").joinpath("crds")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "crds"


def crds() -> str:
    """Our CRDs as one multi-document YAML stream, in file-name order."""
    files = sorted(
        (item for item in _crd_directory().iterdir() if item.name.endswith(".yaml")),
        key=lambda item: item.name,
    )
    if not files:
        raise FileNotFoundError("this build of the plugin carries no CRDs")
    texts = (item.read_text(encoding="utf-8") for item in files)
    return "".join(f"---\n{text.rstrip()}\n" for text in texts)
