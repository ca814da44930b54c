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
