"""A control plane made ready for ComputeDomains: CRDs Established, a fleet of fake GB200 nodes
(with ResourceSlices) created, every node Ready. Serves `up`, the demo, the tests and the
benchmark."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.crds import CRD_DIR, apply_crds
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import NAMESPACES
from computedomain.sim.fleet import FleetSpec
from computedomain.sim.install import create_fleet, wait_nodes_ready


async def ensure_namespace(client: KubeClient, name: str) -> None:
    """The namespace exists (made now, or already there)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    try:
        await client.create(NAMESPACES, body)
    except ApiError as error:
        if not error.is_already_exists:
            raise


async def populate(
    cp: ControlPlane,
    spec: FleetSpec,
    ready_timeout: float,
    log: Callable[[str], None] = lambda _line: None,
) -> dict[str, float]:
    """Apply the CRDs (if ``crds/`` has any), create the fleet and wait for Ready nodes.
    Returns the seconds each step took (``crds``, ``fleet_create``, ``fleet_ready``)."""
    timings: dict[str, float] = {}
    api = await api_client_from_kubeconfig(cp.kubeconfig)
    try:
        t = time.monotonic()
        crds = await apply_crds(api, CRD_DIR)
        timings["crds"] = time.monotonic() - t
        log(f"{len(crds)} CRDs Established in {timings['crds']:.1f}s")
        t = time.monotonic()
        names = await create_fleet(api, spec)
        timings["fleet_create"] = time.monotonic() - t
        log(
            f"created {len(names)} nodes + ResourceSlices ({spec.racks} racks x "
            f"{spec.nodes_per_rack}, {spec.non_fabric} non-fabric) "
            f"in {timings['fleet_create']:.1f}s"
        )
        t = time.monotonic()
        await wait_nodes_ready(api, names, ready_timeout)
        timings["fleet_ready"] = time.monotonic() - t
        log(f"all {len(names)} nodes Ready after another {timings['fleet_ready']:.1f}s")
    finally:
        await api.close()
    return timings


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def add_fleet_arguments(parser: argparse.ArgumentParser, *, racks: int, non_fabric: int) -> None:
    """``--racks``, ``--nodes-per-rack``, ``--non-fabric`` and ``--seed`` (see ``fleet_spec``)."""
    parser.add_argument(
        "--racks", type=_non_negative, default=racks, help="NVL72 racks (one NVLink clique each)"
    )
    parser.add_argument(
        "--nodes-per-rack", type=int, default=18, help="p6e-gb200.36xlarge nodes per rack"
    )
    parser.add_argument(
        "--non-fabric",
        type=_non_negative,
        default=non_fabric,
        help="GPU nodes outside any NVLink clique (no nvidia.com/gpu.clique label)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the fleet's IDs (and the simulator's choices)"
    )


def fleet_spec(args: argparse.Namespace) -> FleetSpec:
    return FleetSpec(
        racks=args.racks,
        nodes_per_rack=args.nodes_per_rack,
        non_fabric=args.non_fabric,
        seed=args.seed,
    )
