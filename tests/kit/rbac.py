"""RBAC rules evaluated as the apiserver's RBAC authorizer does, for unit tests: a client that
answers SelfSubjectAccessReviews from a ClusterRole's and a Role's rules, and NVIDIA's
controller rules per install shape (``tests/fixtures/nvidia-rbac/controller-rules.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from computedomain.domain import childkinds
from computedomain.runtime.access import SELF_SUBJECT_ACCESS_REVIEWS
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource

Rule = Mapping[str, Any]
NVIDIA_RULES_FILE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-rbac" / "controller-rules.yaml"
)


def nvidia_shapes() -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Shape -> {"clusterRole": rules, "role": rules} of NVIDIA's controller."""
    shapes: dict[str, dict[str, list[dict[str, Any]]]] = yaml.safe_load(
        NVIDIA_RULES_FILE.read_text()
    )["shapes"]
    return shapes


def _matches(values: Sequence[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def allowed(rules: Sequence[Rule], attributes: Mapping[str, str]) -> bool:
    """Whether any rule grants these resourceAttributes (RBAC: apiGroups, resources with
    their subresource, verbs, resourceNames)."""
    resource = attributes["resource"]
    if attributes.get("subresource"):
        resource += "/" + attributes["subresource"]
    for rule in rules:
        names = rule.get("resourceNames") or []
        if (
            _matches(rule.get("apiGroups") or [], attributes.get("group", ""))
            and _matches(rule.get("resources") or [], resource)
            and _matches(rule.get("verbs") or [], attributes["verb"])
            and (not names or attributes.get("name", "") in names)
        ):
            return True
    return False


@dataclass
class Reviewer:
    """Answers SelfSubjectAccessReviews: ``cluster_rules`` everywhere, ``role_rules`` in the
    ``role_namespaces`` (where a RoleBinding binds the Role). ``reviews`` is what was asked."""

    cluster_rules: Sequence[Rule]
    role_rules: Sequence[Rule] = ()
    role_namespaces: Sequence[str] = ()
    reviews: list[dict[str, str]] = field(default_factory=list)
    refuse: ApiError | None = None

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        assert res == SELF_SUBJECT_ACCESS_REVIEWS, res
        attributes = body["spec"]["resourceAttributes"]
        self.reviews.append(attributes)
        if self.refuse is not None:
            raise self.refuse
        ok = allowed(self.cluster_rules, attributes) or (
            attributes.get("namespace", "") in self.role_namespaces
            and allowed(self.role_rules, attributes)
        )
        return {**body, "status": {"allowed": ok}}


# ---- the RBAC of child kinds, derived from their table ------------------------------------------

Flat = dict[tuple[str, str], set[str]]
# Verbs on a child kind's resource that something besides the children needs, granted by the
# ClusterRole: NVIDIA's kubelet plugin and daemons made outside our namespaces are watched in
# every namespace (domain/caches.py: nvidia_daemonsets, foreign_daemonsets).
OTHER_CLUSTER_USES: Flat = {("apps", "daemonsets"): {"list", "watch"}}


# In an additional namespace (where the driver was before it moved) the controller creates
# nothing: it watches, deletes and strips our finalizer from what is left there.
ADDITIONAL_NAMESPACE_VERBS = frozenset({"list", "watch", "delete", "patch"})


def child_kind_rules() -> tuple[Flat, Flat]:
    """(ClusterRole, driver-namespace Role) rules on the child kinds' resources, from their
    ``verbs`` in ``domain/childkinds.py``: a kind living beside its CD (any namespace) needs
    the ClusterRole; one in the driver namespace the Role, for what the ClusterRole does not
    already grant there."""
    cluster: Flat = {key: set(verbs) for key, verbs in OTHER_CLUSTER_USES.items()}
    namespace: Flat = {}
    for child in childkinds.CHILDREN:
        key = (child.resource.group, child.resource.plural)
        where = cluster if child.scope is childkinds.Scope.CD_NAMESPACE else namespace
        where.setdefault(key, set()).update(child.verbs)
    namespace = {
        key: left for key, verbs in namespace.items() if (left := verbs - cluster.get(key, set()))
    }
    return cluster, namespace


def on_child_resources(rules: Flat) -> Flat:
    """Only the rules on a child kind's resource."""
    keys = {(res.group, res.plural) for res in childkinds.resources()}
    return {key: verbs for key, verbs in rules.items() if key in keys}


def child_kind_additional_namespace_rules() -> Flat:
    """The Role of each additional namespace on the child kinds' resources: the driver
    namespace's, less what creates (``ADDITIONAL_NAMESPACE_VERBS``)."""
    _, namespace = child_kind_rules()
    return {
        key: left
        for key, verbs in namespace.items()
        if (left := verbs & ADDITIONAL_NAMESPACE_VERBS)
    }
