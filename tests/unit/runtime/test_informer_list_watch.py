"""The informer against the kit's fake apiserver: paged LISTs (limit/continue, an expired
continue token), metadata-only requests, a watch from the list's resourceVersion, and updates
dropped by ``unchanged``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from computedomain.runtime.client import ApiError
from computedomain.runtime.informer import FunctionHandler, Informer
from computedomain.runtime.objects import labels, object_key
from computedomain.runtime.resources import NODES
from tests.kit.clock import FakeClock, settle
from tests.kit.fakeapi import FakeApiServer

Obj = dict[str, Any]


def node(name: str, **node_labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": node_labels}}


def fleet(count: int) -> FakeApiServer:
    api = FakeApiServer()
    for i in range(count):
        api.add(NODES, node(f"n{i}"))
    return api


def requests(api: FakeApiServer, verb: str) -> list[dict[str, Any]]:
    return [query for (v, _, _), query in zip(api.calls, api.params, strict=True) if v == verb]


def pages(api: FakeApiServer) -> list[tuple[int | None, str | None]]:
    return [(q["limit"], q["continue_token"]) for q in requests(api, "list")]


@asynccontextmanager
async def running(informer: Informer, api: FakeApiServer) -> AsyncIterator[None]:
    """The informer runs (listed, watching) until the block ends."""
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), timeout=5)
        await current(informer, api)
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def current(informer: Informer, api: FakeApiServer) -> None:
    """Until the informer has handled every write the fake stored so far."""
    async with asyncio.timeout(5):
        while informer.resource_version != api.latest:
            await asyncio.sleep(0)  # the informer's task handles the watch's events


def informer_for(api: FakeApiServer, **kwargs: Any) -> Informer:
    return Informer(api, NODES, clock=FakeClock(), **kwargs)  # type: ignore[arg-type]


async def test_list_is_paged_until_no_continue_token() -> None:
    api = fleet(5)
    informer = informer_for(api, page_size=2)
    async with running(informer, api):
        assert pages(api) == [(2, None), (2, "2"), (2, "4")]
        # A consistent list: no resourceVersion (rv=0 would make the watch cache ignore limit).
        assert all(q["resource_version"] is None for q in requests(api, "list"))
        assert sorted(informer.store.keys()) == ["n0", "n1", "n2", "n3", "n4"]
        # The watch starts where the list ended.
        assert requests(api, "watch")[0]["resource_version"] == api.latest


async def test_an_expired_continue_token_starts_the_list_over() -> None:
    api = fleet(5)
    api.expire_continue = ["4"]
    informer = informer_for(api, page_size=2)
    deleted: list[str] = []
    informer.add_handler(FunctionHandler(delete=lambda o: deleted.append(object_key(o))))
    async with running(informer, api):
        assert pages(api) == [
            (2, None),
            (2, "2"),
            (2, "4"),  # 410 Expired
            (2, None),
            (2, "2"),
            (2, "4"),
        ]
        assert sorted(informer.store.keys()) == ["n0", "n1", "n2", "n3", "n4"]
        assert deleted == []  # the partial list never reached the store


async def test_a_second_expiry_falls_back_to_one_unpaged_list() -> None:
    api = fleet(5)
    api.expire_continue = ["2", "2"]
    informer = informer_for(api, page_size=2)
    async with running(informer, api):
        assert pages(api) == [
            (2, None),
            (2, "2"),  # expired
            (2, None),
            (2, "2"),  # expired again
            (None, None),
        ]
        assert len(informer.store) == 5
        assert informer.list_requests == 5


async def test_metadata_only_asks_for_metadata_and_stores_the_resource_kind() -> None:
    api = fleet(1)
    informer = informer_for(api, metadata_only=True)
    async with running(informer, api):
        assert requests(api, "list")[0]["metadata_only"] is True
        assert requests(api, "watch")[0]["metadata_only"] is True
        stored = informer.store.get("n0")
        assert stored is not None
        assert (stored["kind"], stored["apiVersion"]) == ("Node", "v1")  # not PartialObject...


async def test_whole_objects_by_default() -> None:
    api = fleet(1)
    async with running(informer_for(api), api):
        assert requests(api, "list")[0]["metadata_only"] is False
        assert requests(api, "watch")[0]["metadata_only"] is False


def same_labels(old: Obj, new: Obj) -> bool:
    return labels(old) == labels(new)


async def test_unchanged_updates_never_reach_store_or_handlers() -> None:
    api = FakeApiServer()
    api.add(NODES, node("n0", a="1"))
    informer = informer_for(api, unchanged=same_labels)
    updates: list[str] = []
    informer.add_handler(
        FunctionHandler(update=lambda _, new: updates.append(new["metadata"]["resourceVersion"]))
    )
    async with running(informer, api):
        api.bump(NODES, "n0")  # a heartbeat
        api.objects[("nodes", "", "n0")]["metadata"]["labels"]["a"] = "2"
        relabelled = api.bump(NODES, "n0")  # a label change
        api.bump(NODES, "n0")  # a heartbeat
        await current(informer, api)
        assert updates == [relabelled["metadata"]["resourceVersion"]]
        stored = informer.store.get("n0")
        assert stored is not None
        # The last version that mattered is stored; the watch resumes from the newest.
        assert stored["metadata"]["resourceVersion"] == relabelled["metadata"]["resourceVersion"]
        assert informer.resource_version == api.latest


async def test_a_watch_cut_resumes_from_the_last_event_and_a_compaction_relists() -> None:
    api, clock = fleet(2), FakeClock()
    informer = Informer(api, NODES, clock=clock)  # type: ignore[arg-type]
    async with running(informer, api):
        api.add(NODES, node("n2"))
        await current(informer, api)
        seen = informer.resource_version
        api.end_watches()  # a clean end: the next watch resumes where this one was, at once
        api.add(NODES, node("n3"))
        await current(informer, api)
        assert requests(api, "watch")[-1]["resource_version"] == seen
        assert len(requests(api, "list")) == 1

        # The watch is cut and refused while a Node goes and etcd is compacted past the
        # informer's resourceVersion: the next watch is answered 410, and a new LIST heals.
        api.refuse = lambda verb, _: (
            ApiError(503, "Unavailable", "cut") if verb == "watch" else None
        )
        api.end_watches()
        await settle()
        api.remove(NODES, "n0")
        api.compact()
        api.refuse = None
        await clock.advance(60)  # past its backoff
        await current(informer, api)
        assert len(requests(api, "list")) == 2
        assert sorted(informer.store.keys()) == ["n1", "n2", "n3"]


class Events:
    """Every handler call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def handler(self) -> FunctionHandler:
        return FunctionHandler(
            add=lambda o: self.calls.append(("add", object_key(o))),
            update=lambda _, n: self.calls.append(("update", object_key(n))),
            delete=lambda o: self.calls.append(("delete", object_key(o))),
        )


async def test_a_polling_informer_relists_every_period_and_delivers_only_differences() -> None:
    api = FakeApiServer()
    for name, node_labels in (("a", {"clique": "x"}), ("b", {}), ("c", {})):
        api.add(NODES, node(name, **node_labels))
    clock = FakeClock()
    informer = Informer(
        api,  # type: ignore[arg-type]
        NODES,
        clock=clock,
        page_size=2,
        poll_interval=60,
        metadata_only=True,
        unchanged=lambda old, new: labels(old) == labels(new),
    )
    events = Events()
    informer.add_handler(events.handler())
    task = asyncio.create_task(informer.run())
    try:
        await clock.advance(0)
        assert informer.has_synced
        assert events.calls == [("add", "a"), ("add", "b"), ("add", "c")]
        assert pages(api) == [(2, None), (2, "2")]  # paged
        assert all(q["metadata_only"] for q in requests(api, "list"))
        events.calls.clear()
        # A heartbeat (RV moved, labels did not), a relabel, a deletion and a new Node.
        api.bump(NODES, "a")
        api.objects[("nodes", "", "b")]["metadata"]["labels"] = {"clique": "y"}
        api.bump(NODES, "b")
        api.remove(NODES, "c")
        api.add(NODES, node("d"))
        await clock.advance(59)
        assert events.calls == []  # not before the period
        await clock.advance(1)
        assert events.calls == [("update", "b"), ("add", "d"), ("delete", "c")]
        assert requests(api, "watch") == []  # never a watch
        events.calls.clear()
        await clock.advance(60)  # nothing changed: nothing delivered
        assert events.calls == []
        assert len(requests(api, "list")) == 6
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_polled_list_keeps_what_was_fed_after_it_and_does_not_undo_a_fed_deletion() -> None:
    informer = informer_for(FakeApiServer(), poll_interval=60)
    events = Events()
    informer.add_handler(events.handler())
    informer.feed_list([rv(node("gone"), 5), rv(node("kept"), 5)], "10")
    # Between two lists: a Node gained at RV 20, and "gone" deleted at RV 21.
    informer.feed("ADDED", rv(node("new"), 20))
    informer.feed("DELETED", rv(node("gone"), 21))
    events.calls.clear()
    # A list taken before both (RV 15) still holds "gone" and lacks "new".
    informer.feed_list([rv(node("gone"), 5), rv(node("kept"), 5)], "15")
    assert sorted(informer.store.keys()) == ["kept", "new"]
    assert events.calls == []
    # A later list is the truth again.
    informer.feed_list([rv(node("kept"), 5)], "30")
    assert events.calls == [("delete", "new")]


def rv(obj: Obj, version: int) -> Obj:
    """``obj`` as stored at resourceVersion ``version`` (for what is fed by hand)."""
    obj["metadata"]["resourceVersion"] = str(version)
    return obj
