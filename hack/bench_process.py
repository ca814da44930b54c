"""The controller as a process of its own, for ``hack/bench.py``: start-up to the first
reconcile with its phases, RSS then and once settled, and idle CPU, with and without Node
watches."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from bench_scenarios import DRIVER_NAMESPACE, Bench
from measures import now, proc_cpu_s

from computedomain.api import constants as c
from computedomain.config import environ
from computedomain.devcluster.controlplane import free_port
from computedomain.devcluster.processes import rss_mb
from computedomain.runtime.client import KubeClient

# -- the controller as a process of its own: start-up, RSS, idle CPU ------------------------------

# The variant without Node watches: the same controller whose Node informer selects nothing. A
# measuring instrument only (it cannot tell lost nodes), to split idle CPU into Node heartbeats
# and the rest.
NO_NODE_WATCH = Path(__file__).with_name("no_node_watch_controller.py")


def metric_total(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


async def stop(child: asyncio.subprocess.Process) -> None:
    """``child`` gone: asked to stop (SIGTERM, the controller's graceful shutdown), killed if it
    has not within 20 s."""
    child.terminate()
    try:
        await asyncio.wait_for(child.wait(), timeout=20)
    except TimeoutError:
        child.kill()
        await child.wait()


async def scrape(client: KubeClient, port: int) -> str:
    session = client.session
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            return await response.text() if response.status == 200 else ""
    except OSError:
        return ""


async def measure_process(
    client: KubeClient,
    kubeconfig: Path,
    variant: str,
    idle_window: float,
    overrides: Mapping[str, str],
) -> dict[str, Any]:
    """Spawn the controller (``python -m computedomain``, or the no-Node-watch variant),
    time its start to the first reconcile, its RSS then and once settled, and its CPU over an
    idle window. Leader election off, as in NVIDIA's measured deployment (contract §20)."""
    port = free_port()
    env = {
        **os.environ,
        **environ(
            image_name=c.NVIDIA_DRIVER_IMAGE,
            namespace=DRIVER_NAMESPACE,
            kubeconfig=str(kubeconfig),
            leader_election_enabled="false",
            http_endpoint=f"127.0.0.1:{port}",
            probe_address="127.0.0.1:0",
            orphan_grace_period="30m",
        ),
        **overrides,
    }
    argv = [sys.executable, "-m", "computedomain"]
    if variant == "no-node-watch":
        argv = [sys.executable, str(NO_NODE_WATCH)]
    log_path = Path(tempfile.gettempdir()) / f"computedomain-bench-{variant}-{os.getpid()}.log"
    begin, spawned_at = now(), time.time()
    with log_path.open("wb") as out:
        child = await asyncio.create_subprocess_exec(
            *argv, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        startup = rss_start = None
        while now() - begin < 120 and child.returncode is None:
            text = await scrape(client, port)
            if metric_total(text, "controller_runtime_reconcile_total") > 0:
                startup, rss_start = now() - begin, rss_mb(child.pid)
                break
            await asyncio.sleep(0.02)
        if startup is None or rss_start is None:
            raise SystemExit(f"controller ({variant}) did not reconcile: see {log_path}")
        # Settled: no reconcile for 5 s.
        last, since = -1.0, now()
        while now() - since < 5.0 and now() - begin < 300:
            await asyncio.sleep(0.5)
            total = metric_total(await scrape(client, port), "controller_runtime_reconcile_total")
            if total != last:
                last, since = total, now()
        gc_settled = rss_mb(child.pid)
        cpu_before = proc_cpu_s(child.pid)
        await asyncio.sleep(idle_window)
        cpu = proc_cpu_s(child.pid) - cpu_before
        return {
            "variant": variant,
            "startup_to_first_reconcile_s": round(startup, 2),
            "startup_phases_s": startup_phases(log_path, spawned_at, startup),
            "rss_at_first_reconcile_mb": round(rss_start, 1),
            "rss_settled_mb": round(gc_settled, 1),
            "idle_window_s": idle_window,
            "idle_cpu_s": round(cpu, 3),
            "idle_cpu_s_per_60s": round(cpu * 60.0 / idle_window, 3),
        }
    finally:
        await stop(child)


# Log lines that mark the start-up phases, in order (JSON logs, the controller's default).
STARTUP_MARKS = {
    "Starting": "interpreter_and_settings",
    "Serving HTTP": "imports_and_credentials",
    "Started leading": "until_leading",
}


def startup_phases(log_path: Path, spawned_at: float, first_reconcile: float) -> dict[str, float]:
    """Seconds each start-up phase took, from the controller's own log timestamps; the last,
    ``lists_and_first_reconcile``, runs from leading (informers listing meanwhile) until the
    first reconcile was seen."""
    phases: dict[str, float] = {}
    previous = 0.0
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        phase = STARTUP_MARKS.get(entry.get("msg", ""))
        if phase is None or phase in phases:
            continue
        at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp() - spawned_at
        phases[phase], previous = round(at - previous, 2), at
    phases["lists_and_first_reconcile"] = round(first_reconcile - previous, 2)
    return phases


async def separate_process(bench: Bench) -> None:
    window = bench.args.idle_seconds
    overrides = bench.args.overrides
    with_nodes = await measure_process(
        bench.client, bench.kubeconfig, "controller", window, overrides
    )
    without = await measure_process(
        bench.client, bench.kubeconfig, "no-node-watch", window, overrides
    )
    ratio = with_nodes["idle_cpu_s"] / max(without["idle_cpu_s"], 0.001)
    bench.results["process"] = {
        "nodes": len(bench.nodes),
        "controller": with_nodes,
        "no_node_watch": without,
        "idle_cpu_ratio_node_watch": round(ratio, 2),
    }
    bench.say(
        f"process: first reconcile after {with_nodes['startup_to_first_reconcile_s']:.2f}s, "
        f"RSS {with_nodes['rss_at_first_reconcile_mb']:.0f} → "
        f"{with_nodes['rss_settled_mb']:.0f} MiB; idle CPU {with_nodes['idle_cpu_s']:.2f}s "
        f"in {window:.0f}s ({without['idle_cpu_s']:.2f}s without Node watches, x{ratio:.1f})"
    )
