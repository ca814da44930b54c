"""Integration fixtures: one real control plane per test session (test_steady_state starts its
own), a namespace per test.

The control plane (etcd, kube-apiserver, KCM, scheduler, kwok) starts once, with the CRDs from
``crds/`` applied and a modest fake fleet (4 NVL72 racks + 2 non-fabric nodes). Binaries come
from TEST_ASSET_<NAME> / KUBEBUILDER_ASSETS / /usr/local/kubebuilder/bin / the build cache.
Integration tests are skipped only when no binaries can be found or built, and never when
``COMPUTEDOMAIN_REQUIRE_CONTROL_PLANE=1`` or ``CI=true`` (hack/test.sh sets the former):
then a missing control plane fails the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.api.constants import DAEMON_SERVICE_ACCOUNT
from computedomain.devcluster.assets import AssetsUnavailableError, find_assets
from computedomain.devcluster.audit import service_account_user
from computedomain.devcluster.clients import (
    api_client_from_kubeconfig,
    cluster_admin_binding,
    request_service_account_token,
    service_account_api_client,
    token_kubeconfig,
)
from computedomain.devcluster.controlplane import ControlPlane, free_port, use_existing_cluster
from computedomain.devcluster.harness import Controllers
from computedomain.devcluster.rest import request_json
from computedomain.devcluster.upstream import (
    MAIN,
    V041,
    MockNvml,
    UpstreamBuild,
    UpstreamUnavailableError,
    find_main_chart,
    find_mock_nvml,
    find_older_chart,
    find_upstream,
    main_chart_required,
    mock_nvml_required,
    older_chart_required,
    upstream_required,
)
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import NAMESPACES, SERVICE_ACCOUNTS
from tests.integration.cluster import STARTUP, fleet_node_names, run_control_plane
from tests.integration.e2e_harness import EndToEnd, end_to_end
from tests.integration.nvidia_fleet import (
    NodeSide,
    NodeSideOn,
    NvidiaFleet,
    nvidia_fleet,
    nvidia_node_side,
)
from tests.integration.nvidia_install import CLUSTER_ROLE_BINDINGS
from tests.kit.controllers import controllers_for, stop_after_cleanup
from tests.kit.prometheus import RunningPrometheus, running_prometheus
from tests.kit.waiting import eventually

SaClientFactory = Callable[[str, str], Awaitable[ApiClient]]
IdentityFactory = Callable[[str], Awaitable[tuple[Path, str]]]


def pytest_report_header(config: pytest.Config) -> list[str]:
    if use_existing_cluster():
        return [f"control plane: existing cluster from KUBECONFIG={os.environ.get('KUBECONFIG')}"]
    try:
        assets = find_assets(build=False)
    except AssetsUnavailableError as error:
        return [
            f"control plane: {error}; hack/controlplane/build.sh will provide them on first use"
        ]
    versions = assets.versions()
    return ["control plane binaries:"] + [
        f"  {name}: {versions[name]}  [{assets.sources[name]}: {path}]"
        for name, path in assets.paths.items()
    ]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if STARTUP:
        figures = ", ".join(f"{name} {secs:.1f}s" for name, secs in STARTUP.items())
        terminalreporter.write_line(f"devcluster start-up: {figures}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    yield from run_control_plane()


@pytest.fixture(scope="session")
def fleet_nodes(control_plane: ControlPlane) -> list[str]:
    """Names of the test fleet's nodes (racks first, then non-fabric), all Ready."""
    return fleet_node_names()


@pytest.fixture
def kubeconfig_path(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture
async def api_client(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """An admin (system:masters) ApiClient on this test's event loop."""
    client = await api_client_from_kubeconfig(control_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


def _namespace_name(node_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"{slug}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def namespace(request: pytest.FixtureRequest, api_client: ApiClient) -> AsyncIterator[str]:
    """A fresh namespace, usable for pods (its ``default`` ServiceAccount exists); deleted after."""
    name = _namespace_name(request.node.name)
    await request_json(
        api_client,
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )

    async def default_service_account() -> bool:
        try:
            await request_json(
                api_client, "GET", f"/api/v1/namespaces/{name}/serviceaccounts/default"
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    await eventually(default_service_account, within=30, what=f"serviceaccount/default in {name}")
    try:
        yield name
    finally:
        try:
            await request_json(api_client, "DELETE", f"/api/v1/namespaces/{name}")
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
async def sa_api_client(
    control_plane: ControlPlane, api_client: ApiClient
) -> AsyncIterator[SaClientFactory]:
    """Factory ``await sa_api_client(namespace, name)``: an ApiClient authenticated only by a
    TokenRequest bearer token of that ServiceAccount (which must exist)."""
    made: list[ApiClient] = []

    async def make(namespace: str, name: str) -> ApiClient:
        client = await service_account_api_client(
            api_client, control_plane.server, control_plane.ca_file, namespace, name
        )
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            await client.close()


T = TypeVar("T")


def _required_or_skip(find: Callable[[bool], T], required: bool, where: str) -> T:
    """One of NVIDIA's inputs: skip the test without it, fail where it is ``required``."""
    try:
        return find(required)
    except UpstreamUnavailableError as error:
        if required:
            pytest.fail(f"required ({where}): {error}")
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def upstream() -> UpstreamBuild:
    """NVIDIA's v0.4.1 build (hack/upstream/build.sh)."""
    where = "CI, NVIDIA_DRA_DRIVER_SRC or hack/test.sh"
    return _required_or_skip(lambda build: find_upstream(build=build), upstream_required(), where)


@pytest.fixture(scope="session")
def upstream_main() -> UpstreamBuild:
    """NVIDIA's main (v0.5.0-dev) build (hack/upstream/build.sh main)."""
    where = "CI, NVIDIA_DRA_DRIVER_MAIN_SRC or hack/test.sh"
    return _required_or_skip(
        lambda build: find_upstream(build=build, target=MAIN),
        upstream_required(target=MAIN),
        where,
    )


@pytest.fixture
def nvidia_target(request: pytest.FixtureRequest) -> tuple[str, UpstreamBuild]:
    """A pinned NVIDIA target and its build: v0.4.1 unless a test parametrizes it (indirect, by
    target name). Put it first among a test's fixtures: without the build, skip (or fail where
    required) before a control plane starts."""
    target: str = getattr(request, "param", V041)
    build: UpstreamBuild = request.getfixturevalue(
        {V041: "upstream", MAIN: "upstream_main"}[target]
    )
    return target, build


@pytest.fixture(scope="session")
def older_chart() -> Path:
    """NVIDIA's v0.4.0 chart (hack/upstream/chart.sh)."""
    where = "CI or NVIDIA_DRA_DRIVER_CHART_SRC"
    return _required_or_skip(
        lambda fetch: find_older_chart(fetch=fetch), older_chart_required(), where
    )


@pytest.fixture(scope="session")
def main_chart() -> Path:
    """NVIDIA's chart of main at 95932046, v0.5.0-dev (hack/upstream/chart.sh main)."""
    where = "CI or NVIDIA_DRA_DRIVER_MAIN_SRC"
    return _required_or_skip(
        lambda fetch: find_main_chart(fetch=fetch), main_chart_required(), where
    )


@pytest.fixture(scope="session")
def mock_nvml() -> MockNvml:
    """NVIDIA's mock NVML (hack/upstream/mocknvml.sh), for NVIDIA's kubelet plugin on simulated
    nodes."""
    where = "CI, NVIDIA_MOCK_NVML_SRC or hack/test.sh"
    return _required_or_skip(lambda build: find_mock_nvml(build=build), mock_nvml_required(), where)


@pytest.fixture
def nvidia_node_side_on(
    nvidia_target: tuple[str, UpstreamBuild],
    mock_nvml: MockNvml,
    control_plane: ControlPlane,
    api_client: ApiClient,
    kube: KubeClient,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
) -> NodeSideOn:
    """``nvidia_node_side`` on the nodes given, of the test's target, in its namespaces: a test
    module's fixture names only its nodes."""

    def on(nodes: list[str]) -> AbstractAsyncContextManager[NodeSide]:
        return nvidia_node_side(
            nvidia_target,
            mock_nvml,
            control_plane,
            api_client,
            kube,
            kubeconfig_path,
            namespace,
            driver_namespace,
            tmp_path,
            nodes,
        )

    return on


@pytest.fixture
async def kube(api_client: ApiClient) -> KubeClient:
    """Our own runtime client over the admin ApiClient."""
    return KubeClient.from_api_client(api_client)


@pytest.fixture
async def driver_namespace(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh driver namespace holding the daemon ServiceAccount, as NVIDIA's chart makes it
    (without it the DaemonSet cannot create daemon pods)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "driver-"}}
    name = (await kube.create(NAMESPACES, body))["metadata"]["name"]
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": DAEMON_SERVICE_ACCOUNT},
    }
    await kube.create(SERVICE_ACCOUNTS, account, name)
    yield name
    await kube.delete(NAMESPACES, name)


@pytest.fixture
async def controllers(
    kubeconfig_path: Path, driver_namespace: str, kube: KubeClient, namespace: str
) -> AsyncIterator[Controllers]:
    """``await controllers.start(**env)`` runs a replica in the test's loop; at the end a
    running replica finalizes the test's CDs (and unlabels their nodes), then all stop."""
    factory = controllers_for(kubeconfig_path, driver_namespace)
    yield factory
    await stop_after_cleanup(factory, kube, namespace)


@pytest.fixture
async def e2e(
    kube: KubeClient, kubeconfig_path: Path, namespace: str, driver_namespace: str
) -> AsyncIterator[EndToEnd]:
    """Our controller and the fleet simulator in this test's namespace; cleaned up after."""
    async with end_to_end(kube, kubeconfig_path, namespace, driver_namespace) as env:
        yield env


@pytest.fixture
async def fleet(
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    nvidia_target: tuple[str, UpstreamBuild],
    tmp_path: Path,
) -> AsyncIterator[NvidiaFleet]:
    """Our controller's test world with NVIDIA's real IMEX daemon in every daemon pod, of the
    test's target (v0.4.1 unless it parametrizes ``nvidia_target``)."""
    _, upstream = nvidia_target
    async with nvidia_fleet(
        kube,
        api_client,
        control_plane,
        kubeconfig_path,
        namespace,
        driver_namespace,
        upstream,
        tmp_path / "pods",
    ) as made:
        yield made


@pytest.fixture
def metrics_port() -> int:
    """A free port for the controller's /metrics, for a test that Prometheus scrapes."""
    return free_port()


@pytest.fixture
def prometheus(metrics_port: int, tmp_path: Path) -> Iterator[RunningPrometheus]:
    """A real Prometheus scraping ``metrics_port`` every second."""
    with running_prometheus(metrics_port, tmp_path) as running:
        yield running


@pytest.fixture
async def identities(
    kube: KubeClient, api_client: ApiClient, control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[IdentityFactory]:
    """`await identity(name)`: a kubeconfig of a fresh ServiceAccount with cluster-admin, and the
    username the audit log records for it, so every write is attributed to one replica."""
    ns = "default"
    made: list[str] = []

    async def make(name: str) -> tuple[Path, str]:
        sa_name = f"{name}-{uuid.uuid4().hex[:6]}"
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa_name}}
        await kube.create(SERVICE_ACCOUNTS, sa, ns)
        await kube.create(CLUSTER_ROLE_BINDINGS, cluster_admin_binding(sa_name, sa_name, ns))
        made.append(sa_name)
        token = await request_service_account_token(api_client, ns, sa_name)
        path = token_kubeconfig(
            tmp_path / f"{sa_name}.kubeconfig", control_plane.server, control_plane.ca_file, token
        )
        return path, service_account_user(ns, sa_name)

    yield make
    for sa_name in made:
        with contextlib.suppress(ApiError):
            await kube.delete(CLUSTER_ROLE_BINDINGS, sa_name)
        with contextlib.suppress(ApiError):
            await kube.delete(SERVICE_ACCOUNTS, sa_name, ns)
