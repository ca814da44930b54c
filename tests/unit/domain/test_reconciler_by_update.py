"""The reconciler under NVIDIA's controller RBAC (GPU Operator's, the charts' alike: update but
no patch on ComputeDomains, their status, Nodes and ResourceClaimTemplates; no CRDs, no
ServiceAccounts): the same writes as by patch, by update, with the same guards. Exact calls
against the fake apiserver, as test_reconciler.py states them for the patch path."""

from __future__ import annotations

from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain import crdschema, permissions
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.access import Access
from computedomain.runtime.clock import format_time
from computedomain.runtime.controller import Result
from tests.kit.fakeapi import denied
from tests.kit.rbac import Reviewer, nvidia_shapes
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    GHOST,
    NS,
    UID,
    World,
    compute_domain,
    labelled,
    make_world,
    node_label_moves_after_the_list,
    service_account,
    with_children,
)


async def nvidia_world(shape: str = "gpu-operator") -> World:
    """The world with the access NVIDIA's RBAC for ``shape`` gives, as the controller reviews it
    at start; the optional informers it may not run are disabled as at start."""
    rules = nvidia_shapes()[shape]
    access = Access()
    reviewer = Reviewer(rules["clusterRole"], rules["role"], [DRIVER_NS])
    await access.review(
        reviewer,
        [w.permission("patch") for w in permissions.writes([DRIVER_NS])],
    )
    world = make_world(access=access)
    return world


def deleting_cd(world: World, **meta: Any) -> dict[str, Any]:
    deleted_at = format_time(world.clock.wall())
    return world.client.add(
        COMPUTE_DOMAINS,
        compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at, **meta),
    )


async def test_a_new_cd_gets_its_finalizer_and_status_by_update() -> None:
    world = await nvidia_world()
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd])

    assert await world.reconcile(CDKey(NS, "cd")) == Result()

    assert world.client.calls == [
        ("replace", "computedomains", f"{NS}/cd"),  # the finalizer, before any child
        ("create", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("create", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("create", "resourceclaimtemplates", f"{NS}/channel"),
        ("replace", "computedomains/status", f"{NS}/cd"),
    ]
    finalizer, status = world.client.bodies[0], world.client.bodies[4]
    # The CD as read (no other change), with the resourceVersion read: optimistic concurrency.
    assert finalizer == {**cd, "metadata": {**cd["metadata"], "finalizers": [c.FINALIZER]}}
    assert (
        status["metadata"]["resourceVersion"]
        == world.client.history(COMPUTE_DOMAINS, "cd", NS)[1]["metadata"]["resourceVersion"]
    )
    stored = world.client.objects[("computedomains", NS, "cd")]
    assert stored["metadata"]["finalizers"] == [c.FINALIZER]
    assert stored["status"]["conditions"] == status["status"]["conditions"]

    # Written: the next pass writes nothing, as with patches.
    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls == []


async def test_deletion_by_update_removes_only_ours_and_daemonsets_keep_their_patch() -> None:
    world = await nvidia_world()
    stores = with_children(world)
    stores["cds"] = [deleting_cd(world)]
    node = world.client.add(
        r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID, "zone": "z"}}}
    )
    pod = labelled(f"{DAEMON}-abcde", DRIVER_NS)
    world.fill(pods=[pod], nodes=[node], **stores)

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue_after=2.0)

    assert world.client.calls == [
        ("list", "pods", f"{NS}/"),  # workload pods still running: none
        ("delete", "resourceclaimtemplates", f"{NS}/channel"),
        ("get", "resourceclaimtemplates", f"{NS}/channel"),  # whole: the cache trims
        ("replace", "resourceclaimtemplates", f"{NS}/channel"),
        ("delete", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("get", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("replace", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("patch", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),  # patch granted on DaemonSets
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),
        ("get", "nodes", "n1"),  # the label checked on the Node read...
        ("replace", "nodes", "n1"),  # ...which is PUT with its resourceVersion
        ("replace", "computedomains/status", f"{NS}/cd"),  # Ready=False while pods stop
    ]
    node_sent = world.client.bodies[11]
    assert node_sent["metadata"]["labels"] == {"zone": "z"}
    assert node_sent["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]
    for key in (("resourceclaimtemplates", NS, "channel"), ("nodes", "", "n1")):
        assert not world.client.versions[key][-1]["metadata"].get("finalizers")
    assert ("resourceclaimtemplates", NS, "channel") not in world.client.objects  # released

    # The daemon pods went: the finalizer goes by update, and the CD with it.
    world.caches.daemon_pods[0].feed("DELETED", pod)
    await world.clock.advance(2.0)
    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls[-1] == ("replace", "computedomains", f"{NS}/cd")
    assert ("computedomains", NS, "cd") not in world.client.objects


async def test_a_409_on_the_finalizers_put_is_retried_from_a_fresh_read() -> None:
    """Someone wrote the CD after the cache saw it: the PUT meets 409, the CD is read again,
    our finalizer is still where the patch says, and the PUT goes through."""
    world = await nvidia_world()
    cd = deleting_cd(world)
    world.fill(cds=[cd], service_accounts=[service_account()])
    world.client.objects[("computedomains", NS, "cd")]["metadata"]["labels"] = {"a": "b"}
    world.client.bump(COMPUTE_DOMAINS, "cd", NS)

    assert await world.reconcile(CDKey(NS, "cd")) == Result()

    assert world.client.calls == [
        ("list", "pods", f"{NS}/"),  # workload pods still running: none
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),
        ("replace", "computedomains", f"{NS}/cd"),  # 409
        ("get", "computedomains", f"{NS}/cd"),
        ("replace", "computedomains", f"{NS}/cd"),
    ]
    assert world.client.history(COMPUTE_DOMAINS, "cd", NS)[-1]["metadata"]["labels"] == {"a": "b"}
    assert ("computedomains", NS, "cd") not in world.client.objects


async def test_another_finalizer_taking_our_place_stops_the_update() -> None:
    """The fresh read shows the finalizers moved (another was added first): the patch's test
    fails there as it would at the apiserver, nothing is PUT, and the CD is looked at again."""
    world = await nvidia_world()
    cd = deleting_cd(world)
    world.fill(cds=[cd], service_accounts=[service_account()])
    world.client.objects[("computedomains", NS, "cd")]["metadata"]["finalizers"] = [
        "other",
        c.FINALIZER,
    ]
    world.client.bump(COMPUTE_DOMAINS, "cd", NS)

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue=True)
    assert world.client.calls[-2:] == [
        ("replace", "computedomains", f"{NS}/cd"),
        ("get", "computedomains", f"{NS}/cd"),
    ]
    stored = world.client.objects[("computedomains", NS, "cd")]
    assert stored["metadata"]["finalizers"] == ["other", c.FINALIZER]


async def test_a_node_label_that_moved_to_another_cd_is_left_alone() -> None:
    """The Node was listed with our label; by the GET the plugin gave it to another CD."""
    world = await nvidia_world()
    cd = deleting_cd(world)
    node = world.client.add(r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID}}})
    world.fill(cds=[cd], nodes=[node], service_accounts=[service_account()])
    node_label_moves_after_the_list(world, "n1", GHOST)
    await world.reconcile(CDKey(NS, "cd"))

    assert ("get", "nodes", "n1") in world.client.calls
    assert ("replace", "nodes", "n1") not in world.client.calls
    assert world.client.objects[("nodes", "", "n1")]["metadata"]["labels"] == {c.CD_LABEL: GHOST}


async def test_a_status_put_on_a_stale_version_requeues_without_reading_again() -> None:
    world = await nvidia_world()
    stores = with_children(world)
    world.fill(service_accounts=[service_account()], **stores)
    world.client.bump(COMPUTE_DOMAINS, "cd", NS)

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue=True)
    assert world.client.calls == [("replace", "computedomains/status", f"{NS}/cd")]


async def test_patches_refused_by_rbac_edited_at_run_time_go_by_update() -> None:
    """Reviewed as granted (or not reviewed at all), then refused: the 403 is met once."""
    world = make_world()
    world.client.refuse = lambda verb, res: (
        denied(verb, res) if verb == "patch" and res == COMPUTE_DOMAINS else None
    )
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])

    await world.reconcile(CDKey(NS, "cd"))

    verbs = [(verb, plural) for verb, plural, _ in world.client.calls]
    assert verbs[:2] == [("patch", "computedomains"), ("replace", "computedomains")]
    # The status is a permission of its own: refused once too, then updated.
    assert verbs[-2:] == [("patch", "computedomains/status"), ("replace", "computedomains/status")]
    world.client.forget_calls()
    cd = world.client.objects[("computedomains", NS, "cd")]
    cd["metadata"]["labels"] = {"x": "y"}
    world.caches.compute_domains.feed("MODIFIED", world.client.bump(COMPUTE_DOMAINS, "cd", NS))
    await world.clock.advance(60.0)
    daemonsets = world.caches.child_informers[r.DAEMONSETS][0]
    daemonsets.feed("DELETED", world.caches.children_of(ChildKind.DAEMON_SET, UID)[0])
    await world.reconcile(CDKey(NS, "cd"))
    assert "patch" not in [verb for verb, _, _ in world.client.calls]


async def test_an_outdated_crd_that_cannot_be_read_is_learned_from_a_status_write() -> None:
    """No CRD list/watch (NVIDIA's RBAC) and NVIDIA's CRD, which prunes our status fields: the
    first write shows what it drops; from then on only upstream's fields are written, and a
    steady CD costs no write (not one per reconcile, retried)."""
    world = await nvidia_world()
    world.caches.crds.disable("list customresourcedefinitions not granted")
    world.client.pruned_status_fields = crdschema.OUR_STATUS_FIELDS
    stores = with_children(world)
    world.fill(service_accounts=[service_account()], **stores)

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue=True)
    assert world.client.calls == [("replace", "computedomains/status", f"{NS}/cd")]
    assert world.reconciler._ctx.pruned_status_fields == crdschema.OUR_STATUS_FIELDS

    world.caches.compute_domains.feed(
        "MODIFIED", world.client.objects[("computedomains", NS, "cd")]
    )
    for _ in range(3):
        await world.clock.advance(5.0)
        # No retry: only the timer of a CD waiting for its workload (workload_check).
        assert not (await world.reconcile(CDKey(NS, "cd"))).requeue
        assert world.client.calls == []
