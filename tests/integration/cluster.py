"""Starting the real control plane for integration tests, with CRDs and the test fleet."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest

from computedomain.devcluster.assets import AssetsUnavailableError
from computedomain.devcluster.cluster import populate
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.sim.fleet import FleetSpec, build_nodes

TEST_FLEET = FleetSpec(racks=4, non_fabric=2, seed=1)
# Start-up figures, shown in the terminal summary so every run reports them.
STARTUP: dict[str, float] = {}


def control_plane_required() -> bool:
    return (
        os.environ.get("COMPUTEDOMAIN_REQUIRE_CONTROL_PLANE") == "1"
        or os.environ.get("CI", "").lower() == "true"
    )


def run_control_plane(label: str = "") -> Iterator[ControlPlane]:
    """Body of a control-plane fixture: start, apply CRDs, make the fleet Ready, yield, stop.
    Start-up figures go into STARTUP under names prefixed with `label`."""
    try:
        cp = ControlPlane.start(log=lambda line: print(f"devcluster: {line}"))
    except AssetsUnavailableError as error:
        if control_plane_required():
            pytest.fail(f"control plane binaries unavailable: {error}")
        pytest.skip(f"no control-plane binaries found or built: {error}")
    try:
        STARTUP.update({f"{label}control plane {k}": v for k, v in cp.timings.items()})
        begin = time.monotonic()
        asyncio.run(populate(cp, TEST_FLEET, ready_timeout=60))
        STARTUP[f"{label}CRDs + {TEST_FLEET.total_nodes} Ready fleet nodes"] = round(
            time.monotonic() - begin, 2
        )
        yield cp
    finally:
        cp.stop()


def fleet_node_names() -> list[str]:
    """The test fleet's node names: racks first, then non-fabric."""
    return [node["metadata"]["name"] for node in build_nodes(TEST_FLEET)]
