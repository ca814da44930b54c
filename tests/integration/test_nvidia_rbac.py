"""Our controller under the RBAC each NVIDIA install shape gives NVIDIA's controller.

An SRE may swap our controller into NVIDIA's install and keep NVIDIA's ServiceAccount and its
RBAC: NVIDIA's chart v0.4.1 (rendered with helm from the pinned build's copy), its main branch
chart v0.5.0-dev (hack/upstream/chart.sh main) and GPU Operator 26.7's own install
(manifests/state-dra-driver/0110_controller-rbac.yaml, a Go template; its rules are kept in
tests/fixtures/nvidia-rbac/controller-rules.yaml, where the charts' renders are checked too).
They grant ``update`` but no ``patch`` on ComputeDomains, their status, Nodes and
ResourceClaimTemplates, and nothing on Events, CRDs or ServiceAccounts.

The controller runs in-process, authenticated only by a TokenRequest token of a ServiceAccount
bound to exactly those rules (a ClusterRole, and the Role in the driver namespace), with leader
election on, and takes a ComputeDomain through its life with the fleet simulator: finalizer,
children, status, Ready, deletion, node labels removed, finalizer gone. It must meet no 403
(the access reviewed at start decides before any request), and the apiserver's audit log shows
its writes of ComputeDomains, their status, Nodes and claim templates were updates, never
patches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.audit import AuditLog, service_account_user
from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.harness import RunningController, compute_domain, start_controller
from computedomain.devcluster.helm import HelmUnavailableError, find_helm
from computedomain.devcluster.upstream import COMPUTE_DOMAIN_VALUES, render_chart
from computedomain.devcluster.watching import watch_object
from computedomain.observability.logging import configure_logging
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import labels
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.integration.test_rbac import RBAC_KINDS, free_rack_pair, ready_cd
from tests.kit.controllers import CD_LABEL_PATH, workload_pod
from tests.kit.rbac import nvidia_shapes

pytestmark = pytest.mark.integration

CONTROLLER_SA = "nvidia-controller"
STEP_TIMEOUT = 40.0
RBAC_TEMPLATE = "templates/rbac-controller.yaml"
# Written by update under NVIDIA's RBAC (no patch granted on them).
BY_UPDATE = {"computedomains", "nodes", "resourceclaimtemplates"}
ENV = environ(
    pod_name="nvidia-rbac-test",
    leader_election_enabled="true",
    leader_election_lease_duration="4s",
    leader_election_renew_deadline="3s",
    leader_election_retry_period="500ms",
    daemon_pod_wait_timeout="20s",
    # Its deletion happens under running workload pods: the controller looks for them (a LIST of
    # pods, which NVIDIA's RBAC grants too), waits a second, and goes on.
    workload_release_timeout="1s",
)


def chart_rules(chart: Path, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """The controller's ClusterRole and Role rules as NVIDIA's ``chart`` renders them."""
    try:
        helm = find_helm(build=True)
    except HelmUnavailableError as error:
        pytest.fail(f"helm unavailable: {error}")
    rules: dict[str, list[dict[str, Any]]] = {}
    for doc in render_chart(helm, chart, namespace, COMPUTE_DOMAIN_VALUES, show_only=RBAC_TEMPLATE):
        if doc["kind"] == "ClusterRole":
            rules["clusterRole"] = doc["rules"]
        elif doc["kind"] == "Role":
            rules["role"] = doc["rules"]
    return rules


@pytest.fixture(params=["chart-v0.4.1", "chart-v0.5-dev", "gpu-operator"])
def nvidia_rules(request: pytest.FixtureRequest) -> dict[str, list[dict[str, Any]]]:
    """The shape's rules: rendered from NVIDIA's chart (which must match the fixture's
    record of them), or the fixture's record of GPU Operator's manifest."""
    shape: str = request.param
    recorded = nvidia_shapes()
    if shape == "gpu-operator":
        return recorded[shape]
    if shape == "chart-v0.4.1":
        chart = request.getfixturevalue("upstream").chart
        key = "chart-v0.4"
    else:
        chart = request.getfixturevalue("main_chart")
        key = shape
    rendered = chart_rules(chart, "nvidia-dra-driver-gpu")
    assert rendered == recorded[key], f"{shape}: the fixture no longer says what the chart grants"
    return rendered


class LogLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    handler = LogLines()
    yield handler
    logging.getLogger().removeHandler(handler)


@pytest.fixture
async def admin(api_client: ApiClient) -> KubeClient:
    return KubeClient.from_api_client(api_client, field_manager="nvidia-rbac-test")


async def bind(
    admin: KubeClient, rules: dict[str, list[dict[str, Any]]], driver_namespace: str
) -> list[tuple[Any, str]]:
    """A ServiceAccount in the driver namespace bound to the ClusterRole and the Role made of
    ``rules`` (as NVIDIA's installs bind its controller's); the cluster-scoped objects made."""
    name = f"nvidia-controller-{driver_namespace}"
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER_SA, "namespace": driver_namespace}]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CONTROLLER_SA}}
    await admin.create(r.SERVICE_ACCOUNTS, account, driver_namespace)
    objects: list[tuple[str, dict[str, Any]]] = [
        ("ClusterRole", {"metadata": {"name": name}, "rules": rules["clusterRole"]}),
        ("Role", {"metadata": {"name": name}, "rules": rules["role"]}),
    ]
    for kind in ("ClusterRole", "Role"):
        binding = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
        objects.append((binding, {"metadata": {"name": name}, "subjects": subject, "roleRef": ref}))
    made = []
    for kind, body in objects:
        res = RBAC_KINDS[kind]
        body = {"apiVersion": res.api_version, "kind": kind, **body}
        await admin.create(res, body, driver_namespace if res.namespaced else None)
        if not res.namespaced:
            made.append((res, name))
    return made


async def step(controller: RunningController, what: str, waiting: Awaitable[Any]) -> Any:
    """``waiting``, failing at once on the controller's first 403 or its exit."""

    async def refused() -> None:
        while controller.forbidden() == 0 and not controller.task.done():
            await asyncio.sleep(0.1)  # polls an in-process counter, not the API

    wait_task = asyncio.ensure_future(waiting)
    refused_task = asyncio.ensure_future(refused())
    try:
        await asyncio.wait(
            {wait_task, refused_task}, timeout=STEP_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in (wait_task, refused_task):
            task.cancel()
        await asyncio.gather(wait_task, refused_task, return_exceptions=True)
    assert controller.forbidden() == 0, f"403 during '{what}'"
    assert not controller.task.done(), f"controller exited during '{what}'"
    assert not wait_task.cancelled(), f"'{what}' not within {STEP_TIMEOUT}s"
    return wait_task.result()


@pytest.fixture
async def simulator(api_client: ApiClient, driver_namespace: str) -> AsyncIterator[Simulator]:
    sim = Simulator(
        KubeClient.from_api_client(api_client, field_manager="computedomain-sim"),
        SimSettings(
            driver_namespace=driver_namespace,
            faults=FaultSettings(daemon_delay=DelayRange.fixed(0.2)),
            seed=13,
            recheck_interval=5.0,
        ),
    )
    task = asyncio.create_task(sim.run())
    async with asyncio.timeout(30):
        await sim.wait_ready()
    yield sim
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_cd_lives_and_goes_under_nvidias_controller_rbac(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
    nvidia_rules: dict[str, list[dict[str, Any]]],
    simulator: Simulator,
    log_lines: LogLines,
    tmp_path: Path,
) -> None:
    made = await bind(admin, nvidia_rules, driver_namespace)
    nodes = await free_rack_pair(admin, fleet_nodes)
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    mark = audit.mark()
    token = await request_service_account_token(api_client, driver_namespace, CONTROLLER_SA)
    kubeconfig = token_kubeconfig(
        tmp_path / "controller.kubeconfig", control_plane.server, control_plane.ca_file, token
    )
    configure_logging(log_format="text", verbosity=0)
    controller = await start_controller(
        kubeconfig,
        driver_namespace,
        {**ENV, **environ(leader_election_lease_lock_namespace=driver_namespace)},
        wait_synced=None,
        log_verbosity=None,
        on_ready=lambda _: logging.getLogger().addHandler(log_lines),
    )
    try:
        process = controller.process
        await step(controller, "caches synced", process.caches.wait_synced())
        await step(controller, "leading", process.leading.wait())

        await admin.create(COMPUTE_DOMAINS, compute_domain("cd", "channel", 2), namespace)
        cd = await step(
            controller,
            "finalizer added",
            watch_object(
                admin,
                COMPUTE_DOMAINS,
                "cd",
                lambda o: c.FINALIZER in ((o or {}).get("metadata") or {}).get("finalizers", []),
                namespace=namespace,
                within=STEP_TIMEOUT,
            ),
        )
        uid = cd["metadata"]["uid"]
        for res, ns, name in (
            (r.DAEMONSETS, driver_namespace, c.daemon_name(uid)),
            (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace, c.daemon_name(uid)),
            (r.RESOURCE_CLAIM_TEMPLATES, namespace, "channel"),
        ):
            await step(
                controller,
                f"{res.kind} {name} created",
                watch_object(admin, res, name, lambda o: o is not None, namespace=ns),
            )
        for index, node in enumerate(nodes):
            await admin.create(r.PODS, workload_pod(f"worker-{index}", node, "channel"), namespace)
        ready = await step(
            controller,
            "CD Ready",
            watch_object(admin, COMPUTE_DOMAINS, "cd", ready_cd, namespace=namespace, within=60),
        )
        # Our conditions too: the CRD is ours here (the cluster's), though it cannot be read.
        assert any(x["type"] == "Ready" for x in ready["status"].get("conditions") or [])

        await admin.delete(COMPUTE_DOMAINS, "cd", namespace)
        for node in nodes:
            await step(
                controller,
                f"label removed from {node}",
                watch_object(
                    admin, r.NODES, node, lambda n: labels(n).get(c.CD_LABEL) != uid, within=60
                ),
            )
        await step(
            controller,
            "CD finalized",
            watch_object(admin, COMPUTE_DOMAINS, "cd", lambda o: o is None, namespace=namespace),
        )
        assert controller.forbidden() == 0
    finally:
        await controller.shutdown()
        for index in range(2):
            with contextlib.suppress(ApiError):
                await admin.delete(r.PODS, f"worker-{index}", namespace)
        await strip_leftovers(admin, namespace, driver_namespace, nodes)
        for res, name in made:
            with contextlib.suppress(ApiError):
                await admin.delete(res, name)

    writes = audit.writes(mark, service_account_user(driver_namespace, CONTROLLER_SA))
    assert [w.target for w in writes if w.code == 403] == []
    assert [w.target for w in writes if w.verb == "patch" and w.resource in BY_UPDATE] == []
    updated = {(w.resource, w.subresource) for w in writes if w.verb == "update" and w.code < 300}
    # The finalizer, the status, the node labels and the claim templates' finalizers.
    assert {(res, "") for res in BY_UPDATE} | {("computedomains", "status")} <= updated
    assert [w.target for w in writes if w.resource == "events"] == []
    # Said once each: Events are off, the writes go by update; nothing it cannot do without.
    assert sum(line.startswith("Events are not recorded") for line in log_lines.lines) == 1
    assert sum(line.startswith("Patch not granted on") for line in log_lines.lines) == 1
    assert not [line for line in log_lines.lines if "cannot work without" in line]


async def strip_leftovers(
    admin: KubeClient, namespace: str, driver_namespace: str, nodes: tuple[str, str]
) -> None:
    """Leave the shared fleet as found when the scenario stopped half-way."""
    strip = [{"op": "replace", "path": "/metadata/finalizers", "value": []}]
    for res, ns in (
        (COMPUTE_DOMAINS, namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace),
        (r.DAEMONSETS, driver_namespace),
    ):
        for item in (await admin.list(res, ns))["items"]:
            with contextlib.suppress(ApiError):
                await admin.patch(res, item["metadata"]["name"], strip, ns, patch_type="json")
    for node in nodes:
        with contextlib.suppress(ApiError):
            if c.CD_LABEL in labels(await admin.get(r.NODES, node)):
                await admin.patch(
                    r.NODES, node, [{"op": "remove", "path": CD_LABEL_PATH}], patch_type="json"
                )
