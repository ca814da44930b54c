"""The clique inventory gauges of one replica (``computedomain_clique_nodes``) while NVIDIA's
kubelet plugin (v0.5) has removed the clique label from nodes it restarts on: they are counted
under ``<label missing>``, not dropped, and are back in their clique with the label."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from computedomain.api import constants as c
from computedomain.app import INVENTORY_INTERVAL, ControllerProcess
from computedomain.config import environ, parse_settings
from computedomain.domain.topology import LABEL_MISSING
from computedomain.runtime.client import ApiClientConnection, KubeClient
from computedomain.runtime.metrics import RuntimeMetrics
from tests.kit.clock import FakeClock

UID = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde000001"
CLIQUE = "rack0.0"


def node(name: str, clique: str | None, holder: str | None = None, rv: int = 1) -> dict[str, Any]:
    labels = {}
    if clique:
        labels[c.GPU_CLIQUE_NODE_LABEL] = clique
    if holder:
        labels[c.CD_LABEL] = holder
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": str(rv)},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def domain() -> dict[str, Any]:
    """A CD whose daemons on n1 and n2 report CLIQUE."""
    entries = [
        {"name": n, "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": i, "status": "Ready"}
        for i, n in enumerate(("n1", "n2"))
    ]
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {"name": "cd", "namespace": "team", "uid": UID},
        "status": {"status": "Ready", "nodes": entries},
    }


def inventory(registry: CollectorRegistry) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "computedomain_clique_nodes":
                clique, state = sample.labels["clique"], sample.labels["state"]
                found.setdefault(clique, {})[state] = sample.value
    return found


async def test_nodes_whose_clique_label_goes_are_counted_as_label_missing() -> None:
    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    client = KubeClient(ApiClientConnection(ApiClient(configuration)))
    settings = parse_settings([], environ(namespace="nvidia-dra-driver-gpu"))
    registry, clock = CollectorRegistry(), FakeClock()
    process = ControllerProcess(settings, client, registry, RuntimeMetrics(registry), clock)
    nodes, cds = process.caches.nodes, process.caches.compute_domains
    labelled = [node("n1", CLIQUE, UID), node("n2", CLIQUE, UID), node("n3", CLIQUE)]
    cpu = node("cpu", None)  # never labelled: no NVLink, in no row of the gauge
    nodes.feed_list([*labelled, cpu])
    cds.feed_list([domain()])
    task = asyncio.create_task(process._inventory_forever())
    try:
        await clock.advance(0)
        full = {"total": 3.0, "ready": 3.0, "held": 2.0, "free": 1.0}
        assert inventory(registry) == {CLIQUE: full}

        # The plugin restarts on n1 (held: its domain's daemon reports the clique) and n3
        # (free: the inventory saw it labelled).
        nodes.feed_list([node("n1", None, UID, rv=2), labelled[1], node("n3", None, rv=2), cpu])
        await clock.advance(INVENTORY_INTERVAL)
        assert inventory(registry) == {
            CLIQUE: {"total": 1.0, "ready": 1.0, "held": 1.0, "free": 0.0},
            LABEL_MISSING: {"total": 2.0, "ready": 2.0, "held": 1.0, "free": 1.0},
        }

        # Back: as before, and the <label missing> series go.
        nodes.feed_list([node("n1", CLIQUE, UID, rv=3), labelled[1], node("n3", CLIQUE, rv=3), cpu])
        await clock.advance(INVENTORY_INTERVAL)
        assert inventory(registry) == {CLIQUE: full}
    finally:
        task.cancel()
        await client.close()
