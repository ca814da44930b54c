"""The placement webhook under exactly the RBAC its manifests grant, on the real control plane.

test_rbac.py runs the controller as its ServiceAccount with manifests/rbac's permissions; this
adds the webhook's (api/rbac.py WEBHOOK_*): the rules the Helm chart renders with
``placementWebhook.enabled=true``, which must be the rules of the kustomize component
(manifests/placement-webhook), installed and bound to the ServiceAccount. Then the webhook's
whole path runs as that ServiceAccount: its certificate into the Secret (get, create) and the
CA into the configuration's caBundle (get, update), a Job opted in for a ComputeDomain of its
own (the CD created; the Job read to size it), a StatefulSet's opted-in CD (the StatefulSet read
to size it) and both decisions written on the CDs. The kube-apiserver answers a missing verb
with 403, which the controller's request counter shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.harness import RunningController, compute_domain, start_controller
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configured,
    webhook_environ,
)
from computedomain.devcluster.watching import watch_objects
from computedomain.domain.placement import (
    PLACEMENT_OPT_IN,
    RECORDED_CLIQUE_ANNOTATION,
    RECORDED_SIZE_ANNOTATION,
)
from computedomain.domain.workload_domain import WORKLOAD_ANNOTATION
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import JOBS
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.integration.e2e_harness import STATEFULSETS, workload
from tests.integration.test_rbac import (
    CONTROLLER_SA,
    RBAC_ENV,
    ForbiddenLog,
    install,
    render_rbac,
    uninstall,
    without_verb,
)
from tests.integration.test_workload_domain import annotated_job
from tests.unit.helm.support import CHART, helm_or_skip, run_helm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
COMPONENT_ROLES = ROOT / "manifests" / "placement-webhook" / "role.yaml"
# The names the roles grant get/update on (resourceNames): the configuration and the Secret.
CONFIGURATION = "computedomain-placement"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
SIZE = 2
STEP = 30.0
Grant = tuple[str, str, str, str, str]  # (kind, role, apiGroup, resource, verb)


def helm_webhook_roles() -> list[dict[str, Any]]:
    """The webhook's roles and bindings as ``helm template`` renders them."""
    result = run_helm(
        helm_or_skip(),
        "template",
        "computedomain-controller",
        str(CHART),
        "--namespace",
        "computedomain-system",
        "--set",
        "placementWebhook.enabled=true",
    )
    assert result.returncode == 0, result.stderr
    return [
        doc
        for doc in yaml.safe_load_all(result.stdout)
        if doc and doc["kind"] in RBAC_KINDS and doc["metadata"]["name"].endswith("-webhook")
    ]


def component_webhook_roles() -> list[dict[str, Any]]:
    """... and as the kustomize component has them (its patches touch only the manager)."""
    return [doc for doc in yaml.safe_load_all(COMPONENT_ROLES.read_text()) if doc]


def grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, str, tuple[str, ...]]]:
    """(kind, apiGroup, resource, verb, resourceNames) of every rule, however split."""
    out = set()
    for obj in objects:
        for rule in obj.get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        names = tuple(sorted(rule.get("resourceNames") or []))
                        out.add((obj["kind"], group, resource, verb, names))
    return out


async def scenario(
    admin: KubeClient, controller: RunningController, namespace: str, forbidden: ForbiddenLog
) -> dict[str, dict[str, Any]]:
    """The webhook's path; the CDs at its end. Stops at the first 403."""

    async def step(what: str, waiting: Any) -> Any:
        task = asyncio.ensure_future(waiting)
        try:
            while not task.done():
                if controller.forbidden():
                    raise AssertionError(f"403 during '{what}': {'; '.join(forbidden.lines[:1])}")
                await asyncio.wait({task}, timeout=0.1)  # polls an in-process counter
        finally:
            task.cancel()
        return task.result()

    await step("the CA written into the caBundle", ca_bundle_written(admin, CONFIGURATION))
    body = compute_domain("sts", rct_name="sts", num_nodes=0)
    body["metadata"]["annotations"] = {PLACEMENT_OPT_IN: "true"}
    await admin.create(COMPUTE_DOMAINS, body, namespace)
    await admin.create(STATEFULSETS, workload("sts", SIZE, rct_name="sts"), namespace)
    await admin.create(JOBS, annotated_job("train", SIZE), namespace)

    def both_placed(cds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
        decided = {
            name: cd
            for name, cd in cds.items()
            if RECORDED_CLIQUE_ANNOTATION in (cd["metadata"].get("annotations") or {})
        }
        return decided if len(decided) == 2 else None

    placed: dict[str, dict[str, Any]] = await step(
        "both ComputeDomains placed",
        watch_objects(admin, COMPUTE_DOMAINS, both_placed, namespace=namespace, within=STEP),
    )
    assert controller.forbidden() == 0, forbidden.lines
    return placed


@pytest.fixture
async def admin(api_client: ApiClient) -> KubeClient:
    return KubeClient.from_api_client(api_client, field_manager="webhook-rbac-test")


@pytest.fixture
async def driver_namespace(admin: KubeClient) -> AsyncIterator[str]:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "whrbac-"}}
    name: str = (await admin.create(r.NAMESPACES, body))["metadata"]["name"]
    yield name
    await admin.delete(r.NAMESPACES, name)


async def run_webhook_path(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
    dropped: Grant | None,
) -> dict[str, dict[str, Any]]:
    webhook_roles = component_webhook_roles()
    objects = without_verb([*render_rbac(), *webhook_roles], dropped)
    installed = await install(admin, objects, driver_namespace)
    forbidden = ForbiddenLog()
    try:
        async with webhook_configured(admin, CONFIGURATION, namespace) as port:
            simulator = Simulator(
                KubeClient.from_api_client(api_client, field_manager="computedomain-sim"),
                SimSettings(
                    driver_namespace=driver_namespace,
                    faults=FaultSettings(daemon_delay=DelayRange.fixed(0.2)),
                    seed=13,
                ),
            )
            sim_task = asyncio.create_task(simulator.run())
            controller: RunningController | None = None
            try:
                async with asyncio.timeout(30):
                    await simulator.wait_ready()
                token = await request_service_account_token(
                    api_client, driver_namespace, CONTROLLER_SA
                )
                kubeconfig = token_kubeconfig(
                    tmp_path / "controller.kubeconfig",
                    control_plane.server,
                    control_plane.ca_file,
                    token,
                )
                controller = await start_controller(
                    kubeconfig,
                    driver_namespace,
                    {
                        **RBAC_ENV,
                        **environ(leader_election_lease_lock_namespace=driver_namespace),
                        **webhook_environ(port, CONFIGURATION),
                    },
                    wait_synced=None,
                    # The 403 log attached before the controller's first request.
                    on_ready=lambda _: logging.getLogger().addHandler(forbidden),
                )
                return await scenario(admin, controller, namespace, forbidden)
            finally:
                await _clean_up(admin, namespace, controller)
                sim_task.cancel()
                await asyncio.gather(sim_task, return_exceptions=True)
    finally:
        await uninstall(admin, installed)
        logging.getLogger().removeHandler(forbidden)


async def _clean_up(
    admin: KubeClient, namespace: str, controller: RunningController | None
) -> None:
    """The workloads and their pods gone, then the CDs (finalized by the controller when it
    can; else their finalizers stripped and their nodes unlabelled): the fleet is shared."""
    for res, name in ((JOBS, "train"), (STATEFULSETS, "sts")):
        with contextlib.suppress(ApiError):
            await admin.delete(res, name, namespace, propagation_policy="Background")
    await watch_objects(
        admin, r.PODS, lambda pods: not pods, namespace=namespace, within=60, what="pods gone"
    )
    cds = (await admin.list(COMPUTE_DOMAINS, namespace))["items"]
    uids = [cd["metadata"]["uid"] for cd in cds]
    for cd in cds:
        with contextlib.suppress(ApiError):
            await admin.delete(COMPUTE_DOMAINS, cd["metadata"]["name"], namespace)
    with contextlib.suppress(TimeoutError):
        await watch_objects(
            admin, COMPUTE_DOMAINS, lambda items: not items, namespace=namespace, within=30
        )
    if controller is not None:
        with contextlib.suppress(Exception):  # a crippled controller may have died already
            await controller.shutdown()
    strip = [{"op": "replace", "path": "/metadata/finalizers", "value": []}]
    for cd in (await admin.list(COMPUTE_DOMAINS, namespace))["items"]:
        with contextlib.suppress(ApiError):
            await admin.patch(
                COMPUTE_DOMAINS, cd["metadata"]["name"], strip, namespace, patch_type="json"
            )
    for uid in uids:
        for node in (await admin.list(r.NODES, label_selector=f"{c.CD_LABEL}={uid}"))["items"]:
            with contextlib.suppress(ApiError):
                await admin.patch(
                    r.NODES, node["metadata"]["name"], {"metadata": {"labels": {c.CD_LABEL: None}}}
                )


def test_the_chart_and_the_component_grant_the_webhook_the_same_rules() -> None:
    helm, component = helm_webhook_roles(), component_webhook_roles()
    assert grants(helm) == grants(component)
    assert {o["kind"] for o in helm} == {o["kind"] for o in component} == set(RBAC_KINDS)


async def test_the_webhook_works_with_exactly_its_manifest_rbac(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
    tmp_path: Path,
) -> None:
    placed = await run_webhook_path(
        control_plane, api_client, admin, namespace, driver_namespace, tmp_path, None
    )
    annotations = {name: cd["metadata"]["annotations"] for name, cd in placed.items()}
    # Each sized by its workload (read by the webhook), not by numNodes 0 (which says 1).
    assert {a[RECORDED_SIZE_ANNOTATION] for a in annotations.values()} == {str(SIZE)}
    job_domain = next(n for n, a in annotations.items() if WORKLOAD_ANNOTATION in a)
    assert annotations[job_domain][WORKLOAD_ANNOTATION] == "Job/train"
    assert all(a[RECORDED_CLIQUE_ANNOTATION] for a in annotations.values()), annotations


def _webhook_grants() -> list[Grant]:
    """Every (kind, role, apiGroup, resource, verb) the component grants the webhook."""
    return [
        (obj["kind"], obj["metadata"]["name"], group, resource, verb)
        for obj in component_webhook_roles()
        for rule in obj.get("rules") or []
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


@pytest.mark.parametrize("dropped", _webhook_grants(), ids=lambda g: f"{g[3]}-{g[4]}")
async def test_every_webhook_verb_is_needed(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
    tmp_path: Path,
    dropped: Grant,
) -> None:
    # A 403 stops the path where it happens, or, when the webhook carries on without what it
    # was refused (the Job's size: spec.numNodes instead), fails the check at its end.
    with pytest.raises(AssertionError, match="403"):
        await run_webhook_path(
            control_plane, api_client, admin, namespace, driver_namespace, tmp_path, dropped
        )
