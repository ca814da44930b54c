"""The fleet in a cluster: creates what ``sim/fleet.py`` builds (DeviceClasses, Nodes, their
ResourceSlices) through the apiserver, and waits until the Nodes are Ready and schedulable."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.runtime.objects import condition_true

from .fleet import (
    DEFAULT_CONCURRENCY,
    FleetSpec,
    build_device_classes,
    build_nodes,
    build_resource_slice,
)

_JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
_AUTH = ["BearerToken"]


async def _call(
    api_client: ApiClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    query: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    # Raw JSON in and out: typed models would cost more CPU than the requests themselves.
    result: dict[str, Any] = await api_client.call_api(
        path,
        method,
        query_params=query or [],
        header_params=dict(_JSON_HEADERS),
        body=body,
        response_types_map={200: "object", 201: "object"},
        auth_settings=_AUTH,
        _return_http_data_only=True,
    )
    return result


async def _create(api_client: ApiClient, path: str, body: dict[str, Any]) -> None:
    try:
        await _call(api_client, "POST", path, body)
    except ApiException as error:
        if error.status != 409:  # AlreadyExists: creation is idempotent
            raise


async def _bounded(
    jobs: Iterable[Callable[[], Awaitable[None]]], concurrency: int = DEFAULT_CONCURRENCY
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def run(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    async with asyncio.TaskGroup() as group:
        for job in jobs:
            group.create_task(run(job))


async def install_device_classes(api_client: ApiClient) -> None:
    for device_class in build_device_classes():
        await _create(api_client, "/apis/resource.k8s.io/v1/deviceclasses", device_class)


async def create_fleet(
    api_client: ApiClient, spec: FleetSpec, *, concurrency: int = DEFAULT_CONCURRENCY
) -> list[str]:
    """Create the DeviceClasses, every Node and its ResourceSlice; return the node names.

    Idempotent: objects that already exist are left as they are.
    """
    nodes = build_nodes(spec)
    names = [node["metadata"]["name"] for node in nodes]
    await install_device_classes(api_client)

    def create_node(node: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            await _create(api_client, "/api/v1/nodes", node)
            name = node["metadata"]["name"]
            await _create(
                api_client, "/apis/resource.k8s.io/v1/resourceslices", build_resource_slice(name)
            )

        return job

    await _bounded((create_node(node) for node in nodes), concurrency)
    return names


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def is_node_ready(node: dict[str, Any]) -> bool:
    """Ready=True and the node lifecycle controller has lifted its not-ready taint, so pods
    without a toleration can be scheduled there."""
    taints = node.get("spec", {}).get("taints") or []
    return condition_true(node, "Ready") and not any(
        taint.get("key") == NOT_READY_TAINT for taint in taints
    )


async def wait_nodes_ready(
    api_client: ApiClient,
    names: Iterable[str],
    timeout: float,  # noqa: ASYNC109 - part of the public signature others call
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait until every named node is Ready and schedulable (see :func:`is_node_ready`);
    TimeoutError names the stragglers.

    Lists, then watches from the list's resourceVersion, so no update is missed between polls.
    """
    waiting = set(names)
    deadline = clock() + timeout
    while waiting:
        listing = await _call(api_client, "GET", "/api/v1/nodes")
        waiting -= {n["metadata"]["name"] for n in listing.get("items", []) if is_node_ready(n)}
        if not waiting:
            return
        remaining = deadline - clock()
        if remaining <= 0:
            raise TimeoutError(_not_ready_message(waiting))
        try:
            await asyncio.wait_for(
                _watch_until_ready(api_client, waiting, listing["metadata"]["resourceVersion"]),
                timeout=remaining,
            )
        except TimeoutError:
            raise TimeoutError(_not_ready_message(waiting)) from None
        except ApiException as error:
            if error.status != 410:  # expired resourceVersion: list again
                raise


def _not_ready_message(waiting: set[str]) -> str:
    sample = ", ".join(sorted(waiting)[:5])
    return f"{len(waiting)} nodes not Ready (e.g. {sample})"


async def _watch_until_ready(
    api_client: ApiClient, waiting: set[str], resource_version: str
) -> None:
    response = await api_client.call_api(
        "/api/v1/nodes",
        "GET",
        query_params=[
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "300"),
        ],
        header_params={"Accept": "application/json"},
        auth_settings=_AUTH,
        _preload_content=False,
        _return_http_data_only=True,
    )
    try:
        if response.status != 200:  # _preload_content=False skips the library's status check
            raise ApiException(status=response.status, reason=await response.text())
        async for line in response.content:
            if not line.strip():
                continue
            event = json.loads(line)
            if event["type"] == "ERROR":
                raise ApiException(status=int(event["object"].get("code", 500)))
            node = event["object"]
            name = node.get("metadata", {}).get("name")
            if event["type"] in ("ADDED", "MODIFIED") and name in waiting and is_node_ready(node):
                waiting.discard(name)
                if not waiting:
                    return
    finally:
        response.release()
