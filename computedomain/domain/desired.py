"""Pure builders of the three objects the controller creates for a ComputeDomain (contract §7).

Every field here is read by NVIDIA's kubelet plugin or IMEX daemon, or mirrors what upstream
writes; tests compare the output with the golden files in tests/fixtures/upstream/.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.api.v1beta1 import (
    ComputeDomain,
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
)
from computedomain.domain.settings import DaemonSettings

RESOURCE_API_VERSION = "resource.k8s.io/v1"


def _require_uid(cd: ComputeDomain) -> str:
    if not cd.uid:
        raise ValueError(f"ComputeDomain {cd.namespace}/{cd.name} has no UID yet")
    return cd.uid


def feature_gates_env(gates: Mapping[str, bool]) -> str:
    """``FEATURE_GATES`` for the daemon: ``Name=true,`` pairs sorted by name, trailing comma.

    Only gates the daemon knows are emitted: its parser rejects unknown names and the daemon
    would not start. Returns "" when none apply (the env var is then left out).
    """
    known = {name: value for name, value in gates.items() if name in c.DAEMON_FEATURE_GATES}
    if known.get(c.GATE_CLIQUES) and known.get(c.GATE_DNS_NAMES) is False:
        raise ValueError(f"{c.GATE_CLIQUES}=true requires {c.GATE_DNS_NAMES}=true")
    return "".join(f"{name}={str(known[name]).lower()}," for name in sorted(known))


def _claim_template(
    *,
    name: str,
    namespace: str,
    cd_uid: str,
    target: str,
    request: str,
    device_class: str,
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "finalizers": [c.FINALIZER],
            "labels": {c.CD_LABEL: cd_uid, c.TARGET_LABEL: target},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            # Sorted keys: the apiserver keeps these bytes verbatim and compares
                            # them on every update; a merge patch re-marshals them sorted.
                            "opaque": {
                                "driver": c.DRIVER_NAME,
                                "parameters": dict(sorted(parameters.items())),
                            },
                        }
                    ],
                }
            }
        },
    }


def daemon_resource_claim_template(cd: ComputeDomain, settings: DaemonSettings) -> dict[str, Any]:
    """The daemon RCT ``computedomain-daemon-<uid>`` in the driver namespace (§7.2)."""
    uid = _require_uid(cd)
    return _claim_template(
        name=c.daemon_name(uid),
        namespace=settings.driver_namespace,
        cd_uid=uid,
        target=c.TARGET_DAEMON,
        request=c.DAEMON_REQUEST,
        device_class=c.DAEMON_DEVICE_CLASS,
        parameters=ComputeDomainDaemonConfig(domain_id=uid).to_dict(),
    )


def workload_resource_claim_template(
    cd: ComputeDomain, *, host_managed: bool = False
) -> dict[str, Any]:
    """The workload RCT named by ``spec.channel.resourceClaimTemplate.name``, in the CD's
    namespace (§7.4). With host-managed IMEX its allocationMode is always ``Single``, whatever
    the CD asks (§18: one channel, 0, per domain)."""
    uid = _require_uid(cd)
    if cd.spec is None:
        raise ValueError(f"ComputeDomain {cd.namespace}/{cd.name} has no spec")
    channel = cd.spec.channel
    return _claim_template(
        name=channel.resource_claim_template.name,
        namespace=cd.namespace,
        cd_uid=uid,
        target=c.TARGET_WORKLOAD,
        request=c.CHANNEL_REQUEST,
        device_class=c.CHANNEL_DEVICE_CLASS,
        parameters=ComputeDomainChannelConfig(
            domain_id=uid,
            allocation_mode=c.ALLOCATION_SINGLE if host_managed else channel.allocation_mode,
        ).to_dict(),
    )


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _daemon_env(settings: DaemonSettings) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": c.DAEMON_LOG_VERBOSITY_ENV, "value": str(settings.log_verbosity)},
        {
            "name": c.MAX_NODES_PER_IMEX_DOMAIN_ENV,
            "value": str(settings.max_nodes_per_imex_domain),
        },
        _field_env(c.NODE_NAME_ENV, "spec.nodeName"),
        _field_env(c.POD_IP_ENV, "status.podIP"),
        _field_env(c.POD_UID_ENV, "metadata.uid"),
        _field_env(c.POD_NAME_ENV, "metadata.name"),
        _field_env(c.POD_NAMESPACE_ENV, "metadata.namespace"),
        # Without "void" the NVIDIA runtime would expose every GPU to the daemon.
        {"name": c.NVIDIA_VISIBLE_DEVICES_ENV, "value": "void"},
    ]
    gates = feature_gates_env(settings.feature_gates)
    if gates:
        env.append({"name": c.FEATURE_GATES_ENV, "value": gates})
    return env


def _probe(**timings: int) -> dict[str, Any]:
    check = ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"]
    return {"exec": {"command": check}, **timings}


def daemon_daemonset(cd: ComputeDomain, settings: DaemonSettings) -> dict[str, Any]:
    """The IMEX daemon DaemonSet ``computedomain-daemon-<uid>`` in the driver namespace (§7.3).

    Create it once; never patch its pod template (a rollout restarts every IMEX daemon of the
    domain under running jobs).
    """
    uid = _require_uid(cd)
    name = c.daemon_name(uid)
    cd_labels = {c.CD_LABEL: uid}
    resources: dict[str, Any] = {
        key: dict(value) for key, value in (settings.daemon_resources or {}).items() if value
    }
    resources["claims"] = [{"name": c.DAEMON_POD_CLAIM}]
    container: dict[str, Any] = {
        "name": c.DAEMON_CONTAINER,
        "image": settings.image,
        "command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"],
        "env": _daemon_env(settings),
        "resources": resources,
        # Startup: poll every second for up to 20 min without killing a slow IMEX start.
        "startupProbe": _probe(
            initialDelaySeconds=0,
            periodSeconds=1,
            timeoutSeconds=10,
            failureThreshold=1200,
            successThreshold=1,
        ),
        "livenessProbe": _probe(
            periodSeconds=60, timeoutSeconds=10, failureThreshold=20, successThreshold=1
        ),
        "readinessProbe": _probe(
            periodSeconds=10, timeoutSeconds=10, failureThreshold=1, successThreshold=1
        ),
    }
    pod_spec: dict[str, Any] = {"serviceAccountName": c.DAEMON_SERVICE_ACCOUNT}
    if settings.priority_class_name:
        pod_spec["priorityClassName"] = settings.priority_class_name
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    pod_spec |= {
        "nodeSelector": dict(cd_labels),
        # Tolerate every taint (upstream issue #305): the node already runs the workload.
        "tolerations": [
            {"operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute"},
            {"operator": "Exists", "effect": "PreferNoSchedule"},
        ],
        "containers": [container],
        "resourceClaims": [{"name": c.DAEMON_POD_CLAIM, "resourceClaimTemplateName": name}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": settings.driver_namespace,
            "finalizers": [c.FINALIZER],
            "labels": dict(cd_labels),
        },
        "spec": {
            "selector": {"matchLabels": dict(cd_labels)},
            "template": {"metadata": {"labels": dict(cd_labels)}, "spec": pod_spec},
        },
    }
