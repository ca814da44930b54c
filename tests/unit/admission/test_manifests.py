"""manifests/placement-webhook (the kustomize component): its RBAC is the webhook's rules of
computedomain/api/rbac.py, its configuration never blocks a pod and calls both paths, and the
controller it patches serves what the Service targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from computedomain.admission.server import DOMAIN_PATH, NAMESPACE_PATH
from computedomain.api import rbac
from computedomain.config import parse_settings
from computedomain.domain.placement import PLACEMENT_OPT_IN

COMPONENT = Path(__file__).resolve().parents[3] / "manifests" / "placement-webhook"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]


def rules(role: dict[str, Any]) -> tuple[rbac.Rule, ...]:
    return tuple(
        rbac.Rule(group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )


def test_the_rbac_is_the_webhooks_rules() -> None:
    roles = {d["kind"]: d for d in documents("role.yaml") if d["kind"].endswith("Role")}
    assert rules(roles["ClusterRole"]) == rbac.WEBHOOK_CLUSTER + rbac.WEBHOOK_CERTIFICATE_CLUSTER
    assert rules(roles["Role"]) == rbac.WEBHOOK_DRIVER_NAMESPACE


def test_the_configuration_never_blocks_a_pod_and_calls_both_paths() -> None:
    (configuration,) = documents("mutating_webhook_configuration.yaml")
    paths = set()
    for webhook in configuration["webhooks"]:
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["namespaceSelector"]["matchExpressions"][0]["key"] == PLACEMENT_OPT_IN
        paths.add(webhook["clientConfig"]["service"]["path"])
    assert paths == {NAMESPACE_PATH, DOMAIN_PATH}


def test_the_controller_serves_the_port_the_service_targets() -> None:
    (patch,) = documents("manager_patch.yaml")
    (controller,) = patch["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in controller["env"]}
    settings = parse_settings([], {**env, "NAMESPACE": "computedomain-system"})
    (port,) = controller["ports"]
    assert settings.placement_webhook_address == f":{port['containerPort']}"
    (service,) = documents("service.yaml")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert settings.placement_webhook_hosts == (
        f"{service['metadata']['name']}.computedomain-system.svc",
    )
