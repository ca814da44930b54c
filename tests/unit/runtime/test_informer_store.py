import random
import tracemalloc
from typing import Any

import pytest

from computedomain.runtime.informer import (
    TOMBSTONE_GRACE_SECONDS,
    Backoff,
    FunctionHandler,
    Informer,
    strip_managed_fields,
)
from computedomain.runtime.objects import object_key
from computedomain.runtime.resources import PODS
from computedomain.runtime.store import Store
from tests.kit.clock import FakeClock


def pod(name: str, rv: int, ns: str = "ns", node: str = "n1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "labels": labels},
        "spec": {"nodeName": node},
    }


def by_node(obj: dict[str, Any]) -> list[str]:
    return [obj["spec"]["nodeName"]]


def test_keys_for_namespaced_and_cluster_scoped_objects() -> None:
    assert object_key(pod("a", 1)) == "ns/a"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"


def test_indexes_follow_updates_and_removals() -> None:
    store = Store({"node": by_node})
    store.upsert(pod("a", 1, node="n1"))
    store.upsert(pod("b", 1, node="n1"))
    store.upsert(pod("a", 2, node="n2"))
    assert [object_key(o) for o in store.by_index("node", "n1")] == ["ns/b"]
    assert [object_key(o) for o in store.by_index("node", "n2")] == ["ns/a"]
    store.remove("ns/b")
    assert store.by_index("node", "n1") == []
    assert sorted(store.index_values("node")) == ["n2"]
    assert len(store) == 1


def test_observe_write_only_moves_forward() -> None:
    store = Store()
    store.upsert(pod("a", 10))
    assert not store.observe_write(pod("a", 9))
    assert not store.observe_write(pod("a", 10))
    assert store.observe_write(pod("a", 11))
    assert store.get("ns/a") == pod("a", 11)
    assert store.observe_write(pod("new", 1))


def test_a_removed_object_cannot_come_back_older_and_its_body_is_not_kept() -> None:
    store = Store()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200):
            big = pod(f"p{i}", 10 + i)
            big["spec"]["payload"] = f"{i:05d}" * 2_000  # ~10 KB, like a Pod with its status
            store.upsert(big)
            store.remove(object_key(big), last=big)
        del big
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 200 * 1_000, f"{kept} bytes kept for 200 deleted objects"
    # What is kept still refuses a late, older answer about a deleted object, not a newer one.
    assert not store.observe_write(pod("p7", 17))
    assert store.get("ns/p7") is None
    assert store.observe_write(pod("p7", 18))


def test_strip_managed_fields() -> None:
    obj = {"metadata": {"name": "a", "managedFields": [{"manager": "x"}]}}
    assert strip_managed_fields(obj) == {"metadata": {"name": "a"}}


def test_backoff_grows_caps_and_resets_after_quiet_period() -> None:
    clock = FakeClock()
    backoff = Backoff(clock, jitter=0.0)
    delays = [backoff.next_delay() for _ in range(8)]
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])


async def test_backoff_resets_after_two_healthy_minutes() -> None:
    clock = FakeClock()
    backoff = Backoff(clock, jitter=0.0)
    for _ in range(4):
        backoff.next_delay()
    await clock.advance(119)
    assert backoff.next_delay() == pytest.approx(12.8)
    await clock.advance(121)
    assert backoff.next_delay() == pytest.approx(0.8)


def test_backoff_jitter_stays_within_factor_two() -> None:
    backoff = Backoff(FakeClock(), rng=random.Random(7))
    first = backoff.next_delay()
    assert 0.8 <= first <= 1.6


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def handler(self) -> FunctionHandler:
        return FunctionHandler(
            add=lambda o: self.events.append(("add", object_key(o), _rv(o))),
            update=lambda old, new: self.events.append(("update", object_key(new), _rv(new))),
            delete=lambda o: self.events.append(("delete", object_key(o), _rv(o))),
        )


def _rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


def make_informer() -> tuple[Informer, Recorder]:
    informer = Informer(None, PODS, clock=FakeClock())  # type: ignore[arg-type]
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    return informer, recorder


def test_watch_events_update_store_handlers_and_rv() -> None:
    informer, recorder = make_informer()
    informer.feed("ADDED", pod("a", 5))
    informer.feed("MODIFIED", pod("a", 6))
    informer.feed("MODIFIED", pod("a", 6))  # unchanged RV: skipped
    informer.feed("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert informer.resource_version == "9"
    informer.feed("DELETED", pod("a", 10))
    assert recorder.events == [
        ("add", "ns/a", "5"),
        ("update", "ns/a", "6"),
        ("delete", "ns/a", "10"),
    ]
    assert len(informer.store) == 0
    assert informer.resource_version == "10"


def test_own_write_observed_suppresses_the_echo_event() -> None:
    informer, recorder = make_informer()
    informer.feed("ADDED", pod("a", 5))
    informer.store.observe_write(pod("a", 7))
    informer.feed("MODIFIED", pod("a", 6))  # older than our write
    informer.feed("MODIFIED", pod("a", 7))  # the echo of our write
    assert recorder.events == [("add", "ns/a", "5")]
    stored = informer.store.get("ns/a")
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == "7"


def test_our_write_that_removed_the_last_finalizer_removes_the_object_until_its_event() -> None:
    """The apiserver deletes an object as it answers the write that removed its last finalizer:
    the store drops it then, a late event from before cannot bring it back, and the DELETED
    event is still delivered."""
    informer, recorder = make_informer()
    informer.feed("ADDED", pod("a", 5))
    finalized = pod("a", 8)
    finalized["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    assert informer.store.observe_write(finalized)
    assert informer.store.get("ns/a") is None
    informer.feed("MODIFIED", pod("a", 7))  # the deletionTimestamp being set, late
    assert informer.store.get("ns/a") is None
    assert informer.resource_version == "7"
    informer.feed("DELETED", pod("a", 8))
    informer.feed("ADDED", pod("a", 9))  # created again under the same name
    assert recorder.events == [("add", "ns/a", "5"), ("delete", "ns/a", "8"), ("add", "ns/a", "9")]


def test_the_answer_that_deleted_an_object_removes_it_at_the_version_already_cached() -> None:
    """The apiserver answers the write that removed the last finalizer with the resourceVersion
    the object had (it deleted rather than wrote): often the very version in the store."""
    informer, recorder = make_informer()
    deleting = pod("a", 7)
    deleting["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["x"])
    informer.feed("ADDED", deleting)
    finalized = pod("a", 7)
    finalized["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    assert informer.store.observe_write(finalized)
    assert informer.store.get("ns/a") is None
    informer.feed("MODIFIED", deleting)  # a duplicate of what was seen: no resurrection
    assert informer.store.get("ns/a") is None
    informer.feed("DELETED", pod("a", 8))
    assert recorder.events == [("add", "ns/a", "7"), ("delete", "ns/a", "8")]
    older = pod("a", 6)
    older["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    assert not informer.store.observe_write(older)  # after a newer deletion: changes nothing


def test_deletions_the_watch_passed_a_grace_period_ago_are_forgotten() -> None:
    """A churning controller must not remember every deletion: once the watch has passed one
    for TOMBSTONE_GRACE_SECONDS, no event or write response that old can still come."""
    informer, _ = make_informer()
    clock = informer.clock
    assert isinstance(clock, FakeClock)
    for i in range(50):
        informer.feed("ADDED", pod(f"p{i}", 10 + i))
        informer.feed("DELETED", pod(f"p{i}", 100 + i))
    assert informer.store.remembered_deletions == 50
    clock.freeze_for(TOMBSTONE_GRACE_SECONDS)
    informer.feed("BOOKMARK", {"metadata": {"resourceVersion": "200"}})  # the watch is at 200
    assert informer.store.remembered_deletions == 50  # within the grace period of passing them
    # Our own write shows a deletion ahead of the watch: it stays until the watch passed it.
    finalized = pod("ahead", 300)
    finalized["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    informer.feed("ADDED", pod("ahead", 250))
    assert informer.store.observe_write(finalized)
    clock.freeze_for(TOMBSTONE_GRACE_SECONDS)
    informer.feed("MODIFIED", pod("other", 260))
    assert informer.store.remembered_deletions == 1
    assert not informer.store.observe_write(pod("ahead", 299))  # still refused: not passed
    clock.freeze_for(TOMBSTONE_GRACE_SECONDS)
    informer.feed("BOOKMARK", {"metadata": {"resourceVersion": "310"}})
    assert informer.store.remembered_deletions == 1  # passed at 310, forgotten a period later
    clock.freeze_for(TOMBSTONE_GRACE_SECONDS)
    informer.feed("BOOKMARK", {"metadata": {"resourceVersion": "320"}})
    assert informer.store.remembered_deletions == 0


def test_relist_delivers_vanished_objects_as_deletes_with_last_state() -> None:
    informer, recorder = make_informer()
    informer.feed_list([pod("a", 1), pod("b", 1)])
    informer.feed("MODIFIED", pod("b", 3))
    recorder.events.clear()
    informer.feed_list([pod("a", 1), pod("c", 4)])
    assert recorder.events == [("add", "ns/c", "4"), ("delete", "ns/b", "3")]


def test_handler_exceptions_do_not_stop_delivery(caplog: pytest.LogCaptureFixture) -> None:
    def explode(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer = Informer(None, PODS, clock=FakeClock())  # type: ignore[arg-type]
    informer.add_handler(FunctionHandler(add=explode))
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    informer.feed("ADDED", pod("a", 1))
    assert recorder.events == [("add", "ns/a", "1")]
    assert "Event handler failed" in caplog.text


def test_transform_and_type_meta_are_applied() -> None:
    informer = Informer(None, PODS, transform=strip_managed_fields)  # type: ignore[arg-type]
    obj = pod("a", 1)
    obj["metadata"]["managedFields"] = [{}]
    informer.feed("ADDED", obj)
    stored = informer.store.get("ns/a")
    assert stored is not None
    assert "managedFields" not in stored["metadata"]
    assert stored["kind"] == "Pod"
    assert stored["apiVersion"] == "v1"


def test_late_handler_receives_existing_objects_as_adds() -> None:
    informer, _ = make_informer()
    informer.feed_list([pod("a", 1)])
    late = Recorder()
    informer.add_handler(late.handler())
    assert late.events == [("add", "ns/a", "1")]


def test_the_store_generation_moves_with_every_change_and_only_then() -> None:
    store = Store()
    obj = {"metadata": {"name": "n", "resourceVersion": "1"}}
    store.upsert(obj)
    first = store.generation
    store.get("n")
    store.list()
    store.remove("absent")
    assert store.generation == first  # reads and a no-op removal change nothing
    store.upsert({"metadata": {"name": "n", "resourceVersion": "2"}})
    assert store.generation == first + 1
    store.remove("n")
    assert store.generation == first + 2
