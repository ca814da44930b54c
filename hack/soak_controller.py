"""The controller process of the soak (``hack/soak.py``): our controller, reached through the
fault proxy, and a line protocol through which the soak asks what its caches say unlike the
apiserver. It imports no more than the controller does, so its RSS is the controller's.

    python hack/soak_controller.py PROXIED DIRECT DRIVER_NAMESPACE [NAME=VALUE ...]

Prints "built" once the controller runs; then for each "check" line on stdin, one JSON line:
its informers' differences from a fresh LIST made directly (after they are synced); for each
"live" line, one JSON line (cheap, no tracing): the number of memory blocks Python's allocator
holds for live objects (what the heap holds, unlike RSS, which keeps the allocator's high-water
mark) and its arenas, the C heap (mapped, used, free), and the event keys the Event recorder
holds (spam buckets, series; each bounded). Ends at EOF.

To find what grows: ``SOAK_TRACEMALLOC=SECONDS`` traces allocations (slow), takes a baseline
that many seconds after the start and then logs, every as many seconds, the 15 places in the
controller's code whose live memory grew most since then (to stderr, the soak's log).
``SOAK_TYPES=SECONDS`` (no tracing) counts the objects the garbage collector tracks, by type,
at the same moments, and logs the 15 types whose count grew most since the baseline.
``SOAK_OWNERS=SECONDS`` (no tracing) walks every object reachable from each long-lived part of
the controller (each informer, the queue, the recorder, the registry, ...; untracked strings and
tuples included) and logs each part's objects and bytes, and what no part reaches, against the
allocator's live blocks: what holds the growth, by name.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import json
import os
import sys
import tracemalloc
import types
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from computedomain.devcluster.convergence import caches_differences
from computedomain.devcluster.harness import start_controller
from computedomain.runtime.client import load_client

PACKAGE = Path(__file__).resolve().parent.parent / "computedomain"


async def serve_controller(
    proxied: Path, direct: Path, driver_namespace: str, env: Mapping[str, str]
) -> None:
    running = await start_controller(proxied, driver_namespace, env, wait_synced=None)
    if every := float(os.environ.get("SOAK_TRACEMALLOC", "0")):
        growth = asyncio.create_task(log_growth(every))
    elif every := float(os.environ.get("SOAK_TYPES", "0")):
        growth = asyncio.create_task(log_type_growth(every))
    elif every := float(os.environ.get("SOAK_OWNERS", "0")):
        growth = asyncio.create_task(log_owners(running.process, every))
    # Built as the controller builds its own: no second Kubernetes client library in memory.
    kube = await load_client(str(direct), 50.0, 100, field_manager="soak-audit")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("built", flush=True)
    while line := (await reader.readline()).decode().strip():
        if line == "check":
            await running.wait_synced(120)
            problems = await caches_differences(running.process.caches.all, kube)
            print(json.dumps(problems), flush=True)
        elif line == "live":
            print(json.dumps(live_memory(running.process)), flush=True)
    await running.shutdown()
    await kube.close()
    if every:
        growth.cancel()


class MallInfo2(ctypes.Structure):
    _fields_ = [  # glibc's struct mallinfo2, in its order
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@functools.cache
def _mallinfo2() -> Callable[[], MallInfo2] | None:
    """glibc's ``mallinfo2``, looked up once, or None off glibc."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    found: Callable[[], MallInfo2] = mallinfo2
    return found


def c_heap() -> dict[str, float]:
    """The C library's heap in MiB: mapped from the system (its arenas and large blocks), in
    use, and free chunks (resident or not: the pages ``malloc_trim`` handed back still count
    here); empty off glibc."""
    if (mallinfo2 := _mallinfo2()) is None:
        return {}
    info = mallinfo2()
    mib = 1024 * 1024
    return {
        "mapped": round((info.arena + info.hblkhd) / mib, 1),
        "used": round((info.uordblks + info.hblkhd) / mib, 1),
        "free": round(info.fordblks / mib, 1),
    }


def pymalloc_arenas() -> int:
    """Python's small-object allocator's arenas (1 MiB each, mapped apart from the C heap):
    ``sys._debugmallocstats`` writes them to the C stderr, so it is caught there for a moment."""
    saved = os.dup(2)
    reading, writing = os.pipe()  # its ~10 KB fit a pipe's buffer
    try:
        os.dup2(writing, 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(writing)
        with os.fdopen(reading, "rb") as caught:
            text = caught.read().decode(errors="replace")
    finally:
        os.close(saved)
    for line in text.splitlines():
        if line.startswith("# arenas allocated current"):
            return int(line.split("=")[1].replace(",", ""))
    return 0


def live_memory(process: Any) -> dict[str, Any]:
    """Cheap, untraced: the allocator's live blocks and arenas, the C heap, and the Event
    recorder's keys (spam buckets, series)."""
    recorder = process.recorder
    return {
        "blocks": sys.getallocatedblocks(),
        "arenas": pymalloc_arenas(),
        "c_heap": c_heap(),
        "event_keys": [len(recorder._spam), len(recorder._series)],  # a probe of its state
    }


async def log_growth(every: float) -> None:
    """Every ``every`` seconds, the controller code whose live allocations grew most since a
    baseline taken ``every`` seconds in: each place is the innermost frame in our package
    outside the dev cluster, so a dict grown by the JSON decoder counts where we called it."""
    await asyncio.sleep(every)  # a sampling period: time passing by design
    baseline = tracemalloc.take_snapshot()
    ours = PACKAGE

    def place(traceback: tracemalloc.Traceback) -> str:
        for frame in reversed(traceback):  # innermost first
            if frame.filename.startswith(str(ours)) and "/devcluster/" not in frame.filename:
                return f"{Path(frame.filename).relative_to(ours.parent)}:{frame.lineno}"
        return "(outside)"

    while True:
        await asyncio.sleep(every)
        now = tracemalloc.take_snapshot()
        grown: dict[str, int] = {}
        for stat in now.compare_to(baseline, "traceback"):
            key = place(stat.traceback)
            grown[key] = grown.get(key, 0) + stat.size_diff
        top = sorted(grown.items(), key=lambda item: -item[1])[:15]
        print(
            "tracemalloc growth since baseline: "
            + "; ".join(f"{where} {size / 1024:+.0f} KiB" for where, size in top),
            file=sys.stderr,
            flush=True,
        )


def tracked_types() -> Counter[str]:
    return Counter(f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in gc.get_objects())


def container_sizes() -> dict[int, int]:
    return {id(obj): len(obj) for obj in gc.get_objects() if isinstance(obj, (dict, set, list))}


def describe(container: dict[Any, Any] | set[Any] | list[Any]) -> str:
    """A container by its type and a few of its items, for a log line."""
    sample = list(container)[:3]  # a dict: its first keys
    return f"{type(container).__name__}[{len(container)}] e.g. {repr(sample)[:160]}"


async def log_type_growth(every: float) -> None:
    """Every ``every`` seconds, the tracked object types whose count grew most since a baseline
    taken ``every`` seconds in (after a full collection each time, so garbage does not count),
    and the containers (dict, set, list) whose length grew most: a growing container of
    strings shows there, not among the types (strings are not tracked)."""
    await asyncio.sleep(every)  # a sampling period: time passing by design
    gc.collect()
    baseline, sizes = tracked_types(), container_sizes()
    while True:
        await asyncio.sleep(every)
        gc.collect()
        now = tracked_types()
        now.subtract(baseline)
        top = [(kind, count) for kind, count in now.most_common(15) if count > 0]
        print(
            f"gc types grown since baseline (total {sum(now.values()):+}): "
            + "; ".join(f"{kind} {count:+}" for kind, count in top),
            file=sys.stderr,
            flush=True,
        )
        grown = sorted(
            (
                (len(obj) - sizes.get(id(obj), 0), obj)
                for obj in gc.get_objects()
                if isinstance(obj, (dict, set, list)) and len(obj) > 200
            ),
            key=lambda pair: -pair[0],
        )[:6]
        print(
            "containers grown since baseline: "
            + " | ".join(f"{delta:+} {describe(obj)}" for delta, obj in grown),
            file=sys.stderr,
            flush=True,
        )


SHARED = frozenset({"client", "_handlers", "clock", "resource", "transform", "_rng", "_backoff"})


def owners(process: Any) -> dict[str, Any]:
    """The controller's long-lived parts by name: each informer's own data (not the client,
    clock or handlers it shares), the client, every other attribute of the process, then the
    event loop (its scheduled callbacks) and its tasks (their frames' locals)."""
    parts: dict[str, Any] = {}
    for number, informer in enumerate(process.caches.all):
        own = [value for name, value in vars(informer).items() if name not in SHARED]
        parts[f"informer {number} {informer.name}"] = own
    parts["client"] = process.client
    for name, value in vars(process).items():
        parts.setdefault(name, value)
    loop = asyncio.get_running_loop()
    parts["loop"] = [list(loop._ready), list(loop._scheduled)]  # type: ignore[attr-defined]
    parts["tasks"] = list(asyncio.all_tasks())
    return parts


PROGRAM = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
# Work in flight (a coroutine and its frame, a task, a future): the tasks' part, not the part
# whose request it happens to be waiting on.
IN_FLIGHT = (types.CoroutineType, types.FrameType, asyncio.Future)


def reach(
    root: Any, seen: set[int], kinds: Counter[str], stop: tuple[type, ...] = PROGRAM
) -> tuple[int, int]:
    """Objects and bytes reachable from ``root`` not yet in ``seen`` (which it extends), each
    counted by type in ``kinds``; stops at modules, classes, functions and bound methods, which
    belong to the program or to another part, and at the event loop (a part of its own)."""
    loop = asyncio.get_running_loop()
    count = size = 0
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, stop) or (stop and obj is loop):
            continue
        seen.add(id(obj))
        count += 1
        size += sys.getsizeof(obj)
        kinds[type(obj).__qualname__] += 1
        todo.extend(gc.get_referents(obj))
    return count, size


def census(process: Any) -> tuple[int, dict[str, tuple[int, int]], dict[str, Counter[str]]]:
    """Live blocks, then each part's objects and bytes and its objects by type (a part claims
    what no part before it reached), the program's modules last."""
    gc.collect()
    blocks = sys.getallocatedblocks()  # before the walk's own bookkeeping
    seen: set[int] = {id(process), id(process.caches), *map(id, process.caches.all)}
    counts: dict[str, tuple[int, int]] = {}
    kinds: dict[str, Counter[str]] = {}
    for name, part in owners(process).items():
        kinds[name] = Counter()
        stop = PROGRAM if name == "tasks" else PROGRAM + IN_FLIGHT
        counts[name] = reach(part, seen, kinds[name], stop)
    # Last, the program itself, classes and functions included: growth here is a cache of
    # a module (an lru_cache, a class attribute), not of a part of the controller.
    kinds["modules"] = Counter()
    counts["modules"] = reach(list(sys.modules.values()), seen, kinds["modules"], stop=())
    return blocks, counts, kinds


async def log_owners(process: Any, every: float) -> None:
    """Every ``every`` seconds: each part's reachable objects and KiB, the live blocks no part
    reaches, and per part the types whose count grew most since the previous sample."""
    before: dict[str, Counter[str]] = {}
    while True:
        await asyncio.sleep(every)  # a sampling period: time passing by design
        blocks, counts, kinds = census(process)
        reached = sum(count for count, _ in counts.values())
        print(
            f"owners: live blocks {blocks}, reached {reached}, not reached {blocks - reached}; "
            + "; ".join(
                f"{name} {count} objs {size / 1024:.0f} KiB"
                for name, (count, size) in sorted(counts.items(), key=lambda kv: -kv[1][1])
                if count > 50
            ),
            file=sys.stderr,
            flush=True,
        )
        if before:
            for name, now in kinds.items():
                grown = now.copy()
                grown.subtract(before.get(name, Counter()))
                top = [(kind, n) for kind, n in grown.most_common(6) if n > 100]
                if top:
                    print(
                        f"owners grown in {name} ({sum(grown.values()):+}): "
                        + ", ".join(f"{kind} {n:+}" for kind, n in top),
                        file=sys.stderr,
                        flush=True,
                    )
        before = kinds
        del blocks, counts, kinds  # the walk's bookkeeping is not the controller's


if __name__ == "__main__":
    if float(os.environ.get("SOAK_TRACEMALLOC", "0")):
        tracemalloc.start(25)
    if len(sys.argv) < 4:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    proxied_kubeconfig, direct_kubeconfig, namespace, *pairs = sys.argv[1:]
    overrides = dict(pair.split("=", 1) for pair in pairs)
    os.environ.pop("KUBECONFIG", None)  # the one given is the proxied one, not the caller's
    asyncio.run(
        serve_controller(Path(proxied_kubeconfig), Path(direct_kubeconfig), namespace, overrides)
    )
