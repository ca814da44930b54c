"""The wiring of the stand-by in one replica: the reconciler's client refuses writes while
NVIDIA's controller runs (a write in flight when it starts), the Event writer's does not."""

from __future__ import annotations

from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry

from computedomain.app import ControllerProcess
from computedomain.config import environ, parse_settings
from computedomain.runtime.client import ApiClientConnection, KubeClient
from computedomain.runtime.metrics import RuntimeMetrics
from tests.kit.clock import FakeClock
from tests.unit.domain.test_coexistence import pod


async def test_only_the_reconcilers_writes_are_refused_while_standing_by() -> None:
    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    client = KubeClient(ApiClientConnection(ApiClient(configuration)))
    settings = parse_settings([], environ(namespace="nvidia-dra-driver-gpu"))
    registry = CollectorRegistry()
    process = ControllerProcess(settings, client, registry, RuntimeMetrics(registry), FakeClock())
    guard = process.reconciler._ctx.client._write_guard
    assert guard is not None
    assert guard() == ""
    process.coexistence.controller_pods_changed([pod("nvidia")])
    assert "stands by" in guard()
    assert process.recorder.client._write_guard is None  # type: ignore[attr-defined]
    process.coexistence.controller_pods_changed([])
    assert guard() == ""
    await client.close()
