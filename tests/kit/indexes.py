"""An independent witness of IMEX node indexes (upstream #1440, #1418).

``IndexLedger`` (pure) takes every version of the daemon pods, the ComputeDomainCliques and the
ComputeDomains as a watcher saw them, and finds what must never happen to a node whose daemon
pod stayed alive: its index changing, or its entry vanishing, in a clique's ``daemons[]`` or in
its CD's ``status.nodes``. It also finds any node listed twice, and any index held by two nodes
of one clique. ``IndexWatch`` feeds it from the apiserver with its own client (not through a
fault proxy put before the controller under test).

"Stayed alive": a daemon pod of that CD on that node was seen before the old entry was first
seen, and was seen neither deleting nor deleted until ``settle`` seconds after the change. Pod
and clique events come on separate watches, so ``settle`` absorbs their relative delay; a
legitimate change (the pod was deleted, its successor took a free index) always has the
deletion first, since the daemon removes its own entry only once its pod is terminating.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import PODS, Resource

SETTLE = 1.0


@dataclass
class _PodLife:
    cd_uid: str
    node: str
    first_seen: float
    gone_at: float | None = None


@dataclass
class _Held:
    index: int
    since: float  # when this index was first seen for the node
    last: float  # when it was last seen present


@dataclass(frozen=True)
class Change:
    source: str  # "clique <name>" or "status <namespace>/<cd>"
    cd_uid: str
    node: str
    old: int
    old_since: float
    new: int | None  # None: the entry vanished
    at: float

    def describe(self) -> str:
        if self.new is None:
            return f"{self.source}: entry of live node {self.node} (index {self.old}) removed"
        return f"{self.source}: index of live node {self.node} changed {self.old} -> {self.new}"


@dataclass
class IndexLedger:
    settle: float = SETTLE
    pods: dict[str, _PodLife] = field(default_factory=dict)
    # source -> (clique ID, node) -> what it holds now; and what it held before it vanished
    held: dict[str, dict[tuple[str, str], _Held]] = field(default_factory=dict)
    vanished: dict[str, dict[tuple[str, str], _Held]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    immediate: list[str] = field(default_factory=list)
    # every (source, clique ID, node) -> indexes ever seen, for the report
    seen: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)

    # -- feeding ------------------------------------------------------------------------------

    def pod(self, kind: str, pod: Mapping[str, Any], at: float) -> None:
        meta = pod.get("metadata") or {}
        uid, node = meta.get("uid"), (pod.get("spec") or {}).get("nodeName")
        cd_uid = (meta.get("labels") or {}).get(c.CD_LABEL)
        if not (uid and cd_uid):
            return
        life = self.pods.get(uid)
        if life is None and node:
            life = self.pods[uid] = _PodLife(cd_uid, node, at)
        gone = kind == "DELETED" or bool(meta.get("deletionTimestamp"))
        if life is not None and life.gone_at is None and gone:
            life.gone_at = at

    def clique(self, kind: str, clique: Mapping[str, Any], at: float) -> None:
        meta = clique.get("metadata") or {}
        cd_uid = str((meta.get("labels") or {}).get(c.CD_LABEL) or "")
        entries = [
            (str(d.get("cliqueID") or ""), str(d.get("nodeName")), int(d.get("index", -99)))
            for d in (clique.get("daemons") or [])
        ]
        # A deleted clique (GC after its last pod) says nothing about live nodes.
        if kind == "DELETED":
            self.held.pop(f"clique {meta.get('name')}", None)
            return
        self._entries(f"clique {meta.get('name')}", cd_uid, entries, at)

    def compute_domain(self, kind: str, cd: Mapping[str, Any], at: float) -> None:
        meta = cd.get("metadata") or {}
        source = f"status {meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self.held.pop(source, None)
            return
        entries = [
            (str(n.get("cliqueID") or ""), str(n.get("name")), int(n.get("index", -99)))
            for n in ((cd.get("status") or {}).get("nodes") or [])
        ]
        self._entries(source, str(meta.get("uid") or ""), entries, at)

    def _entries(
        self,
        source: str,
        cd_uid: str,
        entries: list[tuple[str, str, int]],
        at: float,
    ) -> None:
        names = [node for _, node, _ in entries]
        for node in sorted({n for n in names if names.count(n) > 1}):
            self.immediate.append(f"{source}: node {node} listed {names.count(node)} times")
        by_index: dict[tuple[str, int], list[str]] = {}
        for clique_id, node, index in entries:
            if index >= 0:
                by_index.setdefault((clique_id, index), []).append(node)
        for (clique_id, index), nodes in sorted(by_index.items()):
            if len(nodes) > 1:
                self.immediate.append(
                    f"{source}: index {index} of clique {clique_id!r} held by {sorted(nodes)}"
                )
        held = self.held.setdefault(source, {})
        vanished = self.vanished.setdefault(source, {})
        now: dict[tuple[str, str], int] = {(cid, node): index for cid, node, index in entries}
        for key, index in now.items():
            history = self.seen.setdefault((source, *key), [])
            if not history or history[-1] != index:
                history.append(index)
            before = held.get(key) or vanished.pop(key, None)
            if before is not None and before.index != index:
                self.changes.append(
                    Change(source, cd_uid, key[1], before.index, before.since, index, at)
                )
                before = None
            if before is None:
                held[key] = _Held(index, at, at)
            else:
                before.last = at
                held[key] = before
        for key in set(held) - set(now):
            gone = held.pop(key)
            vanished[key] = gone
            self.changes.append(Change(source, cd_uid, key[1], gone.index, gone.since, None, at))

    # -- judging ------------------------------------------------------------------------------

    def alive_across(self, change: Change) -> bool:
        """A daemon pod of the CD on that node, seen before the old entry, still alive
        ``settle`` seconds after the change."""
        return any(
            life.cd_uid == change.cd_uid
            and life.node == change.node
            and life.first_seen <= change.old_since
            and (life.gone_at is None or life.gone_at > change.at + self.settle)
            for life in self.pods.values()
        )

    def problems(self) -> list[str]:
        found = list(dict.fromkeys(self.immediate))
        found += [ch.describe() for ch in self.changes if self.alive_across(ch)]
        return found

    def swaps(self) -> list[str]:
        return [
            ch.describe() for ch in self.changes if ch.new is not None and self.alive_across(ch)
        ]


@dataclass
class IndexWatch:
    """Feeds an ``IndexLedger`` from three watches (daemon pods and cliques in the driver
    namespace, CDs in ``namespace``) with its own client, until stopped."""

    kube: KubeClient
    namespace: str
    driver_namespace: str
    ledger: IndexLedger = field(default_factory=IndexLedger)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _synced: list[asyncio.Event] = field(default_factory=list)

    async def start(self) -> None:
        feeds = (
            (PODS, self.driver_namespace, c.CD_LABEL, self.ledger.pod),
            (CLIQUES, self.driver_namespace, None, self.ledger.clique),
            (COMPUTE_DOMAINS, self.namespace, None, self.ledger.compute_domain),
        )
        for res, namespace, selector, feed in feeds:
            synced = asyncio.Event()
            self._synced.append(synced)
            self._tasks.append(
                asyncio.create_task(self._follow(res, namespace, selector, feed, synced))
            )
        async with asyncio.timeout(30):
            for event in self._synced:
                await event.wait()

    async def stop(self) -> list[str]:
        """Stop watching; the problems found (after ``settle`` more seconds of pod events)."""
        await asyncio.sleep(self.ledger.settle)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return self.ledger.problems()

    async def _follow(
        self,
        res: Resource,
        namespace: str,
        selector: str | None,
        feed: Any,
        synced: asyncio.Event,
    ) -> None:
        while True:
            listing = await self.kube.list(res, namespace, label_selector=selector)
            at = time.monotonic()
            for obj in listing["items"]:
                feed("ADDED", obj, at)
            synced.set()
            try:
                async for kind, obj in self.kube.watch(
                    res,
                    namespace,
                    label_selector=selector,
                    resource_version=listing["metadata"]["resourceVersion"],
                    timeout_seconds=600,
                ):
                    if kind != "BOOKMARK":
                        feed(kind, obj, time.monotonic())
            except ApiError as err:
                if not err.is_gone:
                    raise


@contextlib.asynccontextmanager
async def watching_indexes(
    kube: KubeClient, namespace: str, driver_namespace: str
) -> AsyncIterator[IndexWatch]:
    """An ``IndexWatch`` running for the block (stopped on exit; call ``stop`` to judge)."""
    watch = IndexWatch(kube, namespace, driver_namespace)
    await watch.start()
    try:
        yield watch
    finally:
        for task in watch._tasks:
            task.cancel()
        await asyncio.gather(*watch._tasks, return_exceptions=True)
