"""What the reconciler reports to the metrics sink: the Ready reason, the start of a deletion,
and forgetting a domain once it is gone (also when its finalizer was removed by hand)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time, parse_time
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    UID,
    World,
    clique_of_cd,
    compute_domain,
    daemon_entry,
    labelled,
    make_world,
    service_account,
    with_children,
)

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MeteredWorld(World):
    registry: CollectorRegistry

    def series(self, metric: str) -> Series:
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(generate_latest(self.registry).decode())
            for sample in family.samples
            if sample.name == metric
        }


@pytest.fixture
def world() -> MeteredWorld:
    registry = CollectorRegistry()
    world = make_world(registry=registry)
    metered = MeteredWorld(
        world.client, world.caches, world.recorder, world.clock, world.reconciler
    )
    metered.registry = registry
    return metered


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


async def test_the_reason_of_each_condition_is_exported(world: MeteredWorld) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))

    reasons = world.series("computedomain_status_condition_reason")
    ready = labels(namespace=NS, name="cd", condition="Ready", reason="WaitingForWorkload")
    assert reasons[("computedomain_status_condition_reason", ready)] == 1
    conditions = {dict(key[1])["condition"] for key in reasons}
    assert conditions == set(c.CONDITION_TYPES)


async def test_a_deletion_is_exported_from_the_first_pass_until_the_domain_is_gone(
    world: MeteredWorld,
) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))
    assert world.series("computedomain_status_condition")

    deleted_at = format_time(world.clock.wall())
    stored = world.client.objects[("computedomains", NS, "cd")]
    stored["metadata"]["deletionTimestamp"] = deleted_at
    # The DaemonSet stays (another finalizer holds it): the CD keeps ours.
    held = labelled(DAEMON, DRIVER_NS)
    held["metadata"]["finalizers"].append("example.com/hold")
    daemonset = world.client.add(r.DAEMONSETS, held)
    world.fill(cds=[stored], daemonsets=[daemonset], service_accounts=[service_account()])
    await world.clock.advance(30)
    await world.reconcile(CDKey(NS, "cd"))

    deletion = "computedomain_deletion_started_timestamp_seconds"
    assert world.series(deletion) == {
        (deletion, labels(namespace=NS, name="cd")): parse_time(deleted_at).timestamp()
    }
    assert world.series("computedomain_status_condition")

    # The CD goes with our finalizer removed by hand: the next reconcile finds no CD and
    # forgets every series of it.
    world.fill(daemonsets=[daemonset], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))
    assert world.series(deletion) == {}
    assert world.series("computedomain_status_condition") == {}
    assert world.series("computedomain_status_condition_reason") == {}


def split_world(world: MeteredWorld, num_nodes: int) -> None:
    """The CD's daemons joined in two cliques: n1 in rack0.0, m1 in rack1.0."""
    stores = with_children(world)
    stores["cds"][0]["spec"]["numNodes"] = num_nodes
    cliques = [
        world.client.add(CLIQUES, clique_of_cd(clique, [daemon_entry(node, ip, "Ready", clique)]))
        for clique, node, ip in (("rack0.0", "n1", "10.0.0.1"), ("rack1.0", "m1", "10.0.0.2"))
    ]
    nodes = [
        {
            "metadata": {
                "name": node,
                "labels": {c.GPU_CLIQUE_NODE_LABEL: clique, c.CD_LABEL: UID},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for clique, node in (("rack0.0", "n1"), ("rack1.0", "m1"))
    ]
    world.fill(**stores, cliques=cliques, nodes=nodes, service_accounts=[service_account()])


@pytest.mark.parametrize(("num_nodes", "split"), [(2, 1.0), (0, 1.0), (24, 0.0)])
async def test_a_split_one_clique_could_hold_is_exported(
    world: MeteredWorld, num_nodes: int, split: float
) -> None:
    """Two cliques for a job that fits one (18 nodes by default) is a split worth a page; a
    job larger than a clique spans cliques by design."""
    split_world(world, num_nodes)
    await world.reconcile(CDKey(NS, "cd"))
    cliques = world.series("computedomain_cliques")
    assert cliques == {("computedomain_cliques", labels(namespace=NS, name="cd")): 2}
    gauge = "computedomain_clique_split"
    assert world.series(gauge) == {(gauge, labels(namespace=NS, name="cd")): split}
