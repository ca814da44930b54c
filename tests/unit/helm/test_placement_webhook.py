"""The chart's placement webhook: off by default; on, the controller serves it on the Service's
target port, the configuration can never block a pod, and its RBAC is exactly the rules the
webhook's code uses (computedomain/api/rbac.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from computedomain.admission.server import DOMAIN_PATH, NAMESPACE_PATH
from computedomain.api import rbac
from computedomain.domain.placement import PLACEMENT_OPT_IN
from tests.unit.helm.support import container, env_of, find, kinds, render
from tests.unit.helm.test_chart import settings_from

RELEASE_NS = "computedomain-system"
ON = ("placementWebhook.enabled=true",)


def flat(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    return rbac.flat(
        tuple(
            rbac.Rule(group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ())))
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        )
    )


def test_off_by_default(helm: Path) -> None:
    objects = render(helm)
    assert not [name for _, name in kinds(objects) if "placement" in name]
    assert not [name for name in env_of(objects) if name.startswith("PLACEMENT_WEBHOOK")]


def test_on_the_controller_serves_the_service_with_the_certificate_it_makes(helm: Path) -> None:
    objects = render(helm, sets=ON)
    settings = settings_from(objects, RELEASE_NS)
    assert settings.placement_webhook_address == ":9443"
    assert settings.placement_webhook_hosts == (
        f"computedomain-placement-webhook.{RELEASE_NS}.svc",
    )
    assert settings.placement_webhook_cert_dir is None
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert ports["webhook"] == 9443
    service = find(objects, "Service", "computedomain-placement-webhook")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    assert settings.placement_webhook_configuration == "computedomain-placement"
    configuration = find(
        objects, "MutatingWebhookConfiguration", settings.placement_webhook_configuration
    )
    paths = set()
    for webhook in configuration["webhooks"]:
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["timeoutSeconds"] == 5
        assert webhook["clientConfig"]["service"]["name"] == "computedomain-placement-webhook"
        paths.add(webhook["clientConfig"]["service"]["path"])
        opt_in, names = webhook["namespaceSelector"]["matchExpressions"]
        assert opt_in["key"] == PLACEMENT_OPT_IN
        assert (names["operator"], names["values"]) == ("NotIn", ["kube-system", RELEASE_NS])
    assert paths == {NAMESPACE_PATH, DOMAIN_PATH}
    cluster = find(objects, "ClusterRole", "computedomain-controller-placement-webhook")
    assert flat(cluster) == rbac.flat(rbac.WEBHOOK_CLUSTER + rbac.WEBHOOK_CERTIFICATE_CLUSTER)
    role = find(objects, "Role", "computedomain-controller-placement-webhook")
    assert role["metadata"]["namespace"] == settings.driver_namespace
    assert flat(role) == rbac.flat(rbac.WEBHOOK_DRIVER_NAMESPACE)
    assert rbac.WEBHOOK_DRIVER_NAMESPACE[0].names == (settings.placement_webhook_secret,)


def test_with_cert_manager_the_controller_reads_the_mounted_certificate(helm: Path) -> None:
    objects = render(helm, sets=(*ON, "placementWebhook.certManager.enabled=true"))
    env = env_of(objects)
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert env["PLACEMENT_WEBHOOK_CERT_DIR"] == mounts["webhook-tls"]
    certificate = find(objects, "Certificate", "computedomain-placement-webhook")
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (tls,) = [v for v in volumes if v["name"] == "webhook-tls"]
    assert tls["secret"]["secretName"] == certificate["spec"]["secretName"]
    configuration = find(objects, "MutatingWebhookConfiguration", "computedomain-placement")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{RELEASE_NS}/computedomain-placement-webhook"
    )
    # cert-manager's certificate needs none of the controller's own RBAC for it.
    assert [k for k, n in kinds(objects) if k.endswith("Role") and "placement" in n] == [
        "ClusterRole"
    ]
    cluster = find(objects, "ClusterRole", "computedomain-controller-placement-webhook")
    assert flat(cluster) == rbac.flat(rbac.WEBHOOK_CLUSTER)
