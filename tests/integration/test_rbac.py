"""The controller's RBAC (manifests/rbac) is sufficient, and every verb in it is needed.

The controller runs in-process, authenticated only by a TokenRequest token of its own
ServiceAccount bound to the rendered manifests; the fleet simulator plays NVIDIA's plugin and
daemons with the admin client. One scenario touches every verb the code uses (leader election,
children, status, foreign objects, events with a series, clique pruning, orphan cleanup, node
labels and finalizers on deletion). With the full RBAC it passes with no 403; with any single
verb removed it must break visibly: a 403 in ``rest_client_requests_total`` or a step that
never completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.assets import AssetsUnavailableError, find_assets
from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.harness import RunningController, compute_domain, start_controller
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.observability.logging import configure_logging
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import labels
from computedomain.runtime.resources import Resource
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.kit.controllers import CD_LABEL_PATH, WORKLOAD_IMAGE, allocated_pools, workload_pod

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RBAC_DIR = ROOT / "manifests" / "rbac"
CONTROLLER_SA = "computedomain-controller"
STEP_TIMEOUT = 25.0

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_KINDS = {
    "ClusterRole": Resource(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", False),
    "ClusterRoleBinding": Resource(
        RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    "Role": Resource(RBAC_GROUP, "v1", "roles", "Role", True),
    "RoleBinding": Resource(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", True),
    "ServiceAccount": r.SERVICE_ACCOUNTS,
}
CONTROLLER_ROLES = ("computedomain-controller", "computedomain-controller-leader-election")


# -- the manifests -----------------------------------------------------------------------------


def render_rbac() -> list[dict[str, Any]]:
    """manifests/rbac through kustomize (the built kubectl), as an install would see it."""
    try:
        kubectl = find_assets()["kubectl"]
    except AssetsUnavailableError as error:
        pytest.fail(f"kubectl unavailable although the control plane runs: {error}")
    result = subprocess.run(
        [str(kubectl), "kustomize", str(RBAC_DIR)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def controller_verbs(objects: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """(kind, role, apiGroup, resource, verb) of every grant to the controller."""
    grants = []
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        if obj["metadata"]["name"] not in CONTROLLER_ROLES:
            continue
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.append((obj["kind"], obj["metadata"]["name"], group, resource, verb))
    return grants


def _rendered_grants() -> list[tuple[str, str, str, str, str]]:
    """For parametrization at collection time: plain YAML (kustomize needs built assets)."""
    kustomization = yaml.safe_load((RBAC_DIR / "kustomization.yaml").read_text())
    objects = [yaml.safe_load((RBAC_DIR / name).read_text()) for name in kustomization["resources"]]
    return controller_verbs(objects)


def without_verb(
    objects: list[dict[str, Any]], grant: tuple[str, str, str, str, str] | None
) -> list[dict[str, Any]]:
    if grant is None:
        return objects
    kind, role, group, resource, verb = grant
    edited = copy.deepcopy(objects)
    for obj in edited:
        if obj["kind"] != kind or obj["metadata"]["name"] != role:
            continue
        rules = []
        for rule in obj["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                # Split the rule so only this (group, resource) loses the verb.
                others = [res for res in rule["resources"] if res != resource]
                if others:
                    rules.append({**rule, "resources": others})
                verbs = [v for v in rule["verbs"] if v != verb]
                if verbs:
                    rules.append({**rule, "resources": [resource], "verbs": verbs})
            else:
                rules.append(rule)
        obj["rules"] = rules
    return edited


# -- installing it into a test's driver namespace ------------------------------------------------


@dataclass
class InstalledRbac:
    driver_namespace: str
    created: list[tuple[Resource, str, str | None]] = field(default_factory=list)


def localize(obj: dict[str, Any], driver_namespace: str) -> tuple[Resource, dict[str, Any]]:
    """Namespaced objects into the driver namespace; cluster-scoped names made unique."""
    res = RBAC_KINDS[obj["kind"]]
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if res.namespaced:
        meta["namespace"] = driver_namespace
    else:
        meta["name"] = f"{meta['name']}-{driver_namespace}"
    ref = obj.get("roleRef")
    if ref and ref["kind"] == "ClusterRole":
        ref["name"] = f"{ref['name']}-{driver_namespace}"
    for subject in obj.get("subjects", []):
        subject["namespace"] = driver_namespace
    return res, obj


async def install(
    admin: KubeClient, objects: list[dict[str, Any]], driver_namespace: str
) -> InstalledRbac:
    installed = InstalledRbac(driver_namespace)
    for obj in objects:
        res, body = localize(obj, driver_namespace)
        namespace = body["metadata"].get("namespace")
        await admin.create(res, body, namespace)
        installed.created.append((res, body["metadata"]["name"], namespace))
    return installed


async def uninstall(admin: KubeClient, installed: InstalledRbac) -> None:
    for res, name, namespace in installed.created:
        if res.namespaced:
            continue  # goes with the driver namespace
        with contextlib.suppress(ApiError):
            await admin.delete(res, name, namespace)


# -- a controller that may be crippled ---------------------------------------------------------


class ForbiddenLog(logging.Handler):
    """Keeps the first log lines that mention a 403, to say which request was refused."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        # The refused request is named in structured extras (err=...) or in the exception.
        extras = (v for k, v in vars(record).items() if k in ("err", "error", "reason"))
        text += "".join(f" {value}" for value in extras)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {record.exc_info[1]}"
        if ("403" in text or "forbidden" in text.lower()) and len(self.lines) < 5:
            self.lines.append(text[:300])


# Leader election on, with short timers; the orphan sweep as often as the settings allow.
RBAC_ENV = environ(
    pod_name="rbac-test",
    leader_election_enabled="true",
    leader_election_lease_duration="4s",
    leader_election_renew_deadline="3s",
    leader_election_retry_period="500ms",
    orphan_grace_period="1s",
    orphan_sweep_interval="10s",
    daemon_pod_wait_timeout="20s",
    # The deletion below happens under running workload pods: it looks for them (a LIST of
    # pods in the CD's namespace), waits a second, and goes on.
    workload_release_timeout="1s",
)


async def start_unsynced_controller(
    kubeconfig: Path, driver_namespace: str, forbidden_log: ForbiddenLog
) -> RunningController:
    """Unlike the tests' default, does not wait for the caches: a missing list/watch verb never
    syncs. The 403 log is attached before the controller makes its first request."""
    configure_logging(log_format="text", verbosity=0)
    return await start_controller(
        kubeconfig,
        driver_namespace,
        {**RBAC_ENV, **environ(leader_election_lease_lock_namespace=driver_namespace)},
        wait_synced=None,
        log_verbosity=None,
        # After configure_logging replaced the handlers.
        on_ready=lambda _: logging.getLogger().addHandler(forbidden_log),
    )


# -- waiting -----------------------------------------------------------------------------------


class ScenarioBrokenError(Exception):
    """The scenario stopped: a step failed or the controller was refused."""


# Steps.run bounds every wait (and stops early on a 403), so the watches themselves need not.
UNBOUNDED = 3600.0


async def until(
    client: KubeClient,
    res: Resource,
    namespace: str | None,
    check: Callable[[dict[str, dict[str, Any]]], Any],
    *,
    field_selector: str | None = None,
    label_selector: str | None = None,
) -> Any:
    return await watch_objects(
        client,
        res,
        check,
        namespace=namespace,
        field_selector=field_selector,
        label_selector=label_selector,
        within=UNBOUNDED,
    )


@dataclass
class Steps:
    controller: RunningController
    forbidden_log: ForbiddenLog
    done: list[str] = field(default_factory=list)

    async def run(self, what: str, waiting: Awaitable[Any], timeout: float = STEP_TIMEOUT) -> Any:
        """Awaits ``waiting``; stops at the first 403 the controller got, or at the timeout."""

        async def refused() -> None:
            while self.controller.forbidden() == 0 and not self.controller.task.done():
                await asyncio.sleep(0.1)  # polls an in-process counter, not the API

        wait_task = asyncio.ensure_future(waiting)
        refused_task = asyncio.ensure_future(refused())
        try:
            finished, _ = await asyncio.wait(
                {wait_task, refused_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (wait_task, refused_task):
                task.cancel()
            await asyncio.gather(wait_task, refused_task, return_exceptions=True)
        if self.controller.forbidden():
            lines = "; ".join(self.forbidden_log.lines[:1])
            raise ScenarioBrokenError(
                f"403 during '{what}' ({int(self.controller.forbidden())}x): {lines}"
            )
        if self.controller.task.done():
            raise ScenarioBrokenError(
                f"controller exited during '{what}': {self.controller.task.exception()!r}"
            )
        if wait_task not in finished:
            raise ScenarioBrokenError(f"'{what}' did not happen within {timeout:.0f}s")
        self.done.append(what)
        return wait_task.result()


# -- the scenario ------------------------------------------------------------------------------


def idle_daemonset(name: str, labels: dict[str, str], finalizers: list[str]) -> dict[str, Any]:
    """A DaemonSet that matches no node (so it never makes pods)."""
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels, "finalizers": finalizers},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "nodeSelector": {"no-such-node": "true"},
                    "containers": [{"name": "c", "image": WORKLOAD_IMAGE}],
                },
            },
        },
    }


def plain_claim_template(
    name: str, labels: dict[str, str], finalizers: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": labels, "finalizers": finalizers},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "channel", "exactly": {"deviceClassName": c.CHANNEL_DEVICE_CLASS}}
                    ]
                }
            }
        },
    }


async def free_rack_pair(admin: KubeClient, fleet_nodes: list[str]) -> tuple[str, str]:
    """Two nodes of one rack with no CD label and no allocated device (the fleet is shared)."""
    busy = await allocated_pools(admin)
    by_rack: dict[str, list[str]] = {}
    listed = {node["metadata"]["name"]: node for node in (await admin.list(r.NODES))["items"]}
    for name in fleet_nodes:
        node = listed[name]
        rack = labels(node).get(c.GPU_CLIQUE_NODE_LABEL)
        if rack and name not in busy and c.CD_LABEL not in labels(node):
            by_rack.setdefault(rack, []).append(name)
    # The middle racks: other modules start from the first and the last.
    for rack in sorted(by_rack)[1:] + sorted(by_rack)[:1]:
        if len(by_rack[rack]) >= 2:
            middle = len(by_rack[rack]) // 2
            return by_rack[rack][middle], by_rack[rack][middle + 1]
    raise AssertionError("no two free nodes left in one rack of the test fleet")


def ready_cd(cd: dict[str, Any] | None) -> bool:
    return ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY


async def scenario(
    steps: Steps,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    nodes: tuple[str, str],
    foreign_uid: str,
) -> None:
    process = steps.controller.process

    # Leader election: lease created (get, create), then renewed (update).
    lease_name = process.settings.lease_name
    renewals: list[str] = []

    def renewed_by_us(lease: dict[str, Any] | None) -> bool:
        spec = (lease or {}).get("spec") or {}
        if spec.get("holderIdentity") != process.identity:
            return False
        renew_time = str(spec.get("renewTime"))
        if renew_time not in renewals:
            renewals.append(renew_time)
        return len(renewals) >= 2

    await steps.run(
        "lease acquired and renewed",
        watch_object(
            admin, r.LEASES, lease_name, renewed_by_us, namespace=driver_namespace, within=UNBOUNDED
        ),
    )
    await steps.run(
        "caches synced (list/watch)",
        asyncio.gather(*(informer.wait_synced() for informer in process.caches.all)),
    )
    # An informer the controller can do without is off where its list/watch is not granted
    # (reviewed at start, no 403): what it tells is lost, a visible break too.
    off = [f"{inf.name} ({inf.unavailable})" for inf in process.caches.all if inf.unavailable]
    if off:
        raise ScenarioBrokenError(f"informers off: {'; '.join(off)}")

    # A CD whose children are taken by foreign objects: the create conflicts, then a GET.
    # One Warning names both (the ChildrenReady condition's message).
    await steps.run(
        "foreign DaemonSet and RCT refused with an event",
        until(
            admin,
            r.EVENTS,
            namespace,
            lambda events: any(
                e.get("reason") == "ForeignObject"
                and e["regarding"]["uid"] == foreign_uid
                and "DaemonSet " in e.get("note", "")
                and "ResourceClaimTemplate " in e.get("note", "")
                for e in events.values()
            ),
        ),
    )

    # The main CD: finalizer, three children, status.
    cd = await admin.create(COMPUTE_DOMAINS, compute_domain("cd", "channel", 2), namespace)
    uid = cd["metadata"]["uid"]
    await steps.run(
        "finalizer added",
        watch_object(
            admin,
            COMPUTE_DOMAINS,
            "cd",
            lambda o: c.FINALIZER in ((o or {}).get("metadata") or {}).get("finalizers", []),
            namespace=namespace,
            within=UNBOUNDED,
        ),
    )
    for res, ns, name in (
        (r.DAEMONSETS, driver_namespace, c.daemon_name(uid)),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace, c.daemon_name(uid)),
        (r.RESOURCE_CLAIM_TEMPLATES, namespace, "channel"),
    ):
        await steps.run(
            f"{res.kind} {name} created",
            watch_object(admin, res, name, lambda o: o is not None, namespace=ns, within=UNBOUNDED),
        )
    await steps.run(
        "status written",
        watch_object(
            admin,
            COMPUTE_DOMAINS,
            "cd",
            lambda o: bool((o or {}).get("status")),
            namespace=namespace,
            within=UNBOUNDED,
        ),
    )

    # Two workloads on one rack: daemons join the clique, the CD becomes Ready.
    for index, node in enumerate(nodes):
        await admin.create(r.PODS, workload_pod(f"worker-{index}", node, "channel"), namespace)
    await steps.run(
        "CD Ready",
        watch_object(admin, COMPUTE_DOMAINS, "cd", ready_cd, namespace=namespace, within=UNBOUNDED),
        timeout=45,
    )
    # A stale clique entry (no daemon pod on that node) is pruned: clique update. Injected
    # twice, the ghost node joins and leaves twice: repeated events PATCH their series.
    rack = labels(await admin.get(r.NODES, nodes[0]))[c.GPU_CLIQUE_NODE_LABEL]
    clique_name = c.clique_name(uid, rack)
    for attempt in (1, 2):
        clique = await admin.get(CLIQUES, clique_name, driver_namespace)
        clique["daemons"] = [
            *clique.get("daemons", []),
            {
                "nodeName": "ghost-node",
                "ipAddress": "10.200.255.254",
                "cliqueID": rack,
                "index": 17,
                "status": c.STATUS_NOT_READY,
            },
        ]
        await admin.replace(CLIQUES, clique, driver_namespace)
        await steps.run(
            f"stale clique entry pruned ({attempt})",
            watch_object(
                admin,
                CLIQUES,
                clique_name,
                lambda cl: all(
                    d["nodeName"] != "ghost-node" for d in (cl or {}).get("daemons", [])
                ),
                namespace=driver_namespace,
                within=UNBOUNDED,
            ),
        )
    await steps.run(
        "event series patched",
        until(
            admin,
            r.EVENTS,
            namespace,
            lambda events: any(
                (e.get("regarding") or {}).get("uid") == uid
                and ((e.get("series") or {}).get("count") or 0) >= 2
                for e in events.values()
            ),
        ),
    )

    # Orphans of a CD that never existed here: deleted, finalizers stripped.
    ghost = str(uuid.uuid4())
    orphan_labels = {c.CD_LABEL: ghost}
    await admin.create(
        r.RESOURCE_CLAIM_TEMPLATES,
        plain_claim_template("orphan", orphan_labels, [c.FINALIZER]),
        namespace,
    )
    await admin.create(
        r.DAEMONSETS, idle_daemonset("orphan", orphan_labels, [c.FINALIZER]), driver_namespace
    )
    for res, ns in ((r.RESOURCE_CLAIM_TEMPLATES, namespace), (r.DAEMONSETS, driver_namespace)):
        await steps.run(
            f"orphan {res.kind} removed",
            watch_object(admin, res, "orphan", lambda o: o is None, namespace=ns, within=UNBOUNDED),
        )

    # Deletion while the workloads still run: past WORKLOAD_RELEASE_TIMEOUT, the controller
    # itself strips the node labels.
    await admin.delete(COMPUTE_DOMAINS, "cd", namespace)
    for node in nodes:
        await steps.run(
            f"label removed from {node}",
            watch_object(
                admin,
                r.NODES,
                node,
                lambda n: labels(n).get(c.CD_LABEL) != uid,
                namespace=None,
                within=UNBOUNDED,
            ),
        )
    await steps.run(
        "CD finalized",
        watch_object(
            admin, COMPUTE_DOMAINS, "cd", lambda o: o is None, namespace=namespace, within=UNBOUNDED
        ),
        timeout=40,
    )
    await admin.delete(COMPUTE_DOMAINS, "foreign", namespace)
    await steps.run(
        "foreign CD finalized",
        watch_object(
            admin,
            COMPUTE_DOMAINS,
            "foreign",
            lambda o: o is None,
            namespace=namespace,
            within=UNBOUNDED,
        ),
    )


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered_rbac(control_plane: ControlPlane) -> list[dict[str, Any]]:
    return render_rbac()


@pytest.fixture
async def admin(api_client: ApiClient) -> KubeClient:
    return KubeClient.from_api_client(api_client, field_manager="rbac-test")


@pytest.fixture
async def driver_namespace(admin: KubeClient) -> AsyncIterator[str]:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "rbac-driver-"}}
    name: str = (await admin.create(r.NAMESPACES, body))["metadata"]["name"]
    yield name
    await admin.delete(r.NAMESPACES, name)


@pytest.fixture
def forbidden_log() -> Iterator[ForbiddenLog]:
    handler = ForbiddenLog()
    yield handler
    logging.getLogger().removeHandler(handler)


RunScenario = Callable[[tuple[str, str, str, str, str] | None], Awaitable[Steps]]


@pytest.fixture
async def run_scenario(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    rendered_rbac: list[dict[str, Any]],
    fleet_nodes: list[str],
    forbidden_log: ForbiddenLog,
    tmp_path: Path,
) -> AsyncIterator[RunScenario]:
    """``await run_scenario(grant_to_remove or None)``: installs the (crippled) RBAC, starts
    the simulator and the token-authenticated controller, and plays the scenario. Raises
    ScenarioBrokenError at the first visible failure; returns the completed steps otherwise."""
    installed: list[InstalledRbac] = []
    tasks: list[asyncio.Task[None]] = []
    controllers: list[RunningController] = []
    used_nodes: list[str] = []
    foreign_ds: list[str] = []

    async def run(grant: tuple[str, str, str, str, str] | None) -> Steps:
        installed.append(await install(admin, without_verb(rendered_rbac, grant), driver_namespace))
        token = await request_service_account_token(api_client, driver_namespace, CONTROLLER_SA)
        kubeconfig = token_kubeconfig(
            tmp_path / "controller.kubeconfig", control_plane.server, control_plane.ca_file, token
        )
        sim_client = KubeClient.from_api_client(api_client, field_manager="computedomain-sim")
        simulator = Simulator(
            sim_client,
            SimSettings(
                driver_namespace=driver_namespace,
                faults=FaultSettings(daemon_delay=DelayRange.fixed(0.2)),
                seed=11,
                recheck_interval=5.0,
            ),
        )
        tasks.append(asyncio.create_task(simulator.run()))
        async with asyncio.timeout(30):
            await simulator.wait_ready()
        nodes = await free_rack_pair(admin, fleet_nodes)
        used_nodes.extend(nodes)

        # Taken names for the foreign CD's DaemonSet and workload RCT, before the controller runs.
        foreign = await admin.create(
            COMPUTE_DOMAINS, compute_domain("foreign", "taken", 0), namespace
        )
        foreign_uid = foreign["metadata"]["uid"]
        await admin.create(
            r.DAEMONSETS, idle_daemonset(c.daemon_name(foreign_uid), {}, []), driver_namespace
        )
        foreign_ds.append(c.daemon_name(foreign_uid))
        await admin.create(
            r.RESOURCE_CLAIM_TEMPLATES, plain_claim_template("taken", {}, []), namespace
        )

        controller = await start_unsynced_controller(kubeconfig, driver_namespace, forbidden_log)
        controllers.append(controller)
        steps = Steps(controller, forbidden_log)
        await scenario(steps, admin, namespace, driver_namespace, nodes, foreign_uid)
        assert controller.forbidden() == 0, forbidden_log.lines
        return steps

    try:
        yield run
    finally:
        await _clean_up(admin, namespace, driver_namespace, controllers, used_nodes, foreign_ds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for done in installed:
            await uninstall(admin, done)


async def _clean_up(
    admin: KubeClient,
    namespace: str,
    driver_namespace: str,
    controllers: list[RunningController],
    used_nodes: list[str],
    foreign_ds: list[str],
) -> None:
    """Leave the shared fleet as found, even when a crippled controller left things behind."""
    for controller in controllers:
        with contextlib.suppress(Exception):  # a crippled controller may have died already
            await controller.shutdown()
    for pod in ("worker-0", "worker-1"):
        with contextlib.suppress(ApiError):
            await admin.delete(r.PODS, pod, namespace)
    strip = [{"op": "replace", "path": "/metadata/finalizers", "value": []}]
    listing = await admin.list(COMPUTE_DOMAINS, namespace)
    for cd in listing["items"]:
        with contextlib.suppress(ApiError):
            await admin.patch(
                COMPUTE_DOMAINS, cd["metadata"]["name"], strip, namespace, patch_type="json"
            )
        with contextlib.suppress(ApiError):
            await admin.delete(COMPUTE_DOMAINS, cd["metadata"]["name"], namespace)
    leftovers = (
        (r.DAEMONSETS, driver_namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, namespace),
    )
    for res, ns in leftovers:
        for item in (await admin.list(res, ns))["items"]:
            with contextlib.suppress(ApiError):
                await admin.patch(res, item["metadata"]["name"], strip, ns, patch_type="json")
    for node in used_nodes:
        with contextlib.suppress(ApiError):
            current = await admin.get(r.NODES, node)
            if c.CD_LABEL in labels(current):
                await admin.patch(
                    r.NODES, node, [{"op": "remove", "path": CD_LABEL_PATH}], patch_type="json"
                )


# -- tests -------------------------------------------------------------------------------------


async def test_controller_works_with_exactly_its_manifest_rbac(
    run_scenario: RunScenario, rendered_rbac: list[dict[str, Any]]
) -> None:
    assert sorted(controller_verbs(rendered_rbac)) == sorted(_rendered_grants()), (
        "kustomize changed the rules"
    )
    steps = await run_scenario(None)
    assert "CD finalized" in steps.done


# Granted but used by no code path (strict xfail); empty since they left manifests/rbac.
DEAD_WEIGHT: set[tuple[str, str, str]] = set()


def _grant_param(grant: tuple[str, str, str, str, str]) -> Any:
    marks = []
    if grant[2:] in DEAD_WEIGHT:
        reason = "dead weight: no code path uses it; drop it from manifests/rbac"
        marks.append(pytest.mark.xfail(raises=AssertionError, strict=True, reason=reason))
    return pytest.param(
        grant, marks=marks, id=f"{grant[1]}:{grant[2] or 'core'}/{grant[3]}:{grant[4]}"
    )


@pytest.mark.parametrize("grant", [_grant_param(g) for g in _rendered_grants()])
async def test_every_granted_verb_is_needed(
    run_scenario: RunScenario, grant: tuple[str, str, str, str, str]
) -> None:
    try:
        await run_scenario(grant)
    except ScenarioBrokenError as broken:
        print(f"RBAC-TABLE {grant[1]} {grant[2] or 'core'}/{grant[3]} {grant[4]} => {broken}")
        return
    raise AssertionError(f"nothing broke without {grant}: the verb is dead weight")


async def test_readyz_waits_for_cache_sync(
    control_plane: ControlPlane,
    api_client: ApiClient,
    admin: KubeClient,
    driver_namespace: str,
    rendered_rbac: list[dict[str, Any]],
    forbidden_log: ForbiddenLog,
    tmp_path: Path,
) -> None:
    """/readyz stays failing while one cache cannot sync (its list verb is missing), and turns
    ready once the verb is granted and the informer's retry lists it, with no restart."""
    grant = ("ClusterRole", "computedomain-controller", "", "nodes", "list")
    installed = await install(admin, without_verb(rendered_rbac, grant), driver_namespace)
    token = await request_service_account_token(api_client, driver_namespace, CONTROLLER_SA)
    kubeconfig = token_kubeconfig(
        tmp_path / "controller.kubeconfig", control_plane.server, control_plane.ca_file, token
    )
    controller = await start_unsynced_controller(kubeconfig, driver_namespace, forbidden_log)
    try:
        server = controller.process.server

        async def readyz() -> tuple[int, str]:
            async with aiohttp.ClientSession() as session:
                base = server.probe_url_base
                if base is None:
                    return 0, "not serving yet"
                async with session.get(f"{base}/readyz?verbose") as response:
                    return response.status, await response.text()

        async def until_status(want: int) -> str:
            async with asyncio.timeout(60):
                while True:
                    status, body = await readyz()
                    if status == want:
                        return body
                    await asyncio.sleep(0.2)  # polling an HTTP probe, as the kubelet does

        body = await until_status(500)
        assert "informers" in body
        # The watch on every other resource is up; only the nodes cache is missing.
        assert not controller.process.caches.nodes.has_synced

        role = f"computedomain-controller-{driver_namespace}"
        cluster_role = await admin.get(RBAC_KINDS["ClusterRole"], role)
        cluster_role["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]})
        await admin.replace(RBAC_KINDS["ClusterRole"], cluster_role)
        await until_status(200)
        assert controller.process.caches.synced
    finally:
        with contextlib.suppress(Exception):
            await controller.shutdown()
        await uninstall(admin, installed)
