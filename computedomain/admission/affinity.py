"""The JSONPatch that pins a pod to one clique (pure).

Node selector terms are ORed and the expressions within one term ANDed, so the clique
requirement goes into every term the pod already has (one new term when it has none): the pod
keeps every constraint of its own, and every way it can match now needs the clique too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from computedomain.api import constants as c

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def clique_requirement(clique: str) -> dict[str, Any]:
    return {"key": c.GPU_CLIQUE_NODE_LABEL, "operator": "In", "values": [clique]}


def with_clique(affinity: Mapping[str, Any] | None, clique: str) -> dict[str, Any]:
    """``affinity`` (a pod's ``spec.affinity``, unchanged) with the clique required."""
    merged: dict[str, Any] = copy.deepcopy(dict(affinity or {}))
    node_affinity = merged.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault(_REQUIRED, {})
    terms = required.get("nodeSelectorTerms") or [{}]
    requirement = clique_requirement(clique)
    for term in terms:
        expressions = term.setdefault("matchExpressions", [])
        if requirement not in expressions:
            expressions.append(requirement)
    required["nodeSelectorTerms"] = terms
    return merged


def clique_patch(pod: Mapping[str, Any], clique: str) -> list[dict[str, Any]]:
    """One ``add`` of the whole merged affinity (``add`` replaces a member that exists)."""
    affinity = (pod.get("spec") or {}).get("affinity")
    return [{"op": "add", "path": "/spec/affinity", "value": with_clique(affinity, clique)}]
