"""The placement webhook served to a local apiserver over TLS, as the tests, the demo and the
benchmark configure it: a MutatingWebhookConfiguration that calls the controller by URL (no
Service here) for one namespace's pods, and the wait until the controller has written its CA
into it. Also where a set of pods landed, clique by clique.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from computedomain.admission.server import DOMAIN_PATH
from computedomain.api import constants as c
from computedomain.config import environ
from computedomain.devcluster.controlplane import free_port
from computedomain.devcluster.watching import watch_objects
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import MUTATING_WEBHOOK_CONFIGURATIONS

# The configuration's name in the manifests: the webhook's RBAC grants the caBundle write on it
# alone (resourceNames), so a controller under that RBAC (the demo's) needs this name.
CONFIGURATION = "computedomain-placement"


def webhook_configuration(name: str, url: str, namespace: str) -> dict[str, Any]:
    """As the chart's, but called by URL and only for ``namespace``'s pods."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "placement.computedomain.io",
            "clientConfig": {"url": url},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Ignore",
            "sideEffects": "NoneOnDryRun",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    }  # fmt: skip


def webhook_url(port: int) -> str:
    """Where the apiserver calls a controller serving the webhook on this machine's ``port``."""
    return f"https://127.0.0.1:{port}{DOMAIN_PATH}"


def webhook_environ(port: int, configuration: str) -> dict[str, str]:
    """A controller's settings to serve the webhook on 127.0.0.1:``port`` with a certificate
    for that address, and to write its CA into ``configuration``."""
    return environ(
        placement_webhook_address=f"127.0.0.1:{port}",
        placement_webhook_hosts="127.0.0.1",
        placement_webhook_configuration=configuration,
    )


@contextlib.asynccontextmanager
async def webhook_configured(
    kube: KubeClient, configuration: str, namespace: str, port: int | None = None
) -> AsyncIterator[int]:
    """``configuration`` created for ``namespace``'s pods, calling 127.0.0.1:``port`` (a free
    port when None), for as long as the block runs; yields that port. Deleted at the end,
    whatever the deletion answers: a clean-up must not hide what failed in the block."""
    port = free_port() if port is None else port
    await kube.create(
        MUTATING_WEBHOOK_CONFIGURATIONS,
        webhook_configuration(configuration, webhook_url(port), namespace),
    )
    try:
        yield port
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)


async def ca_bundle_written(kube: KubeClient, configuration: str, within: float = 30.0) -> None:
    """Until the controller has written its CA into every webhook of ``configuration``."""
    await watch_objects(
        kube,
        MUTATING_WEBHOOK_CONFIGURATIONS,
        lambda found: all(
            w["clientConfig"].get("caBundle")
            for w in (found.get(configuration) or {}).get("webhooks") or [{}]
        ),
        field_selector=f"metadata.name={configuration}",
        within=within,
        what="the controller wrote the webhook's CA into the caBundle",
    )


def clique_of_each_pod(
    pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """Pod name -> the NVLink clique of the node it is scheduled on ("-": no clique label,
    "" : not scheduled)."""
    clique_of_node = {
        objects.name(n): objects.label(n, c.GPU_CLIQUE_NODE_LABEL) or "-" for n in nodes
    }
    return {
        objects.name(p) or "?": clique_of_node.get((p.get("spec") or {}).get("nodeName") or "", "")
        for p in pods
    }
