"""Status writes are coalesced per CD (issue 10): the first change after a quiet window is
written at once, changes within the window after a write go out as one write at its end,
recomputed from the caches; a Ready flip is never held. Counted in API calls, on a FakeClock."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    SETTINGS,
    UID,
    World,
    labelled,
    service_account,
    with_children,
)
from tests.kit.world import make_world as reconciler_world

KEY = CDKey(NS, "cd")
CLIQUE_ID = "rack0.0"
WINDOW = 1.0
STATUS_PATCH = ("patch", "computedomains/status", f"{NS}/cd")
NODES = ("n1", "n2", "n3")
# Nodes by clique: m1 lies in another clique than the CD's other nodes.
CLIQUE_OF = {"n1": CLIQUE_ID, "n2": CLIQUE_ID, "n3": CLIQUE_ID, "m1": "rack1.0"}


def make_world(window: float) -> World:
    return reconciler_world(dataclasses.replace(SETTINGS, status_coalesce_window=window))


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {c.GPU_CLIQUE_NODE_LABEL: CLIQUE_OF[name]}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def daemon_pod(node_name: str, ready: bool, since: str) -> dict[str, Any]:
    pod = labelled(f"{DAEMON}-{node_name}", DRIVER_NS)
    pod["metadata"]["creationTimestamp"] = since
    pod["spec"] = {"nodeName": node_name}
    status = "True" if ready else "False"
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": status, "lastTransitionTime": since}],
        "containerStatuses": [{"name": c.DAEMON_CONTAINER, "started": ready, "ready": ready}],
    }
    return pod


def clique(clique_id: str, entries: dict[str, str]) -> dict[str, Any]:
    """The CD's clique holding one entry per node, with that node's daemon status."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CLIQUE_KIND,
        "metadata": {
            "name": c.clique_name(UID, clique_id),
            "namespace": DRIVER_NS,
            "labels": {c.CD_LABEL: UID, c.CLIQUE_ID_LABEL: clique_id},
        },
        "daemons": [
            {
                "nodeName": name,
                "ipAddress": f"10.0.0.{i + 1}",
                "cliqueID": clique_id,
                "index": i,
                "status": status,
            }
            for i, (name, status) in enumerate(entries.items())
        ],
    }


def set_daemons(world: World, entries: dict[str, str]) -> None:
    """The daemons' state as the caches see it after their pods and clique entries changed."""
    since = format_time(world.clock.wall())
    world.caches.daemon_pods[0].feed_list(
        [
            world.client.add(r.PODS, daemon_pod(name, status == c.STATUS_READY, since))
            for name, status in entries.items()
        ]
    )
    by_clique: dict[str, dict[str, str]] = {}
    for name, status in entries.items():
        by_clique.setdefault(CLIQUE_OF[name], {})[name] = status
    world.caches.cliques[0].feed_list(
        [world.client.add(CLIQUES, clique(cl, members)) for cl, members in by_clique.items()]
    )


def set_pods(world: World, pods: dict[str, str]) -> None:
    """Daemon pods as the caches see them, before their daemons wrote any clique entry."""
    since = format_time(world.clock.wall())
    world.caches.daemon_pods[0].feed_list(
        [
            world.client.add(r.PODS, daemon_pod(name, status == c.STATUS_READY, since))
            for name, status in pods.items()
        ]
    )


def start(world: World, num_nodes: int = len(NODES)) -> None:
    """A CD with its children and the three Nodes; nothing of it written yet."""
    daemonset = labelled(DAEMON, DRIVER_NS)
    # Its daemons speak the cliques protocol: the controller projects status.nodes.
    env = [{"name": c.FEATURE_GATES_ENV, "value": f"{c.GATE_CLIQUES}=true"}]
    container = {"name": c.DAEMON_CONTAINER, "env": env}
    daemonset["spec"] = {"template": {"spec": {"containers": [container]}}}
    stores = with_children(world, daemonset)
    stores["cds"][0]["spec"]["numNodes"] = num_nodes
    world.fill(
        **stores,
        nodes=[node(n) for n in CLIQUE_OF],
        service_accounts=[service_account()],
    )


def stored_nodes(world: World) -> list[tuple[str, str]]:
    status = world.client.objects[("computedomains", NS, "cd")].get("status") or {}
    return [(n["name"], n["status"]) for n in status.get("nodes") or []]


async def test_changes_within_the_window_are_one_write_with_the_latest_state() -> None:
    world = make_world(WINDOW)
    start(world)
    set_daemons(world, {"n1": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]  # the first change: at once
    assert world.recorder.notes == [f"Node n1 joined (clique {CLIQUE_ID})"]
    world.recorder.events.clear()
    world.recorder.notes.clear()

    await world.clock.advance(0.25)
    set_daemons(world, {"n1": c.STATUS_NOT_READY, "n2": c.STATUS_NOT_READY})
    result = await world.reconcile(KEY)
    assert world.client.calls == []  # held: the reconcile at the window's end writes it
    assert result.requeue_after == pytest.approx(WINDOW - 0.25)

    await world.clock.advance(0.25)
    set_daemons(world, {"n1": c.STATUS_READY, "n2": c.STATUS_NOT_READY, "n3": c.STATUS_NOT_READY})
    result = await world.reconcile(KEY)
    assert world.client.calls == []
    assert result.requeue_after == pytest.approx(WINDOW - 0.5)
    assert stored_nodes(world) == [("n1", c.STATUS_NOT_READY)]

    await world.clock.advance(result.requeue_after or 0)
    await world.reconcile(KEY)
    # One write carries the latest cached state, and one Event lists the nodes that joined.
    assert world.client.calls == [STATUS_PATCH]
    assert stored_nodes(world) == [
        ("n1", c.STATUS_READY),
        ("n2", c.STATUS_NOT_READY),
        ("n3", c.STATUS_NOT_READY),
    ]
    assert world.recorder.events == [("Normal", "NodeJoined")]
    assert world.recorder.notes == [f"Nodes n2, n3 joined (clique {CLIQUE_ID})"]

    # The last daemons turn Ready right after: the CD's Ready flip is not held.
    await world.clock.advance(0.1)
    set_daemons(world, dict.fromkeys(NODES, c.STATUS_READY))
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    assert status["status"] == c.STATUS_READY
    assert ("Normal", "AllNodesJoined") in world.recorder.events


def ready_condition(world: World) -> tuple[str, str]:
    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    ready = next(x for x in status["conditions"] if x["type"] == "Ready")
    return ready["status"], ready["reason"]


async def test_a_daemon_pod_seen_before_its_clique_entry_waits_for_the_entry() -> None:
    """A join, one daemon at a time (issue 32): its pod shows before its clique entry, and that
    changes only the conditions' words (Ready False, DaemonsStarting). Held a window from when
    first seen, the entry's write carries it: two status writes per join (NotReady, Ready),
    not three; the entry itself is not held."""
    world = make_world(WINDOW)
    start(world, num_nodes=0)
    set_daemons(world, {"n1": c.STATUS_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    assert ready_condition(world) == ("True", "AllNodesJoined")

    await world.clock.advance(10 * WINDOW)  # quiet: an ordinary change would go out at once
    set_pods(world, {"n1": c.STATUS_READY, "n2": c.STATUS_NOT_READY})
    result = await world.reconcile(KEY)
    assert world.client.calls == []
    assert result.requeue_after == pytest.approx(WINDOW)
    assert ready_condition(world) == ("True", "AllNodesJoined")

    await world.clock.advance(0.3)
    set_daemons(world, {"n1": c.STATUS_READY, "n2": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]  # the entry: at once, with the pod's words
    assert stored_nodes(world) == [("n1", c.STATUS_READY), ("n2", c.STATUS_NOT_READY)]
    assert ready_condition(world) == ("False", "DaemonsStarting")


async def test_a_daemon_slower_than_the_window_shows_as_starting_at_its_end() -> None:
    """Held at most one window from when first seen, however often the CD is looked at."""
    world = make_world(WINDOW)
    start(world, num_nodes=0)
    set_daemons(world, {"n1": c.STATUS_READY})
    await world.reconcile(KEY)
    await world.clock.advance(10 * WINDOW)
    set_pods(world, {"n1": c.STATUS_READY, "n2": c.STATUS_NOT_READY})
    assert (await world.reconcile(KEY)).requeue_after == pytest.approx(WINDOW)
    await world.clock.advance(0.6)
    assert (await world.reconcile(KEY)).requeue_after == pytest.approx(WINDOW - 0.6)
    assert world.client.calls == []
    await world.clock.advance(WINDOW - 0.6)
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    assert stored_nodes(world) == [("n1", c.STATUS_READY)]
    assert ready_condition(world) == ("False", "DaemonsStarting")


async def test_an_isolated_change_is_written_at_once() -> None:
    world = make_world(WINDOW)
    start(world)
    set_daemons(world, {"n1": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    await world.clock.advance(WINDOW)
    set_daemons(world, {"n1": c.STATUS_NOT_READY, "n2": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]


async def test_a_window_of_zero_writes_every_change_at_once() -> None:
    world = make_world(0.0)
    start(world)
    set_daemons(world, {"n1": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    set_daemons(world, {"n1": c.STATUS_NOT_READY, "n2": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]


async def test_a_held_change_keeps_its_events_when_the_crd_prunes_conditions() -> None:
    """With NVIDIA's CRD installed the conditions live only in memory; a held write must not
    mark them as reported, or the Warning they are worth is never recorded."""
    world = make_world(WINDOW)
    start(world)
    world.caches.missing_status_fields = lambda: ("nodeCount",)  # type: ignore[method-assign]
    set_daemons(world, {"n1": c.STATUS_NOT_READY})
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    world.recorder.events.clear()

    await world.clock.advance(0.25)
    set_daemons(world, {"n1": c.STATUS_NOT_READY, "m1": c.STATUS_NOT_READY})
    result = await world.reconcile(KEY)
    assert world.client.calls == []

    await world.clock.advance(result.requeue_after or 0)
    await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    assert ("Warning", "MultipleCliques") in world.recorder.events


async def test_the_window_grows_while_changes_keep_coming_and_resets_when_quiet() -> None:
    """A bring-up spread over many seconds: each folded write doubles the window (up to
    MAX_WINDOW_FACTOR times the setting); a change after a quiet window is written at once and
    the window is the configured one again."""
    world = make_world(WINDOW)
    start(world)
    nr, ok = c.STATUS_NOT_READY, c.STATUS_READY
    states = iter(
        [
            {"n1": nr},
            {"n1": nr, "n2": nr},
            {"n1": ok, "n2": nr},
            {"n1": ok, "n2": nr, "n3": nr},
            {"n1": ok, "n2": ok, "n3": nr},
            {"n1": nr, "n2": ok, "n3": nr},
            {"n1": nr, "n2": nr, "n3": nr},
            {"n1": ok, "n2": nr, "n3": nr},
        ]
    )

    async def change(after: float) -> float | None:
        """The next state, ``after`` seconds on; how long its write is held (None: written)."""
        await world.clock.advance(after)
        set_daemons(world, next(states))
        result = await world.reconcile(KEY)
        if world.client.calls == [STATUS_PATCH]:
            return None
        assert world.client.calls == []
        return result.requeue_after

    async def fold(wait: float | None) -> None:
        assert wait is not None
        await world.clock.advance(wait)
        await world.reconcile(KEY)
        assert world.client.calls == [STATUS_PATCH]

    assert await change(0) is None  # t=0: written, window 1 s
    wait = await change(0.5)
    assert wait == pytest.approx(0.5)
    await fold(wait)  # t=1: folded; the window doubles to 2 s
    wait = await change(0.5)
    assert wait == pytest.approx(1.5)
    await fold(wait)  # t=3: window 4 s
    wait = await change(0.5)
    assert wait == pytest.approx(3.5)
    await fold(wait)  # t=7: window stays at 4 x 1 s
    wait = await change(0.5)
    assert wait == pytest.approx(3.5)
    await fold(wait)  # t=11
    assert await change(10) is None  # quiet for longer than the window: at once, window 1 s
    assert await change(0.5) == pytest.approx(0.5)


async def test_status_fields_the_apiserver_dropped_are_written_again() -> None:
    """Just after a CRD upgrade the apiserver may prune with the old schema for a moment: the
    write is retried (our own watch event would not requeue the CD) until the fields stick."""
    world = make_world(0.0)
    start(world)
    set_daemons(world, {"n1": c.STATUS_NOT_READY})
    world.client.pruned_status_fields = ("conditions",)
    result = await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    assert result.requeue

    world.client.pruned_status_fields = ()
    result = await world.reconcile(KEY)
    assert world.client.calls == [STATUS_PATCH]
    assert not result.requeue
    assert not (await world.reconcile(KEY)).requeue
    assert world.client.calls == []
