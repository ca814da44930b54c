"""``KubeClient.pod_log`` against a local HTTP server playing the apiserver's pods/log: the query
kubectl logs sends, the text as written, and a refusal as an ApiError."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from computedomain.runtime.client import ApiError, KubeClient
from tests.kit.plainhttp import PlainConnection


@pytest.fixture
async def served() -> AsyncIterator[tuple[KubeClient, list[dict[str, str]]]]:
    asked: list[dict[str, str]] = []

    async def log(request: web.Request) -> web.Response:
        asked.append(dict(request.query))
        if request.match_info["name"] == "gone":
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "no pod"}
            return web.json_response(status, status=404)
        return web.Response(text="I1205 starting\nError: CDI container edits did not apply\n")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}/log", log)
    async with TestServer(app) as server:
        client = KubeClient(
            PlainConnection(str(server.make_url("")).rstrip("/"), aiohttp.ClientSession())
        )
        try:
            yield client, asked
        finally:
            await client.close()


async def test_a_pod_log_is_read_as_kubectl_logs_asks(
    served: tuple[KubeClient, list[dict[str, str]]],
) -> None:
    client, asked = served
    text = await client.pod_log("driver", "daemon-a", "compute-domain-daemon", previous=True)
    assert text.splitlines()[-1] == "Error: CDI container edits did not apply"
    assert asked == [{"container": "compute-domain-daemon", "tailLines": "20", "previous": "true"}]
    await client.pod_log("driver", "daemon-a", "compute-domain-daemon")
    assert "previous" not in asked[-1]
    with pytest.raises(ApiError) as refused:
        await client.pod_log("driver", "gone", "compute-domain-daemon")
    assert refused.value.is_not_found
