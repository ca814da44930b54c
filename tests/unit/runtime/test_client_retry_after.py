"""The client against a real HTTP server on loopback (issue 18): a 429's ``Retry-After`` is
waited out and the request sent again (a read also after a 5xx naming one), at most
``max_retries`` times and never for longer than ``max_retry_wait``; a response cut mid-body is
counted as a failure, not under the status line it began with."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import SystemClock
from computedomain.runtime.metrics import RuntimeMetrics
from tests.kit.plainhttp import PlainConnection

STATUS_429 = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow"}


class SleepRecorder(SystemClock):
    """Real time, except that sleeps are recorded and skipped."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


@dataclass
class Server:
    """Answers each request with the next of ``answers`` (status, Retry-After or None); once
    they are spent, 200 with an empty object. ``seen`` records each method."""

    answers: list[tuple[int, str | None]] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    cut_body: bool = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.method)
        if self.cut_body:
            response = web.StreamResponse(status=200)
            response.content_length = 100
            response.content_type = "application/json"
            await response.prepare(request)
            await response.write(b'{"kind":')
            assert request.transport is not None
            request.transport.close()
            return response
        if self.answers:
            status, retry_after = self.answers.pop(0)
            headers = {"Retry-After": retry_after} if retry_after is not None else None
            return web.json_response({**STATUS_429, "code": status}, status=status, headers=headers)
        return web.json_response({"metadata": {"name": "x"}})


@contextlib.asynccontextmanager
async def client_for(server: Server) -> AsyncIterator[tuple[KubeClient, SleepRecorder]]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    clock = SleepRecorder()
    connection = PlainConnection(f"http://127.0.0.1:{port}", aiohttp.ClientSession())
    client = KubeClient(connection, clock=clock, metrics=RuntimeMetrics(CollectorRegistry()))
    try:
        yield client, clock
    finally:
        await client.close()
        await runner.cleanup()


def requests_counted(client: KubeClient, code: str, method: str) -> float:
    value = client.metrics.registry.get_sample_value(
        "rest_client_requests_total", {"code": code, "method": method, "host": client.host}
    )
    return value or 0.0


async def test_a_throttled_write_waits_for_retry_after_then_goes_through() -> None:
    server = Server(answers=[(429, "2"), (429, "1")])
    async with client_for(server) as (client, clock):
        created = await client.create(r.SERVICE_ACCOUNTS, {"metadata": {"name": "x"}}, "ns")
        assert created == {"metadata": {"name": "x"}}
        assert clock.sleeps == [2.0, 1.0]
        assert server.seen == ["POST", "POST", "POST"]
        assert requests_counted(client, "429", "POST") == 2
        assert requests_counted(client, "200", "POST") == 1


async def test_a_wait_longer_than_the_client_holds_goes_up_with_its_retry_after() -> None:
    server = Server(answers=[(429, "30")])
    async with client_for(server) as (client, clock):
        with pytest.raises(ApiError) as raised:
            await client.create(r.SERVICE_ACCOUNTS, {"metadata": {"name": "x"}}, "ns")
        assert raised.value.is_too_many_requests
        assert raised.value.retry_after == 30.0
        assert clock.sleeps == []


async def test_retries_are_capped() -> None:
    server = Server(answers=[(429, "1")] * 20)
    async with client_for(server) as (client, clock):
        client.max_retries = 3
        with pytest.raises(ApiError):
            await client.get(r.SERVICE_ACCOUNTS, "x", "ns")
        assert clock.sleeps == [1.0, 1.0, 1.0]
        assert len(server.seen) == 4


async def test_a_5xx_with_retry_after_is_retried_for_reads_only() -> None:
    server = Server(answers=[(503, "1"), (503, "1")])
    async with client_for(server) as (client, clock):
        assert await client.get(r.SERVICE_ACCOUNTS, "x", "ns") == {"metadata": {"name": "x"}}
        assert clock.sleeps == [1.0, 1.0]
    server = Server(answers=[(503, "1")])
    async with client_for(server) as (client, clock):
        # The write may have been acted on: the caller decides, from the cache, what to do.
        with pytest.raises(ApiError) as raised:
            await client.create(r.SERVICE_ACCOUNTS, {"metadata": {"name": "x"}}, "ns")
        assert raised.value.status == 503
        assert clock.sleeps == []


async def test_a_response_cut_mid_body_is_counted_as_a_failure() -> None:
    async with client_for(Server(cut_body=True)) as (client, _):
        with pytest.raises(aiohttp.ClientError):
            await client.get(r.SERVICE_ACCOUNTS, "x", "ns")
        assert requests_counted(client, "<error>", "GET") == 1
        assert requests_counted(client, "200", "GET") == 0
