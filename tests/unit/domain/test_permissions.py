"""What the controller does under each RBAC it may be bound to (domain/permissions.py): NVIDIA's
install shapes (tests/fixtures/nvidia-rbac, evaluated as RBAC would) and our own manifests."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain import permissions
from computedomain.domain.caches import build_caches
from computedomain.runtime import resources as r
from computedomain.runtime.access import Access
from computedomain.runtime.events import EventRecorder
from tests.kit.fakeapi import FakeApiServer
from tests.kit.rbac import Reviewer, nvidia_shapes

DRIVER_NS = "driver"
ROOT = Path(__file__).resolve().parents[3]


def our_rules() -> tuple[list[Any], list[Any]]:
    """manifests/rbac: the ClusterRole, and both Roles bound in the driver namespace."""
    rbac = ROOT / "manifests" / "rbac"
    cluster = yaml.safe_load((rbac / "role.yaml").read_text())["rules"]
    roles = [
        rule
        for name in ("namespace_role.yaml", "leader_election_role.yaml")
        for rule in yaml.safe_load((rbac / name).read_text())["rules"]
    ]
    return cluster, roles


async def review(cluster: list[Any], role: list[Any]) -> tuple[Access, Any, EventRecorder]:
    api = FakeApiServer()
    caches = build_caches(api, driver_namespace=DRIVER_NS)  # type: ignore[arg-type]
    recorder = EventRecorder(api, "c", "i")
    access = Access()
    await permissions.review(
        Reviewer(cluster, role, [DRIVER_NS]), access, caches, recorder, [DRIVER_NS], DRIVER_NS
    )
    return access, caches, recorder


def by_update(access: Access) -> list[str]:
    return [
        f"{w.resource.plural}{'/' + w.subresource if w.subresource else ''}"
        for w in permissions.writes([DRIVER_NS])
        if not access.allows(w.permission("patch"))
    ]


@pytest.mark.parametrize("shape", sorted(nvidia_shapes()))
async def test_under_nvidias_rbac_writes_go_by_update_and_the_niceties_are_off(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    rules = nvidia_shapes()[shape]
    with caplog.at_level(logging.INFO):
        access, caches, recorder = await review(rules["clusterRole"], rules["role"])

    # update granted, patch not: these four by update; DaemonSets keep their patch.
    assert by_update(access) == [
        "computedomains",
        "computedomains/status",
        "nodes",
        "resourceclaimtemplates",
    ]
    assert recorder.disabled == "create events.events.k8s.io in every namespace is not granted"
    assert caches.crds.unavailable
    assert caches.clique_crds.unavailable
    assert caches.service_accounts.unavailable
    assert caches.missing_daemon_service_account() is None  # unknown, not "missing"
    assert caches.missing_crds() == []
    assert not caches.crd_readable
    # Nothing it cannot work without is missing: no error line.
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert caplog.messages == [
        "Patch not granted on computedomains.resource.nvidia.com in every namespace, "
        "computedomains/status.resource.nvidia.com in every namespace, nodes, "
        "resourceclaimtemplates.resource.k8s.io in every namespace: written by update (PUT with "
        "the resourceVersion read)",
        "Events are not recorded: create events.events.k8s.io in every namespace is not granted",
        "Not granted list/watch customresourcedefinitions.apiextensions.k8s.io "
        "computedomains.resource.nvidia.com, list/watch customresourcedefinitions."
        "apiextensions.k8s.io computedomaincliques.resource.nvidia.com: an outdated "
        "ComputeDomain CRD is learned from the first status write it prunes; a CRD not "
        "installed shows only as its objects' informer failing (404)",
        f"Not granted list/watch serviceaccounts compute-domain-daemon-service-account in "
        f"namespace {DRIVER_NS}: a missing daemon ServiceAccount is not reported "
        "(DaemonServiceAccountMissing)",
        # DaemonSets only in the driver namespace: two signs of a second controller unseen.
        "Not granted list/watch daemonsets.apps in every namespace: NVIDIA's kubelet plugin is "
        "not looked for: its namespace is not checked against the driver namespace, and with "
        f"IMAGE_NAME unset new IMEX daemons get {c.NVIDIA_DRIVER_IMAGE}",
        "Not granted list/watch daemonsets.apps in every namespace: IMEX daemons another "
        "controller makes outside the driver namespace are not seen",
    ]
    assert caches.nvidia_daemonsets.unavailable
    assert caches.foreign_daemonsets.unavailable
    # Pods in every namespace are granted: NVIDIA's controller pods are still looked for.
    assert not any(informer.unavailable for informer in caches.nvidia_controller_pods)


async def test_under_our_own_rbac_nothing_changes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        access, caches, recorder = await review(*our_rules())
    assert by_update(access) == []
    assert recorder.disabled is None
    assert not any(informer.unavailable for informer in caches.all)
    assert caplog.records == []


async def test_what_it_cannot_do_without_is_named_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, role = our_rules()
    # No list of ComputeDomains, and neither patch nor update of Nodes.
    dropped = {"computedomains": "list", "nodes": "patch"}
    cluster = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != dropped.get(rule["resources"][0])]}
        for rule in cluster
    ]
    with caplog.at_level(logging.ERROR):
        access, _, _ = await review(cluster, role)
    assert not access.allows(permissions.Write(COMPUTE_DOMAINS).permission("list"))
    assert [rec.getMessage() for rec in caplog.records] == [
        "This controller's RBAC lacks what it cannot work without: list "
        "computedomains.resource.nvidia.com in every namespace, update nodes; "
        "grant them (manifests/rbac holds the rules it needs)"
    ]
    assert not access.allows(permissions.Write(r.NODES).permission("patch"))
