"""Health checks and the observability server, through aiohttp's test client and real sockets."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from computedomain.observability.health import (
    CheckFailedError,
    Flag,
    HealthChecks,
    informers_synced,
    ping,
)
from computedomain.observability.server import ObservabilityServer, parse_address


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class FakeInformer:
    name: str
    has_synced: bool = False


async def failing_async_check() -> bool:
    raise CheckFailedError("database on fire")


@pytest.fixture
def informers() -> list[FakeInformer]:
    return [FakeInformer("computedomains"), FakeInformer("nodes")]


@pytest.fixture
def readyz(informers: list[FakeInformer]) -> HealthChecks:
    checks = HealthChecks("readyz")
    checks.add("ping", ping)
    checks.add("informers", informers_synced(informers))
    return checks


@pytest.fixture
def healthz() -> HealthChecks:
    checks = HealthChecks("healthz")
    checks.add("ping", ping)
    return checks


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_requests", "Demo counter.", registry=registry).inc(3)
    return registry


@pytest.fixture
async def client(
    registry: CollectorRegistry, healthz: HealthChecks, readyz: HealthChecks
) -> AsyncIterator[TestClient[aiohttp.web.Request, aiohttp.web.Application]]:
    server = ObservabilityServer(registry, healthz=healthz, readyz=readyz)
    async with TestClient(TestServer(server.combined_app())) as test_client:
        yield test_client


async def test_readyz_fails_until_informers_sync(
    client: TestClient[aiohttp.web.Request, aiohttp.web.Application],
    informers: list[FakeInformer],
) -> None:
    resp = await client.get("/readyz")
    assert resp.status == 500
    body = await resp.text()
    assert "[+]ping ok" in body
    assert "[-]informers failed: reason withheld" in body
    assert body.rstrip().endswith("readyz check failed")

    for informer in informers:
        informer.has_synced = True
    resp = await client.get("/readyz")
    assert resp.status == 200
    assert await resp.text() == "ok"


async def test_sub_path_runs_one_check_and_shows_the_reason(
    client: TestClient[aiohttp.web.Request, aiohttp.web.Application],
    informers: list[FakeInformer],
) -> None:
    informers[0].has_synced = True
    resp = await client.get("/readyz/informers")
    assert resp.status == 500
    assert "informers not synced: nodes" in await resp.text()
    resp = await client.get("/readyz/ping")
    assert resp.status == 200
    resp = await client.get("/readyz/nonexistent")
    assert resp.status == 404


async def test_verbose_lists_every_check_on_success(
    client: TestClient[aiohttp.web.Request, aiohttp.web.Application],
) -> None:
    resp = await client.get("/healthz?verbose")
    assert resp.status == 200
    assert await resp.text() == "[+]ping ok\nhealthz check passed\n"


async def test_exclude_skips_a_failing_check(
    client: TestClient[aiohttp.web.Request, aiohttp.web.Application],
) -> None:
    resp = await client.get("/readyz?exclude=informers&verbose")
    assert resp.status == 200
    body = await resp.text()
    assert "informers" not in body
    assert "[+]ping ok" in body


async def test_async_and_raising_checks_fail_without_crashing() -> None:
    checks = HealthChecks("readyz")
    checks.add("broken", failing_async_check)
    checks.add("false", lambda: False)
    outcomes = {o.name: o for o in await checks.run()}
    assert outcomes["broken"].ok is False
    assert outcomes["broken"].reason == "database on fire"
    assert outcomes["false"].ok is False


def test_check_names_are_unique_and_path_safe() -> None:
    checks = HealthChecks("healthz")
    checks.add("ping", ping)
    with pytest.raises(ValueError, match="already registered"):
        checks.add("ping", ping)
    with pytest.raises(ValueError, match="invalid check name"):
        checks.add("a/b", ping)


async def test_shutdown_flag_turns_readiness_off(
    registry: CollectorRegistry, healthz: HealthChecks
) -> None:
    readyz = HealthChecks("readyz")
    serving = Flag("shutting down")
    readyz.add("serving", serving)
    server = ObservabilityServer(registry, healthz=healthz, readyz=readyz)
    async with TestClient(TestServer(server.probe_app())) as test_client:
        assert (await test_client.get("/readyz")).status == 200
        serving.clear()
        resp = await test_client.get("/readyz/serving")
        assert resp.status == 500
        assert "shutting down" in await resp.text()


async def test_metrics_endpoint_exposes_the_given_registry(
    client: TestClient[aiohttp.web.Request, aiohttp.web.Application],
) -> None:
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert "demo_requests_total 3.0" in await resp.text()


async def test_separate_listeners_on_real_ports(
    registry: CollectorRegistry, healthz: HealthChecks, readyz: HealthChecks
) -> None:
    server = ObservabilityServer(
        registry, healthz=healthz, readyz=readyz,
        metrics_address="127.0.0.1:0", probe_address="127.0.0.1:0", metrics_path="/m",
    )  # fmt: skip
    await server.start()
    try:
        assert server.metrics_url_base
        assert server.probe_url_base
        assert server.metrics_url_base != server.probe_url_base
        async with aiohttp.ClientSession() as session:
            async with session.get(server.metrics_url_base + "/m") as resp:
                assert resp.status == 200
                assert "demo_requests_total" in await resp.text()
            async with session.get(server.metrics_url_base + "/healthz") as resp:
                assert resp.status == 404
            async with session.get(server.probe_url_base + "/healthz") as resp:
                assert resp.status == 200
            async with session.get(server.probe_url_base + "/m") as resp:
                assert resp.status == 404
    finally:
        await server.stop()
    assert server.metrics_url_base is None


async def test_shared_address_serves_everything_on_one_port(
    registry: CollectorRegistry, healthz: HealthChecks, readyz: HealthChecks
) -> None:
    address = f"127.0.0.1:{free_port()}"
    server = ObservabilityServer(
        registry, healthz=healthz, readyz=readyz, metrics_address=address, probe_address=address
    )
    await server.start()
    try:
        assert server.metrics_url_base == server.probe_url_base
        async with aiohttp.ClientSession() as session:
            for path in ("/metrics", "/healthz"):
                async with session.get(f"{server.probe_url_base}{path}") as resp:
                    assert resp.status == 200, path
    finally:
        await server.stop()


async def test_disabled_metrics_listener(
    registry: CollectorRegistry, healthz: HealthChecks, readyz: HealthChecks
) -> None:
    server = ObservabilityServer(
        registry, healthz=healthz, readyz=readyz, metrics_address="0", probe_address="127.0.0.1:0"
    )
    await server.start()
    try:
        assert server.metrics_url_base is None
        assert server.probe_url_base is not None
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":8080", (None, 8080)),
        ("0.0.0.0:8081", ("0.0.0.0", 8081)),
        ("[::1]:9000", ("::1", 9000)),
        ("", None),
        ("0", None),
    ],
)
def test_parse_address(address: str, expected: tuple[str | None, int] | None) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["8080", "host:http", ":70000"])
def test_parse_address_rejects_garbage(address: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_address(address)
