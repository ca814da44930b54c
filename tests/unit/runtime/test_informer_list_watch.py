"""The informer against a fake list/watch client: paged LISTs (limit/continue, an expired
continue token), metadata-only requests, and updates dropped by ``unchanged``."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from computedomain.runtime.client import ApiError
from computedomain.runtime.informer import FunctionHandler, Informer
from computedomain.runtime.objects import labels, object_key
from computedomain.runtime.resources import NODES
from tests.kit.clock import FakeClock

Obj = dict[str, Any]


def node(name: str, rv: int, **node_labels: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": node_labels}}


@dataclass
class ListWatchClient:
    """Serves ``objects`` in pages of the requested limit (the continue token is the next
    offset), raises 410 Expired for the continue tokens in ``expire`` (once each), then
    streams ``events`` and blocks like a quiet watch."""

    objects: list[Obj]
    list_rv: str = "50"
    expire: list[str] = field(default_factory=list)
    events: list[tuple[str, Obj]] = field(default_factory=list)
    lists: list[dict[str, Any]] = field(default_factory=list)
    watches: list[dict[str, Any]] = field(default_factory=list)
    # Set once the watch delivered its events (and the informer handled them).
    streamed: asyncio.Event = field(default_factory=asyncio.Event)

    async def list(self, res: Any, **kwargs: Any) -> Obj:
        self.lists.append(kwargs)
        token = kwargs.get("continue_token")
        if token in self.expire:
            self.expire.remove(token)
            raise ApiError(410, "Expired", "The provided continue parameter is too old")
        start, limit = int(token or 0), kwargs.get("limit")
        end = len(self.objects) if limit is None else start + limit
        more = end < len(self.objects)
        return {
            "metadata": {"resourceVersion": self.list_rv, "continue": str(end) if more else ""},
            "items": copy.deepcopy(self.objects[start:end]),
        }

    async def watch(self, res: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        self.watches.append(kwargs)
        for event_type, obj in self.events:
            yield event_type, copy.deepcopy(obj)
        self.streamed.set()
        await asyncio.Event().wait()


async def run_until_synced(informer: Informer, client: ListWatchClient) -> None:
    """Run the informer through its list and the watch's events, then stop it."""
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(client.streamed.wait(), timeout=5)
        assert informer.has_synced
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def informer_for(client: ListWatchClient, **kwargs: Any) -> Informer:
    return Informer(client, NODES, clock=FakeClock(), **kwargs)  # type: ignore[arg-type]


async def test_list_is_paged_until_no_continue_token() -> None:
    client = ListWatchClient([node(f"n{i}", i + 1) for i in range(5)])
    informer = informer_for(client, page_size=2)
    await run_until_synced(informer, client)
    assert [(c["limit"], c["continue_token"]) for c in client.lists] == [
        (2, None),
        (2, "2"),
        (2, "4"),
    ]
    # A consistent list: no resourceVersion (rv=0 would make the watch cache ignore limit).
    assert all(c.get("resource_version") is None for c in client.lists)
    assert sorted(informer.store.keys()) == ["n0", "n1", "n2", "n3", "n4"]
    assert client.watches[0]["resource_version"] == "50"


async def test_an_expired_continue_token_starts_the_list_over() -> None:
    client = ListWatchClient([node(f"n{i}", i + 1) for i in range(5)], expire=["4"])
    informer = informer_for(client, page_size=2)
    deleted: list[str] = []
    informer.add_handler(FunctionHandler(delete=lambda o: deleted.append(object_key(o))))
    await run_until_synced(informer, client)
    assert [(c["limit"], c["continue_token"]) for c in client.lists] == [
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
    client = ListWatchClient([node(f"n{i}", i + 1) for i in range(5)], expire=["2", "2"])
    informer = informer_for(client, page_size=2)
    await run_until_synced(informer, client)
    assert [(c["limit"], c["continue_token"]) for c in client.lists] == [
        (2, None),
        (2, "2"),  # expired
        (2, None),
        (2, "2"),  # expired again
        (None, None),
    ]
    assert len(informer.store) == 5
    assert informer.list_requests == 5


async def test_metadata_only_asks_for_metadata_and_stores_the_resource_kind() -> None:
    item = node("n0", 1, a="1")
    item.update(kind="PartialObjectMetadata", apiVersion="meta.k8s.io/v1")
    client = ListWatchClient([item])
    informer = informer_for(client, metadata_only=True)
    await run_until_synced(informer, client)
    assert client.lists[0]["metadata_only"] is True
    assert client.watches[0]["metadata_only"] is True
    stored = informer.store.get("n0")
    assert stored is not None
    assert (stored["kind"], stored["apiVersion"]) == ("Node", "v1")


async def test_whole_objects_by_default() -> None:
    client = ListWatchClient([node("n0", 1)])
    await run_until_synced(informer_for(client), client)
    assert client.lists[0]["metadata_only"] is False
    assert client.watches[0]["metadata_only"] is False


def same_labels(old: Obj, new: Obj) -> bool:
    return labels(old) == labels(new)


async def test_unchanged_updates_never_reach_store_or_handlers() -> None:
    client = ListWatchClient(
        [node("n0", 1, a="1")],
        events=[
            ("MODIFIED", node("n0", 60, a="1")),  # a heartbeat
            ("MODIFIED", node("n0", 61, a="2")),  # a label change
            ("MODIFIED", node("n0", 62, a="2")),  # a heartbeat
        ],
    )
    informer = informer_for(client, unchanged=same_labels)
    updates: list[str] = []
    informer.add_handler(
        FunctionHandler(update=lambda _, new: updates.append(new["metadata"]["resourceVersion"]))
    )
    await run_until_synced(informer, client)
    assert updates == ["61"]
    stored = informer.store.get("n0")
    assert stored is not None
    assert stored["metadata"]["resourceVersion"] == "61"  # the last version that mattered
    assert informer.resource_version == "62"  # the watch resumes from the newest


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
    client = ListWatchClient([node("a", 1, clique="x"), node("b", 2), node("c", 3)])
    clock = FakeClock()
    informer = Informer(
        client,  # type: ignore[arg-type]
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
        assert [c["continue_token"] for c in client.lists] == [None, "2"]  # paged
        assert all(c["metadata_only"] for c in client.lists)
        events.calls.clear()
        # A heartbeat (RV moved, labels did not), a relabel, a deletion and a new Node.
        client.objects = [node("a", 11, clique="x"), node("b", 12, clique="y"), node("d", 13)]
        await clock.advance(59)
        assert events.calls == []  # not before the period
        await clock.advance(1)
        assert events.calls == [("update", "b"), ("add", "d"), ("delete", "c")]
        assert client.watches == []  # never a watch
        events.calls.clear()
        await clock.advance(60)  # nothing changed: nothing delivered
        assert events.calls == []
        assert len(client.lists) == 6
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_polled_list_keeps_what_was_fed_after_it_and_does_not_undo_a_fed_deletion() -> None:
    client = ListWatchClient([])
    informer = Informer(client, NODES, clock=FakeClock(), poll_interval=60)  # type: ignore[arg-type]
    events = Events()
    informer.add_handler(events.handler())
    informer.feed_list([node("gone", 5), node("kept", 5)], "10")
    # Between two lists: a Node gained at RV 20, and "gone" deleted at RV 21.
    informer.feed("ADDED", node("new", 20))
    informer.feed("DELETED", node("gone", 21))
    events.calls.clear()
    # A list taken before both (RV 15) still holds "gone" and lacks "new".
    informer.feed_list([node("gone", 5), node("kept", 5)], "15")
    assert sorted(informer.store.keys()) == ["kept", "new"]
    assert events.calls == []
    # A later list is the truth again.
    informer.feed_list([node("kept", 5)], "30")
    assert events.calls == [("delete", "new")]
