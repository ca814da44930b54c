"""kubectl's --as/--as-group/--as-uid: every request the client sends (reads, writes, watches,
logs) carries the impersonation headers, one Impersonate-Group per group; without them, none."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from computedomain.runtime.client import Impersonation, KubeClient
from computedomain.runtime.resources import PODS
from tests.kit.plainhttp import PlainConnection

Seen = list[tuple[str, str | None, list[str], str | None]]


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, Seen]]:
    seen: Seen = []

    async def answer(request: web.Request) -> web.StreamResponse:
        headers = request.headers
        seen.append(
            (
                request.method,
                headers.get("Impersonate-User"),
                headers.getall("Impersonate-Group", []),
                headers.get("Impersonate-Uid"),
            )
        )
        if request.path.endswith("/log"):
            return web.Response(text="a line\n")
        if request.query.get("watch"):
            return web.Response(text="")  # the server ended the watch at once
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}, "items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    running = TestServer(app)
    async with running:
        yield running, seen


async def every_verb(client: KubeClient) -> None:
    await client.get(PODS, "p", "team")
    await client.list(PODS, "team")
    await client.create(PODS, {"metadata": {"name": "p"}}, "team")
    await client.patch(PODS, "p", {"metadata": {}}, "team")
    async for _ in client.watch(PODS, "team"):
        pass
    await client.pod_log("team", "p", "c")


async def test_every_request_acts_as_the_impersonated_user(
    server: tuple[TestServer, Seen],
) -> None:
    running, seen = server

    def connect() -> PlainConnection:
        return PlainConnection(str(running.make_url("")).rstrip("/"), aiohttp.ClientSession())

    as_ml = Impersonation("system:serviceaccount:team:ml", ("ml-users", "system:authenticated"))
    impersonating = KubeClient(connect(), impersonate=as_ml)
    try:
        await every_verb(impersonating)
    finally:
        await impersonating.close()
    assert [method for method, *_ in seen] == ["GET", "GET", "POST", "PATCH", "GET", "GET"]
    assert {(user, tuple(groups), uid) for _, user, groups, uid in seen} == {
        ("system:serviceaccount:team:ml", ("ml-users", "system:authenticated"), None)
    }

    seen.clear()
    plain = KubeClient(connect())
    try:
        await every_verb(plain)
    finally:
        await plain.close()
    assert {(user, tuple(groups), uid) for _, user, groups, uid in seen} == {(None, (), None)}

    seen.clear()
    with_uid = KubeClient(connect(), impersonate=Impersonation("jane", uid="1234"))
    try:
        await every_verb(with_uid)
    finally:
        await with_uid.close()
    assert {(user, tuple(groups), uid) for _, user, groups, uid in seen} == {("jane", (), "1234")}
