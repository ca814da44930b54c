"""EventRecorder on the real apiserver: an event is created and its series recorded."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.runtime.client import KubeClient
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.resources import CONFIG_MAPS, EVENTS

pytestmark = pytest.mark.integration


async def test_event_and_its_series_appear(api_client: ApiClient, namespace: str) -> None:
    kube = KubeClient.from_api_client(api_client)
    regarding = await kube.create(
        CONFIG_MAPS, {"metadata": {"name": "subject"}, "data": {}}, namespace
    )
    regarding.update(apiVersion="v1", kind="ConfigMap")
    recorder = EventRecorder(kube, "example.com/runtime-test", "runtime-test-0")
    writer = asyncio.create_task(recorder.run())
    try:
        recorder.record(regarding, "Warning", "SubjectBroken", "Checking", "first note")
        await asyncio.wait_for(recorder.wait_idle(), 15)
        listed = await kube.list(EVENTS, namespace)
        (event,) = listed["items"]
        assert event["metadata"]["name"].startswith("subject.")
        assert event["regarding"]["uid"] == regarding["metadata"]["uid"]
        assert event["reportingController"] == "example.com/runtime-test"
        assert event["type"] == "Warning"
        assert event["note"] == "first note"
        assert "series" not in event

        recorder.record(regarding, "Warning", "SubjectBroken", "Checking", "second note")
        await asyncio.wait_for(recorder.wait_idle(), 15)
        (event,) = (await kube.list(EVENTS, namespace))["items"]
        assert event["series"]["count"] == 2
        assert event["series"]["lastObservedTime"].endswith("Z")
        assert event["note"] == "first note"
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer


async def test_an_object_with_a_253_character_name_gets_its_events(
    api_client: ApiClient, namespace: str
) -> None:
    """`<name>.<16 hex>` would exceed 253 characters: the apiserver refused such Events, so
    SREs never saw warnings about ComputeDomains with long (legal) names."""
    kube = KubeClient.from_api_client(api_client)
    longest = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    regarding = await kube.create(
        CONFIG_MAPS, {"metadata": {"name": longest}, "data": {}}, namespace
    )
    regarding.update(apiVersion="v1", kind="ConfigMap")
    recorder = EventRecorder(kube, "example.com/runtime-test", "runtime-test-0")
    writer = asyncio.create_task(recorder.run())
    try:
        recorder.record(regarding, "Warning", "ForeignObject", "Checking", "long name")
        await asyncio.wait_for(recorder.wait_idle(), 15)
        (event,) = (await kube.list(EVENTS, namespace))["items"]
        assert event["regarding"]["name"] == longest
        assert len(event["metadata"]["name"]) <= 253
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
