"""Recorder decisions (spam bound, overflow, naming, series) on a FakeClock, against the test
kit's fake apiserver (which records each call and its body); the real apiserver's side is covered
by the integration test.
"""

import asyncio
import contextlib
import logging
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from computedomain.runtime.client import ApiError
from computedomain.runtime.errors import FENCED_REASON
from computedomain.runtime.events import EventRecorder, object_reference
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import Resource
from tests.kit.clock import FakeClock, settle
from tests.kit.fakeapi import FakeApiServer, denied

CD: dict[str, Any] = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "cd1", "namespace": "team", "uid": "u-1", "resourceVersion": "9"},
}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "uid": "u-n"}}


def calls(api: FakeApiServer) -> list[tuple[str, str, str, Any]]:
    """The Event writes the fake apiserver saw: (verb, namespace, name, body)."""
    return [
        (verb, path.partition("/")[0] if "/" in path else "", path.rpartition("/")[2], body)
        for (verb, _, path), body in zip(api.calls, api.bodies, strict=True)
    ]


class Setup:
    def __init__(self, **options: Any) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.api = FakeApiServer()
        self.recorder = EventRecorder(
            self.api,
            "example.com/controller",
            "controller-pod-1",
            clock=self.clock,
            metrics=RuntimeMetrics(self.registry),
            **options,
        )

    def calls(self) -> list[tuple[str, str, str, Any]]:
        return calls(self.api)

    def dropped(self, reason: str) -> float | None:
        return self.registry.get_sample_value(
            "event_recorder_dropped_events_total", {"reason": reason}
        )


@contextlib.asynccontextmanager
async def running(setup: Setup) -> AsyncIterator[None]:
    task = asyncio.create_task(setup.recorder.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_references_leave_out_the_resource_version() -> None:
    assert object_reference(CD) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "namespace": "team",
        "name": "cd1",
        "uid": "u-1",
    }
    assert object_reference({"kind": "Node", "name": "n"}) == {"kind": "Node", "name": "n"}


async def test_first_event_is_created_with_the_conventional_shape() -> None:
    setup = Setup()
    async with running(setup):
        setup.recorder.record(CD, "Normal", "Created", "Reconciling", "n" * 2000, related=NODE)
        await setup.recorder.wait_idle()
    ((kind, namespace, name, body),) = setup.calls()
    assert kind == "create"
    assert namespace == "team"
    prefix, _, nanos = name.partition(".")
    assert prefix == "cd1"
    assert int(nanos, 16) > 0
    assert body["eventTime"].endswith("Z")
    assert len(body["eventTime"].split(".")[1]) == 7
    assert body["reportingController"] == "example.com/controller"
    assert body["reportingInstance"] == "controller-pod-1"
    assert len(body["note"]) == 1024
    assert body["related"]["kind"] == "Node"


async def test_cluster_scoped_regarding_goes_to_default() -> None:
    setup = Setup()
    async with running(setup):
        setup.recorder.record(NODE, "Warning", "Unhealthy", "Checking", "x")
        await setup.recorder.wait_idle()
    assert setup.calls()[0][1] == "default"


async def test_second_occurrence_patches_the_series_later_ones_are_flushed() -> None:
    setup = Setup(series_refresh=60, housekeeping_interval=30)
    async with running(setup):
        for note in ("first", "second", "third", "fourth"):
            setup.recorder.record(CD, "Normal", "Waiting", "Reconciling", note)
            await setup.recorder.wait_idle()
            await setup.clock.advance(1)
        kinds = [call[0] for call in setup.calls()]
        assert kinds == ["create", "patch"]
        name = setup.calls()[0][2]
        assert setup.calls()[1][2] == name
        assert setup.calls()[1][3]["series"]["count"] == 2
        await setup.clock.advance(50)
        assert len(setup.calls()) == 2, "later counts wait for the refresh"
        await setup.clock.advance(50)
        await settle()
        assert setup.calls()[-1][0] == "patch"
        assert setup.calls()[-1][3]["series"]["count"] == 4


async def test_a_different_reason_or_object_is_not_isomorphic() -> None:
    setup = Setup()
    async with running(setup):
        setup.recorder.record(CD, "Normal", "A", "Reconciling", "x")
        setup.recorder.record(CD, "Normal", "B", "Reconciling", "x")
        setup.recorder.record(NODE, "Normal", "A", "Reconciling", "x")
        await setup.recorder.wait_idle()
    assert [call[0] for call in setup.calls()] == ["create"] * 3


async def test_series_ends_after_six_quiet_minutes() -> None:
    setup = Setup()
    async with running(setup):
        setup.recorder.record(CD, "Normal", "Waiting", "Reconciling", "x")
        await setup.recorder.wait_idle()
        await setup.clock.advance(361)
        setup.recorder.record(CD, "Normal", "Waiting", "Reconciling", "x")
        await setup.recorder.wait_idle()
    assert [call[0] for call in setup.calls()] == ["create", "create"]
    assert setup.calls()[0][2] != setup.calls()[1][2]


async def test_spam_bound_allows_a_burst_then_one_per_interval() -> None:
    setup = Setup(spam_burst=25, spam_interval=300)
    accepted = [setup.recorder.record(CD, "Normal", "R", "A", "x") for _ in range(30)]
    assert accepted == [True] * 25 + [False] * 5
    assert setup.dropped("spam") == 5
    await setup.clock.advance(299)
    assert not setup.recorder.record(CD, "Normal", "R", "A", "x")
    await setup.clock.advance(2)
    assert setup.recorder.record(CD, "Normal", "R", "A", "x")
    assert setup.recorder.record(NODE, "Normal", "R", "A", "x"), "other keys are unaffected"


def test_spam_buckets_are_kept_for_the_most_recently_used_keys_only() -> None:
    """Under churn every new object's events are new keys: the buckets kept are bounded by
    count (least recently used forgotten first), not only by the time a bucket takes to fill."""
    setup = Setup(spam_burst=1, spam_keys=2)
    record = setup.recorder.record
    assert record(CD, "Normal", "A", "x", "x")
    assert not record(CD, "Normal", "A", "x", "x"), "its one token is spent"
    assert record(CD, "Normal", "B", "x", "x")
    assert not record(CD, "Normal", "A", "x", "x"), "A is still among the two recent keys"
    assert record(CD, "Normal", "C", "x", "x")  # B is the least recently used: forgotten
    assert record(CD, "Normal", "D", "x", "x")  # then A
    assert len(setup.recorder._spam) == 2
    assert record(CD, "Normal", "A", "x", "x"), "a forgotten key starts a full bucket again"


async def test_series_are_kept_for_the_most_recently_seen_keys_only() -> None:
    """Series are bounded by count too, as client-go's aggregation cache: the least recently
    seen goes first, its unwritten count written before it is forgotten."""
    setup = Setup(series_keys=2)
    async with running(setup):
        for reason in ("A", "A", "A", "B", "A", "C"):  # A's third is counted, not yet written
            setup.recorder.record(CD, "Normal", reason, "x", "x")
            await setup.recorder.wait_idle()
        assert [key[2] for key in setup.recorder._series] == ["A", "C"]  # B was the oldest
        setup.recorder.record(CD, "Normal", "D", "x", "x")
        await setup.recorder.wait_idle()
    assert [key[2] for key in setup.recorder._series] == ["C", "D"]
    verbs = [(verb, body) for verb, _, _, body in setup.calls()]
    # D created, then A (the least recently seen now) evicted: its fourth occurrence, counted
    # but not yet written, is written on the way out.
    assert [verb for verb, _ in verbs[-2:]] == ["create", "patch"]
    assert verbs[-1][1]["series"]["count"] == 4


class Accepting:
    """Answers every Event write and keeps nothing: what the recorder holds is its own."""

    async def create(self, res: Resource, body: Any, namespace: str | None = None) -> Any:
        return body

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        return {}


async def test_an_event_key_costs_a_few_hundred_bytes() -> None:
    """Thousands of keys live at once under churn (a spam bucket and a series each): one key,
    its bucket and its series stay small (1,057 bytes each before they were made compact)."""
    recorder = EventRecorder(
        Accepting(), "example.com/controller", "controller-pod-1", clock=FakeClock()
    )
    objects = [
        {**CD, "metadata": {**CD["metadata"], "name": f"job-{i:05d}", "uid": f"u-{i:036d}"}}
        for i in range(500)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for obj in objects:
            recorder.record(obj, "Normal", "NodeJoined", "Join", "Nodes n1 joined")
            await recorder._write(recorder._queue.get_nowait())
            recorder._queue.task_done()
        grown = tracemalloc.take_snapshot().compare_to(before, "filename")
    finally:
        tracemalloc.stop()
    assert (len(recorder._spam), len(recorder._series)) == (500, 500)
    assert sum(stat.size_diff for stat in grown) / 500 < 700


def test_full_queue_drops_and_counts() -> None:
    setup = Setup(queue_size=3, spam_burst=100)
    accepted = [setup.recorder.record(CD, "Normal", f"R{i}", "A", "x") for i in range(5)]
    assert accepted == [True, True, True, False, False]
    assert setup.dropped("queue_full") == 2


@pytest.mark.parametrize("count", [2])
async def test_names_are_unique_even_on_a_frozen_clock(count: int) -> None:
    setup = Setup()
    async with running(setup):
        setup.recorder.record(CD, "Normal", "A", "X", "x")
        setup.recorder.record(CD, "Normal", "B", "X", "x")
        await setup.recorder.wait_idle()
    names = {call[2] for call in setup.calls()}
    assert len(names) == count


class LostAnswerApi(FakeApiServer):
    """The first create is written by the apiserver but its answer is lost (a 500 after the
    fact); the retry then meets AlreadyExists, as it would."""

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        created = await super().create(res, body, namespace)
        if len(self.calls) == 1:
            raise ApiError(500, "InternalError", "the answer was lost")
        return created


async def test_an_event_whose_first_answer_was_lost_is_written_not_dropped() -> None:
    setup = Setup()
    setup.recorder.client = api = LostAnswerApi()
    async with running(setup):
        setup.recorder.record(CD, "Warning", "Reason", "Action", "note")
        await settle()
        await setup.clock.advance(1)
        await setup.recorder.wait_idle()
    assert [call[0] for call in calls(api)] == ["create", "create"]
    assert not setup.dropped("write_failed")
    # Written: a second occurrence patches the series instead of creating another Event.
    setup.recorder.record(CD, "Warning", "Reason", "Action", "note")
    async with running(setup):
        await settle()
        await setup.recorder.wait_idle()
    assert calls(api)[-1][0] == "patch"


async def test_an_event_write_throttled_waits_at_least_retry_after() -> None:
    class Throttled(FakeApiServer):
        async def create(
            self, res: Resource, body: dict[str, Any], namespace: str | None = None
        ) -> dict[str, Any]:
            if not self.calls:
                self._record("create", res, namespace, body["metadata"]["name"], body=body)
                raise ApiError(429, "TooManyRequests", "slow", retry_after=5.0)
            return await super().create(res, body, namespace)

    setup = Setup()
    writer = Throttled()
    setup.recorder.client = writer
    async with running(setup):
        setup.recorder.record(CD, "Warning", "Reason", "Action", "note")
        await settle()
        await setup.clock.advance(4.9)
        assert len(writer.calls) == 1  # the recorder's own 0.2 s would have retried by now
        await setup.clock.advance(0.2)
        await setup.recorder.wait_idle()
    assert len(writer.calls) == 2


async def test_an_event_refused_by_the_write_fence_is_dropped_at_once_without_a_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A replica that cannot prove it leads writes nothing; the leader election reports the
    refused writes once, so the recorder neither retries nor logs each."""
    setup = Setup()
    fenced = ApiError(0, FENCED_REASON, "POST /apis/events.k8s.io/v1: refused")
    setup.api.refuse = lambda verb, res: fenced
    with caplog.at_level(logging.DEBUG, logger="computedomain"):
        async with running(setup):
            setup.recorder.record(CD, "Warning", "Reason", "Action", "note")
            await settle()
            # A retry would wait on the fake clock, which does not move here.
            await asyncio.wait_for(setup.recorder.wait_idle(), 2)
    assert [call[0] for call in setup.calls()] == ["create"]  # no retry
    assert setup.dropped("write_failed") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_events_not_granted_are_said_once_and_never_sent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RBAC without Events (NVIDIA's charts, GPU Operator): the first create meets the
    authorizer's 403, one warning names the permission, and no later event sends a request."""
    setup = Setup()
    setup.api.refuse = lambda verb, res: denied(verb, res) if verb == "create" else None
    with caplog.at_level(logging.WARNING, logger="computedomain.runtime.events"):
        async with running(setup):
            for index in range(5):
                setup.recorder.record(CD, "Normal", f"Reason{index}", "Reconciling", "x")
            await setup.recorder.wait_idle()
            assert setup.recorder.record(NODE, "Warning", "Late", "Checking", "y") is False
            await setup.recorder.wait_idle()
    assert [call[0] for call in setup.calls()] == ["create"]  # one request, no retry
    warnings = [rec.getMessage() for rec in caplog.records]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("Events are not recorded: create events.events.k8s.io")
    assert setup.dropped("forbidden") == 6
    assert setup.dropped("write_failed") == 0


async def test_events_disabled_at_start_send_nothing(caplog: pytest.LogCaptureFixture) -> None:
    setup = Setup()
    with caplog.at_level(logging.WARNING, logger="computedomain.runtime.events"):
        setup.recorder.disable("create events.events.k8s.io in every namespace is not granted")
        setup.recorder.disable("again")  # said once
        async with running(setup):
            assert setup.recorder.record(CD, "Normal", "Created", "Create", "x") is False
            await setup.recorder.wait_idle()
    assert setup.calls() == []
    assert [rec.getMessage() for rec in caplog.records] == [
        "Events are not recorded: create events.events.k8s.io in every namespace is not granted"
    ]


async def test_a_namespace_being_deleted_does_not_stop_the_events() -> None:
    """Its 403 is not the authorizer's: that event is dropped, later ones are written."""
    setup = Setup()
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace team because it is being terminated",
    )
    setup.api.refuse = lambda verb, res: terminating if len(setup.api.calls) == 1 else None
    async with running(setup):
        setup.recorder.record(CD, "Normal", "Deleted", "Delete", "x")
        await setup.recorder.wait_idle()
        setup.recorder.record(NODE, "Normal", "Other", "Checking", "y")
        await setup.recorder.wait_idle()
    assert [call[0] for call in setup.calls()] == ["create", "create"]
    assert setup.recorder.disabled is None
