"""The RBAC the controller's code uses: every verb, on every resource, in each scope, and no
other. One table: manifests/rbac and the Helm chart are checked against it (tests/unit), the
real control plane proves each verb needed (tests/integration/test_rbac.py), and
``kubectl cdom doctor`` reviews each verb for our controller's ServiceAccount.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from computedomain.api import constants as c


@dataclass(frozen=True)
class Rule:
    """One rule of a Role or ClusterRole: ``resource`` may name a subresource (``x/status``);
    ``names`` restricts it to those objects (resourceNames)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()


# ClusterRole computedomain-controller: CDs and workload claim templates live in user namespaces,
# Nodes are cluster-scoped, Events go to the namespace of the object they regard.
CLUSTER: Final[tuple[Rule, ...]] = (
    Rule(c.GROUP, c.CD_PLURAL, ("list", "watch", "patch")),
    Rule(c.GROUP, f"{c.CD_PLURAL}/status", ("patch",)),
    Rule(
        "resource.k8s.io",
        "resourceclaimtemplates",
        ("get", "list", "watch", "create", "delete", "patch"),
    ),
    # get: a labelled Node that leaves the watch is looked up (deleted, or only unlabelled?).
    Rule("", "nodes", ("get", "list", "watch", "patch")),
    Rule("events.k8s.io", "events", ("create", "patch")),
    # Another ComputeDomain controller anywhere: NVIDIA's pods and kubelet plugin, daemons
    # outside the driver namespace (and, so, the driver namespace's daemons and their pods).
    Rule("", "pods", ("list", "watch")),
    Rule("apps", "daemonsets", ("list", "watch")),
    # Our two CRDs alone (metadata.name field selector): is the status schema ours?
    Rule(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        (c.CD_CRD_NAME, c.CLIQUE_CRD_NAME),
    ),
)
# Role computedomain-controller, in the driver namespace (the controller's NAMESPACE).
DRIVER_NAMESPACE: Final[tuple[Rule, ...]] = (
    Rule("apps", "daemonsets", ("get", "create", "delete", "patch")),
    Rule(c.GROUP, c.CLIQUE_PLURAL, ("list", "watch", "update")),
    # The daemon ServiceAccount's presence (#586): asked for by name (a field selector).
    Rule("", "serviceaccounts", ("list", "watch"), (c.DAEMON_SERVICE_ACCOUNT,)),
)
# Role computedomain-controller-leader-election, in the Lease's namespace; with the placement
# webhook also the placement ledger's Lease (admission/ledger.py), written only with leader
# election on.
LEASE_NAMESPACE: Final[tuple[Rule, ...]] = (
    Rule("coordination.k8s.io", "leases", ("get", "create", "update")),
)


# Only with the placement webhook (PLACEMENT_WEBHOOK_ADDRESS): the owner of a CD's first pod
# sizes the job (one GET per CD); the CD of a workload opted in for one is created at its first
# pod's admission (admission/workload_domains.py).
WEBHOOK_CLUSTER: Final[tuple[Rule, ...]] = (
    Rule("apps", "statefulsets", ("get",)),
    Rule("batch", "jobs", ("get",)),
    Rule(c.GROUP, c.CD_PLURAL, ("create",)),
)
# ... and with the certificate the controller makes (no cert-manager): the CA goes into the
# webhook configuration's caBundle, the certificate into a Secret of the driver namespace that
# every replica serves (create cannot be limited by name).
WEBHOOK_CERTIFICATE_CLUSTER: Final[tuple[Rule, ...]] = (
    Rule(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        ("get", "update"),
        ("computedomain-placement",),
    ),
)
WEBHOOK_DRIVER_NAMESPACE: Final[tuple[Rule, ...]] = (
    Rule("", "secrets", ("get",), ("computedomain-placement-webhook-tls",)),
    Rule("", "secrets", ("create",)),
)


def flat(rules: tuple[Rule, ...]) -> dict[tuple[str, str], set[str]]:
    """{(apiGroup, resource): verbs}: a role's rules compared regardless of how they are split."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        verbs.setdefault((rule.group, rule.resource), set()).update(rule.verbs)
    return verbs
