"""The child kinds' table agrees with itself: each entry's builder makes the object its entry
says (resource, place, target label, the CD's UID label, our finalizer). The RBAC derived from
the table is checked in tests/unit/observability/test_manifests.py and the chart's test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain import childkinds
from computedomain.domain.childkinds import CHILDREN, Child, ChildKind, Inputs
from computedomain.domain.settings import DaemonSettings
from computedomain.runtime import objects
from tests.kit.world import DRIVER_NS, NS, UID, labelled, make_world

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
DAEMON = DaemonSettings(driver_namespace="driver", image="image", log_verbosity=1)


def cd_object() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / "computedomain.yaml").read_text())
    return loaded


@pytest.mark.parametrize("child", CHILDREN, ids=lambda child: child.kind.value)
@pytest.mark.parametrize("host_managed", [False, True])
def test_each_builder_makes_what_its_entry_says(child: Child, host_managed: bool) -> None:
    obj = cd_object()
    built = child.build(ComputeDomain.model_validate(obj), Inputs(DAEMON, host_managed))
    meta = built["metadata"]
    assert (built["apiVersion"], built["kind"]) == (
        child.resource.api_version,
        child.resource.kind,
    )
    assert (meta["namespace"], meta["name"]) == child.locate(obj, DAEMON.driver_namespace)
    assert meta["labels"][c.CD_LABEL] == obj["metadata"]["uid"]
    assert childkinds.is_of(child, built)
    assert not [
        other
        for other in CHILDREN
        if other is not child
        and childkinds.is_of(other, built)
        and other.resource is child.resource
    ]
    assert c.FINALIZER in meta["finalizers"]
    if child.scope is childkinds.Scope.CD_NAMESPACE:
        assert meta["namespace"] == obj["metadata"]["namespace"]


def test_every_kind_has_one_entry_and_kinds_of_one_resource_differ_by_target() -> None:
    assert {child.kind for child in CHILDREN} == set(ChildKind) - {ChildKind.SPEC}
    for res in childkinds.resources():
        kinds = childkinds.of_resource(res)
        if len(kinds) > 1:
            targets = [child.target for child in kinds]
            assert None not in targets
            assert len(set(targets)) == len(targets)


def test_modes_and_deletion_order() -> None:
    assert [child.kind for child in childkinds.in_mode(True)] == [ChildKind.WORKLOAD_CLAIM_TEMPLATE]
    assert [child.kind for child in childkinds.by_deletion_order()] == [
        ChildKind.WORKLOAD_CLAIM_TEMPLATE,
        ChildKind.DAEMON_CLAIM_TEMPLATE,
        ChildKind.DAEMON_SET,
    ]


def test_a_deleted_cds_children_go_kind_by_kind_and_an_unclaimed_one_with_its_resource() -> None:
    """Workload RCT first, daemon RCT, then an RCT no kind claims (an older controller's, no
    target label) with the last kind of its resource, the DaemonSet last; another CD's stay."""
    world = make_world()
    world.fill(
        rcts=[
            labelled("old", DRIVER_NS),
            labelled("daemon", DRIVER_NS, **{c.TARGET_LABEL: c.TARGET_DAEMON}),
            labelled("channel", NS, **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
            labelled("other", NS, uid="another", **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
        ],
        daemonsets=[labelled("ds", DRIVER_NS)],
    )
    assert [
        (res.plural, objects.object_key(obj)) for res, obj in world.caches.children_to_delete(UID)
    ] == [
        ("resourceclaimtemplates", f"{NS}/channel"),
        ("resourceclaimtemplates", f"{DRIVER_NS}/daemon"),
        ("resourceclaimtemplates", f"{DRIVER_NS}/old"),
        ("daemonsets", f"{DRIVER_NS}/ds"),
    ]
