"""Making a resourceVersion too old on purpose: etcd compacted up to now."""

from __future__ import annotations

import pytest

from computedomain.devcluster.controlplane import ControlPlane
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import CONFIG_MAPS


async def compact_etcd(control_plane: ControlPlane, kube: KubeClient) -> None:
    """Compact etcd up to the current revision, so any older RV is gone (410)."""
    if control_plane.workdir is None:
        pytest.skip("needs our own etcd (not an existing cluster)")
    current = (await kube.list(CONFIG_MAPS, "default", limit=1))["metadata"]["resourceVersion"]
    control_plane.compact_etcd(current)
