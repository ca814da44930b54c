"""A client made by ``with_rate_limiter`` spends its own budget and follows the write fence."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiClientConnection, ApiError, KubeClient
from computedomain.runtime.ratelimit import TokenBucket


def make_client() -> KubeClient:
    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    return KubeClient(
        ApiClientConnection(ApiClient(configuration)), rate_limiter=TokenBucket(50, 100)
    )


async def test_own_budget_and_the_fence_set_later_on_the_original() -> None:
    client = make_client()
    events_bucket = TokenBucket(10, 25)
    events = client.with_rate_limiter(events_bucket)
    assert events.rate_limiter is events_bucket
    assert client.rate_limiter is not events_bucket
    # The leader election sets the fence after the recorder got its client.
    client.write_fence = lambda: False
    with pytest.raises(ApiError) as refused:
        await events.create(r.EVENTS, {"metadata": {"name": "e"}}, "default")
    assert refused.value.reason == "LeaseNotHeld"
    # The leader election's own client stays unfenced.
    assert client.unfenced()._fence() is None
    await client.close()


async def test_a_write_guard_refuses_writes_with_its_reason_and_follows_the_fence() -> None:
    client = make_client()
    reason = "standing by"
    guarded = client.with_write_guard(lambda: reason)
    with pytest.raises(ApiError) as refused:
        await guarded.delete(r.DAEMONSETS, "ds", "default")
    assert (refused.value.status, refused.value.reason) == (0, "WriteRefused")
    assert refused.value.message.startswith("DELETE ")
    assert refused.value.message.endswith(": refused, standing by")
    assert (
        guarded.metrics.rest_client_requests_total.labels(
            code="<refused>", method="DELETE", host=guarded.host
        )._value.get()
        == 1
    )
    # The original client is not guarded; the guarded one follows its fence, set later.
    assert client._write_guard is None
    client.write_fence = lambda: False
    with pytest.raises(ApiError) as fenced:
        await guarded.create(r.EVENTS, {"metadata": {"name": "e"}}, "default")
    assert fenced.value.reason == "LeaseNotHeld"
    await client.close()
