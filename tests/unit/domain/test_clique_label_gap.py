"""The clique label may go away for a while (issue 30): since NVIDIA's v0.5 its kubelet plugin
sets ``nvidia.com/gpu.clique`` when it starts and removes it when it stops, so a rolling upgrade
of the plugin takes the label off every GPU node in turn. The daemons keep running and keep
reporting their clique: a Ready domain stays as it is (no status write, no Event), and its
clique gauge keeps counting the clique its daemons report."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    UID,
    World,
    compute_domain,
    labelled,
    make_world,
    service_account,
    with_children,
)

KEY = CDKey(NS, "cd")
CLIQUE = "rack0.0"
NODES = ("n1", "n2", "n3", "n4")
STATUS_PATCH = ("patch", "computedomains/status", f"{NS}/cd")
# Another domain, holding node o1 in the same clique.
OTHER_UID = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde000002"


def node(name: str, holder: str | None, clique: str | None = CLIQUE) -> dict[str, Any]:
    labels = {}
    if clique is not None:
        labels[c.GPU_CLIQUE_NODE_LABEL] = clique
    if holder is not None:
        labels[c.CD_LABEL] = holder
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def daemon_pod(node_name: str, since: str) -> dict[str, Any]:
    pod = labelled(f"{DAEMON}-{node_name}", DRIVER_NS)
    pod["metadata"]["creationTimestamp"] = since
    pod["spec"] = {"nodeName": node_name}
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since}],
        "containerStatuses": [{"name": c.DAEMON_CONTAINER, "started": True, "ready": True}],
    }
    return pod


def clique_object() -> dict[str, Any]:
    """The CD's clique: every daemon reports itself Ready in CLIQUE."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CLIQUE_KIND,
        "metadata": {
            "name": c.clique_name(UID, CLIQUE),
            "namespace": DRIVER_NS,
            "labels": {c.CD_LABEL: UID, c.CLIQUE_ID_LABEL: CLIQUE},
        },
        "daemons": [
            {
                "nodeName": name,
                "ipAddress": f"10.0.0.{i + 1}",
                "cliqueID": CLIQUE,
                "index": i,
                "status": c.STATUS_READY,
            }
            for i, name in enumerate(NODES)
        ],
    }


def other_domain() -> dict[str, Any]:
    """Another Ready domain whose daemon on o1 reports CLIQUE."""
    other = compute_domain(name="other", uid=OTHER_UID)
    other["status"] = {
        "status": c.STATUS_READY,
        "nodes": [
            {
                "name": "o1",
                "ipAddress": "10.0.1.1",
                "cliqueID": CLIQUE,
                "index": 0,
                "status": c.STATUS_READY,
            }
        ],
    }
    return other


class GapWorld:
    """A Ready CD of four nodes in one clique (cliques protocol), optionally beside another
    domain in the same clique; its Nodes' labels are what each test changes."""

    def __init__(self, *, shared: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.world: World = make_world(registry=self.registry)
        world = self.world
        daemonset = labelled(DAEMON, DRIVER_NS)
        env = [{"name": c.FEATURE_GATES_ENV, "value": f"{c.GATE_CLIQUES}=true"}]
        container = {"name": c.DAEMON_CONTAINER, "env": env}
        daemonset["spec"] = {"template": {"spec": {"containers": [container]}}}
        self.stores = with_children(world, daemonset)
        self.stores["cds"][0]["spec"]["numNodes"] = len(NODES)
        if shared:
            self.stores["cds"].append(world.client.add(COMPUTE_DOMAINS, other_domain()))
        since = format_time(world.clock.wall())
        self.pods = [world.client.add(r.PODS, daemon_pod(n, since)) for n in NODES]
        self.cliques = [world.client.add(CLIQUES, clique_object())]
        self.shared = shared

    def nodes(self, *, own: bool = True, other: bool = True) -> list[dict[str, Any]]:
        """The Nodes, with the clique label on the CD's own (``own``) and the other domain's
        (``other``) nodes or not."""
        nodes = [node(n, UID, CLIQUE if own else None) for n in NODES]
        if self.shared:
            nodes.append(node("o1", OTHER_UID, CLIQUE if other else None))
        return nodes

    def fill(self, nodes: list[dict[str, Any]]) -> None:
        cds = [self.stored_cd(), *self.stores["cds"][1:]]
        stores = {**self.stores, "cds": cds}
        self.world.fill(
            **stores,
            pods=self.pods,
            cliques=self.cliques,
            nodes=nodes,
            service_accounts=[service_account()],
        )

    def stored_cd(self) -> dict[str, Any]:
        return self.world.client.objects[("computedomains", NS, "cd")]

    def status(self) -> dict[str, Any]:
        return dict(self.stored_cd().get("status") or {})

    def gauge(self, metric: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(generate_latest(self.registry).decode()):
            for sample in family.samples:
                if sample.name == metric and sample.labels == labels:
                    return float(sample.value)
        return None


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {x["type"]: (x["status"], x["reason"]) for x in status.get("conditions") or []}


async def ready(gap: GapWorld) -> dict[str, Any]:
    """Brings the CD to Ready with every label in place; returns its status."""
    gap.fill(gap.nodes())
    await gap.world.reconcile(KEY)
    status = gap.status()
    assert status["status"] == c.STATUS_READY
    assert conditions(status)["Ready"] == ("True", "AllNodesJoined")
    await gap.world.clock.advance(60)  # past every coalescing window
    gap.world.recorder.events.clear()
    return status


async def test_a_ready_domain_whose_nodes_lose_the_label_is_left_as_it_is() -> None:
    gap = GapWorld()
    before = await ready(gap)
    assert before["cliqueCount"] == 1
    assert gap.gauge("computedomain_cliques", namespace=NS, name="cd") == 1

    # The kubelet plugin stops on every node of the domain: the label goes, the daemons stay.
    gap.fill(gap.nodes(own=False))
    await gap.world.reconcile(KEY)
    assert gap.world.client.calls == []  # no status write
    assert gap.world.recorder.events == []
    assert gap.status() == before
    # The daemons still report their clique: the gauge does not fall to 0.
    assert gap.gauge("computedomain_cliques", namespace=NS, name="cd") == 1
    assert gap.gauge("computedomain_clique_split", namespace=NS, name="cd") == 0

    # The plugin is back: the label too, and still nothing to write.
    gap.fill(gap.nodes())
    await gap.world.reconcile(KEY)
    assert gap.world.client.calls == []
    assert gap.world.recorder.events == []
    assert gap.status() == before


async def test_a_shared_clique_stays_shared_while_labels_are_missing() -> None:
    gap = GapWorld(shared=True)
    gap.fill(gap.nodes())
    await gap.world.reconcile(KEY)
    assert conditions(gap.status())["ExclusiveClique"] == ("False", "CliqueShared")
    assert ("Warning", "CliqueShared") in gap.world.recorder.events
    before = await ready(gap)

    # The plugin restarts on the other domain's node, then on ours, then on all at once: the
    # other domain's daemon still reports the clique, so the sharing is still true.
    for own, other in ((True, False), (False, True), (False, False), (True, True)):
        gap.fill(gap.nodes(own=own, other=other))
        await gap.world.reconcile(KEY)
        assert gap.world.client.calls == [], (own, other)
        assert gap.world.recorder.events == [], (own, other)
        assert gap.status() == before, (own, other)
