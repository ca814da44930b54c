"""The demo's live progress: one line per change a person cares about, from list+watch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import EVENTS, PODS, Resource

STARTED = time.monotonic()


MAX_LINE = 220


def say(line: str) -> None:
    # One line per change: long condition messages (every not-ready daemon) are cut short.
    text = line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"
    print(f"[{time.monotonic() - STARTED:6.1f}s] {text}", flush=True)


def clique_progress(cd: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """cliqueID (or "none") -> (nodes joined, nodes Ready), from status.nodes."""
    progress: dict[str, tuple[int, int]] = {}
    for node in (cd.get("status") or {}).get("nodes") or []:
        clique = node.get("cliqueID") or "none"
        joined, ready = progress.get(clique, (0, 0))
        progress[clique] = (joined + 1, ready + (node.get("status") == c.STATUS_READY))
    return progress


def _short_clique(clique: str) -> str:
    # "<clusterUUID>.<cliqueID>": the UUID's first block is enough to tell racks apart.
    uuid_part, _, index = clique.rpartition(".")
    return f"{uuid_part.split('-')[0]}….{index}" if uuid_part else clique


@dataclass
class Progress:
    """What the watches have seen; prints a line whenever something a person cares about
    changes, and tells when the demo is done."""

    expected_pods: int
    printer: Callable[[str], None] = say
    cd_ready: bool = False
    cd_ready_line: str = ""
    cliques: dict[str, tuple[int, int]] = field(default_factory=dict)
    pod_phases: dict[str, str] = field(default_factory=dict)
    seen_events: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running_pods(self) -> int:
        return sum(phase == "Running" for phase in self.pod_phases.values())

    @property
    def done(self) -> bool:
        return self.cd_ready and self.running_pods >= self.expected_pods

    def on_cd(self, kind: str, cd: dict[str, Any]) -> None:
        name = cd["metadata"]["name"]
        if kind == "DELETED":
            self.printer(f"ComputeDomain {name} deleted")
            self.cd_ready = False
            return
        cliques = clique_progress(cd)
        if cliques != self.cliques:
            for clique in sorted(cliques.keys() | self.cliques.keys()):
                if cliques.get(clique) != self.cliques.get(clique):
                    joined, ready = cliques.get(clique, (0, 0))
                    self.printer(
                        f"clique {_short_clique(clique)}: {joined} nodes joined, {ready} ready"
                    )
            self.cliques = cliques
        cond = objects.condition(cd, "Ready")
        line = f"{cond.get('status', '?')} {cond.get('reason', '')}: {cond.get('message', '')}"
        if cond and line != self.cd_ready_line:
            self.cd_ready_line = line
            self.printer(f"ComputeDomain {name} Ready={line}")
        self.cd_ready = cond.get("status") == "True"
        self.changed.set()

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        before = self.running_pods
        if kind == "DELETED":
            self.pod_phases.pop(name, None)
        else:
            self.pod_phases[name] = (pod.get("status") or {}).get("phase") or "Pending"
        if self.running_pods != before:
            self.printer(f"workload pods Running: {self.running_pods}/{self.expected_pods}")
        self.changed.set()

    def on_event(self, kind: str, event: dict[str, Any]) -> None:
        uid = event["metadata"].get("uid", "")
        if kind == "DELETED" or uid in self.seen_events:
            return
        self.seen_events.add(uid)
        regarding = event.get("regarding") or {}
        note = (event.get("note") or "").strip()
        self.printer(
            f"event {event.get('type', '')} {event.get('reason', '')} "
            f"({regarding.get('kind', '?')}/{regarding.get('name', '?')}): {note}"
        )


async def follow(
    kube: KubeClient,
    res: Resource,
    namespace: str,
    handle: Callable[[str, dict[str, Any]], None],
) -> None:
    """List, then watch from the list's resourceVersion; relist on 410 or a closed watch."""
    while True:
        listing = await kube.list(res, namespace=namespace)
        for item in listing["items"]:
            handle("ADDED", item)
        try:
            async for kind, obj in kube.watch(
                res,
                namespace=namespace,
                resource_version=listing["metadata"]["resourceVersion"],
                timeout_seconds=300,
            ):
                if kind != "BOOKMARK":
                    handle(kind, obj)
        except ApiError as err:
            if not err.is_gone:
                raise


async def watch_progress(
    kube: KubeClient, namespace: str, progress: Progress, within: float
) -> None:
    """Returns once the demo is done; raises TimeoutError after ``within`` seconds."""
    followers = [
        asyncio.create_task(follow(kube, COMPUTE_DOMAINS, namespace, progress.on_cd)),
        asyncio.create_task(follow(kube, PODS, namespace, progress.on_pod)),
        asyncio.create_task(follow(kube, EVENTS, namespace, progress.on_event)),
    ]
    try:
        async with asyncio.timeout(within):
            while not progress.done:
                progress.changed.clear()
                waiter = asyncio.create_task(progress.changed.wait())
                finished, _ = await asyncio.wait(
                    [waiter, *followers], return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                for task in finished:
                    if task is not waiter:
                        task.result()  # a watch failed for good: raise it
    finally:
        for task in followers:
            task.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
