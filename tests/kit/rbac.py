"""RBAC objects the integration tests need for identities of their own."""

from __future__ import annotations

from typing import Any


def cluster_admin_binding(name: str, service_account: str, namespace: str) -> dict[str, Any]:
    """A ClusterRoleBinding giving a ServiceAccount cluster-admin: for stand-ins and for
    identities whose only purpose is to tell writers apart in the audit log."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
