"""An outdated ComputeDomain CRD after a swap: which of our status fields it would prune, and
what to say about it (pure: the monitor in ``coexistence.py`` and ``kubectl cdom doctor`` read
it).

NVIDIA's chart installs its CRDs once and never upgrades them, so after a swap the installed
ComputeDomain CRD may lack the status fields we add. The apiserver then prunes them silently:
conditions vanish, printer columns go empty, and a status written with them would differ from
the stored one forever (a write loop). We detect the missing fields, write only the upstream
fields, and say what to run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.domain import modes

CD_CRD_NAME = c.CD_CRD_NAME
CLIQUE_CRD_NAME = c.CLIQUE_CRD_NAME
CRD_INSTALL_COMMAND = c.CRD_INSTALL_COMMAND
# Status fields NVIDIA's CRD has, and ours besides: defined with the status modes that use them.
UPSTREAM_STATUS_FIELDS = modes.UPSTREAM_STATUS_FIELDS
OUR_STATUS_FIELDS = modes.OUR_STATUS_FIELDS
CRD_UPGRADE_COMMAND = c.CRD_UPGRADE_COMMAND


def missing_status_fields(crd: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Our status fields the installed CD CRD would prune (empty when it keeps them all).

    An absent CRD or one without our version reports nothing here: that is another failure,
    with its own message.
    """
    if crd is None:
        return ()
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != c.VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        status = (schema.get("properties") or {}).get("status") or {}
        if status.get("x-kubernetes-preserve-unknown-fields"):
            return ()
        properties = status.get("properties") or {}
        return tuple(name for name in OUR_STATUS_FIELDS if name not in properties)
    return ()


def crd_outdated_message(missing: Iterable[str]) -> str:
    return (
        f"the installed ComputeDomain CRD lacks status fields {', '.join(missing)}: the apiserver "
        "drops them, so conditions and `kubectl wait --for=condition=Ready` do not work; only "
        f"status.status and status.nodes are written. Upgrade the CRD: {CRD_UPGRADE_COMMAND} "
        "(or apply the chart's crds/, the same files)"
    )
