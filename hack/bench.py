"""Benchmark of the ComputeDomain controller on a real local control plane.

Starts etcd, kube-apiserver, KCM, scheduler and kwok with a simulated GB200 fleet (64 NVL72
racks = 1,152 nodes by default), runs our controller in this process, and measures:

1. projection latency: a ComputeDomainClique entry (full Update, NotReady→Ready, the way
   NVIDIA's daemon writes it) until the CD's ``status.nodes`` shows it, each change isolated
   (spaced by the status coalescing window);
2. burst: N CDs created at once until each has its three children and conditions, and the
   controller's API writes per CD; then all N deleted at once until they and their DaemonSets
   and daemon RCTs are gone;
3. end-to-end with the fleet simulator: M CDs x K StatefulSet workers until every CD is Ready,
   and the 409 conflicts the controller saw;
4. idle: controller writes over a quiet window while every kwok node heartbeats;
5. memory: process RSS before the controller starts and after it synced the fleet (and CDs);
   with ``--preload-cds N``, N CDs exist before it starts and start-up is timed until each has
   its conditions.

Everything runs in one event loop on a shared machine, so the figures are for comparison
within one run and against upstream's design limits, not absolute. Usage: ``hack/bench.sh
[--quick] [--racks N] [--cds N] ...``; prints a table and writes
``docs/benchmark-results/<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_process import separate_process
from bench_report import report
from bench_scenarios import (
    DRIVER_NAMESPACE,
    REPO_ROOT,
    RESULTS_DIR,
    UPSTREAM,
    Bench,
    ControllerUnderTest,
    say,
)
from bench_webhook import WebhookCost
from measures import now
from soak import Soak
from upgrade import UpgradeUnderLoad
from versus import Versus
from versus import report as versus_report

from computedomain.api import constants as c
from computedomain.config import SETTINGS, ConfigError, environ, parse_settings
from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.cluster import ensure_namespace, populate
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.observability.logging import configure_logging
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.sim.fleet import FleetSpec, build_nodes

# -- main ----------------------------------------------------------------------------------------


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 1]")
    return value


def _window(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    try:
        window = (float(low), float(high))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FROM,TO (two numbers)") from None
    if not 0.0 <= window[0] < window[1] <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not 0 <= FROM < TO <= 1")
    return window


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 racks, 20 CDs")
    parser.add_argument("--racks", type=int, help="NVL72 racks of 18 nodes (default 64)")
    parser.add_argument("--cds", type=int, help="CDs in the burst (default 200)")
    parser.add_argument("--changes", type=int, help="clique changes timed (default 50)")
    parser.add_argument(
        "--preload-cds",
        type=int,
        default=0,
        help="CDs created before the controller starts, kept through the run (default 0): "
        "start-up is then timed until each has its conditions",
    )
    parser.add_argument("--jobs", type=int, help="CDs in the end-to-end phase (default 16)")
    parser.add_argument("--workers", type=int, help="workers per end-to-end CD (default 8)")
    parser.add_argument("--idle-seconds", type=float, help="idle window (default 60)")
    parser.add_argument("--e2e-timeout", type=float, default=420.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--node-heartbeat",
        type=float,
        metavar="SECONDS",
        help="mean seconds between two status writes of one kwok Node (default kwok's 20-25 s; "
        "a real kubelet writes its status every 5 min when nothing changed: 300 for a large "
        "fleet, whose heartbeats would otherwise load this machine more than the controller)",
    )
    parser.add_argument(
        "--small-nodes",
        action="store_true",
        help="minimal Node objects (default: realistic 10-30 KB ones, like EKS GB200 nodes)",
    )
    parser.add_argument(
        "--output", type=Path, help="JSON path (default docs/benchmark-results/<time>.json)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a controller environment variable for every controller the run starts, e.g. "
        "--set KUBE_API_QPS=100 (repeatable; default: the controller's defaults)",
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="SECONDS",
        help="run only the soak scenario (hack/soak.py) for this long: churn through the "
        "fault proxy, controller kills (SIGKILL) in the first 70%%, then convergence, "
        "orphans and the controller process's RSS",
    )
    parser.add_argument("--soak-cds", type=int, default=300, help="CDs created in the soak")
    parser.add_argument("--soak-kills", type=int, default=10, help="controller kills in the soak")
    parser.add_argument(
        "--soak-kill-window",
        type=_share,
        default=0.7,
        help="the kills fall within this first share of the soak (0 to 1, default 0.7); the last "
        "controller lives through the rest, so a small share shows its memory over a long churn",
    )
    parser.add_argument(
        "--soak-fault-window",
        type=_window,
        default="0.15,0.75",
        metavar="FROM,TO",
        help="the proxy's faults, apiserver restarts and compactions fall between these shares "
        "of the soak (0 to 1, default 0.15,0.75); an early window leaves a long clean churn after",
    )
    parser.add_argument(
        "--soak-apiserver-restarts", type=int, default=3, help="apiserver restarts in the soak"
    )
    parser.add_argument(
        "--soak-compactions", type=int, default=1, help="etcd compactions in the soak (410s)"
    )
    parser.add_argument(
        "--soak-against",
        choices=["nvidia", "nvidia-qps100"],
        help="run the soak twice, ours and then NVIDIA's controller (the pinned v0.4.1 build, "
        "its chart's environment: QPS 5, burst 10; nvidia-qps100: ours, QPS 100, burst 200), "
        "each behind a new proxy with the same seed and schedule; requests and writes per CD "
        "(created, and served) and convergence for each, and ours ÷ NVIDIA's",
    )
    parser.add_argument(
        "--upgrade-under-load",
        action="store_true",
        help="run only the upgrade scenario (hack/upgrade.py): our chart with two replicas, "
        "helm upgrade and rollback during a churn; writers, leaderless time, daemons, orphans",
    )
    parser.add_argument(
        "--upgrade-seconds",
        type=float,
        default=240.0,
        help="length of the churn in the upgrade scenario (default 240)",
    )
    parser.add_argument(
        "--against",
        choices=["nvidia"],
        help="instead of the phases above: NVIDIA's compute-domain-controller (the pinned build "
        "of hack/upstream/build.sh, at its default QPS 5/10 and at ours) and ours, one after "
        "the other on the same fleet, each as its own process, every figure also as a ratio "
        "(hack/versus.py); uses --cds, --changes (at most 17) and --idle-seconds",
    )
    parser.add_argument(
        "--webhook-cost",
        action="store_true",
        help="run only the placement webhook's cost (hack/bench_webhook.py): the same pods "
        "created with the webhook off and on, each round with a controller process of its own; "
        "pod CREATE round trip p50/p99, the webhook's own histogram, the controller's RSS and "
        "CPU, and on/off ratios",
    )
    parser.add_argument(
        "--webhook-rounds",
        type=int,
        default=1,
        help="pairs of rounds (off, on) in --webhook-cost (default 1)",
    )
    parser.add_argument("-v", "--verbosity", type=int, default=-1, help="controller log level")
    return parser


def resolve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    quick = {"racks": 8, "cds": 20, "changes": 20, "jobs": 4, "workers": 4, "idle_seconds": 15.0}
    full = {"racks": 64, "cds": 200, "changes": 50, "jobs": 16, "workers": 8, "idle_seconds": 60.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.node_heartbeat is not None and args.node_heartbeat <= 0:
        parser.error(f"--node-heartbeat {args.node_heartbeat:g}: must be more than 0 seconds")
    if args.webhook_rounds < 1:
        parser.error(f"--webhook-rounds {args.webhook_rounds}: must be 1 or more")
    if args.preload_cds < 0:
        parser.error(f"--preload-cds {args.preload_cds}: must be 0 or more")
    overrides: dict[str, str] = {}
    for item in args.overrides:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--set {item!r}: expected NAME=VALUE")
        if name not in {setting.env for setting in SETTINGS}:
            parser.error(f"--set {name}: not an environment variable the controller reads")
        overrides[name] = value
    try:
        controller_settings(overrides)
    except ConfigError as err:
        parser.error(f"--set: {err}")
    args.overrides = overrides
    return args


async def run(args: argparse.Namespace, cp: ControlPlane, started: float) -> dict[str, Any]:
    spec = FleetSpec(racks=args.racks, seed=args.seed, realistic=not args.small_nodes)
    setup: dict[str, float] = {f"control_plane_{k}_s": v for k, v in cp.timings.items()}
    api = await api_client_from_kubeconfig(cp.kubeconfig)
    sim_api = await api_client_from_kubeconfig(cp.kubeconfig)
    client = KubeClient.from_api_client(api, field_manager="bench")
    sim_client = KubeClient.from_api_client(sim_api, field_manager="computedomain-sim")
    controller: ControllerUnderTest | None = None
    try:
        begin = now()
        await populate(cp, spec, ready_timeout=600)
        setup["fleet_ready_s"] = round(now() - begin, 1)
        print(f"fleet: {spec.total_nodes} nodes Ready in {setup['fleet_ready_s']:.0f}s", flush=True)
        await ensure_namespace(client, DRIVER_NAMESPACE)
        if args.upgrade_under_load:  # the chart creates the daemon ServiceAccount
            return await run_upgrade(args, cp, api, client, sim_client, spec, started, setup)
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": c.DAEMON_SERVICE_ACCOUNT},
        }
        await client.create(r.SERVICE_ACCOUNTS, sa, DRIVER_NAMESPACE)
        if args.soak is not None:
            return await run_soak(args, cp, client, sim_client, spec, started, setup)
        if args.webhook_cost:
            cost = WebhookCost(
                client, cp.kubeconfig, DRIVER_NAMESPACE, args.overrides, args.webhook_rounds, say
            )
            figures = await cost.run()  # first: the duration and load are taken after it ran
            return scenario_results(args, spec, started, setup, webhook_cost=figures)
        if args.against == "nvidia":
            versus = Versus(args, cp, api, client, sim_client, DRIVER_NAMESPACE, say=say)
            return scenario_results(args, spec, started, setup, versus=await versus.run())
        bench = Bench(args, client, cp.kubeconfig, build_nodes(spec))
        await bench.preload()
        await bench.memory_and_start()
        controller = bench.controller
        await bench.burst()
        await bench.projection()
        await bench.end_to_end(sim_client)
        if controller is not None:
            await controller.shutdown()
            controller = None
        await separate_process(bench)
        return {
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1),
            "command": "hack/bench.sh " + " ".join(_portable_args(sys.argv[1:])),
            "machine": machine(),
            "parameters": {
                k: getattr(args, k)
                for k in (
                    "quick",
                    "racks",
                    "cds",
                    "preload_cds",
                    "changes",
                    "jobs",
                    "workers",
                    "idle_seconds",
                    "node_heartbeat",
                )
            },
            "controller_settings": controller_settings(args.overrides),
            "setup": setup,
            "upstream": UPSTREAM,
            **bench.results,
        }
    finally:
        if controller is not None:
            await controller.shutdown()
        await client.close()
        await sim_client.close()


async def run_soak(
    args: argparse.Namespace,
    cp: ControlPlane,
    client: KubeClient,
    sim_client: KubeClient,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
) -> dict[str, Any]:
    if cp.workdir is None:
        raise SystemExit("--soak needs the dev cluster (the proxy serves its certificate)")
    soak = Soak(
        client=client,
        sim_client=sim_client,
        kubeconfig=cp.kubeconfig,
        pki_dir=cp.workdir / "pki",
        driver_namespace=DRIVER_NAMESPACE,
        nodes=build_nodes(spec),
        overrides=args.overrides,
        seconds=args.soak,
        cds=args.soak_cds,
        kills=args.soak_kills,
        kill_window=args.soak_kill_window,
        fault_window=args.soak_fault_window,
        seed=args.seed,
        control_plane=cp,
        apiserver_restarts=args.soak_apiserver_restarts,
        compactions=args.soak_compactions,
        against_nvidia=args.soak_against is not None,
        nvidia_rate=(100.0, 200) if args.soak_against == "nvidia-qps100" else None,
        say=say,
    )
    soaked = await soak.run()  # first: the duration and load are taken after it ran
    return scenario_results(args, spec, started, setup, soak=soaked)


async def run_upgrade(
    args: argparse.Namespace,
    cp: ControlPlane,
    admin: Any,
    client: KubeClient,
    sim_client: KubeClient,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
) -> dict[str, Any]:
    if cp.workdir is None:
        raise SystemExit("--upgrade-under-load needs the dev cluster (audit log, pod tokens)")
    scenario = UpgradeUnderLoad(
        client=client,
        sim_client=sim_client,
        admin=admin,
        control_plane=cp,
        driver_namespace=DRIVER_NAMESPACE,
        nodes=build_nodes(spec),
        overrides=args.overrides,
        seconds=args.upgrade_seconds,
        seed=args.seed,
        workdir=cp.workdir / "upgrade-pods",
        say=say,
    )
    figures = await scenario.run()  # first: the duration and the load are the run's
    return scenario_results(args, spec, started, setup, upgrade_under_load=figures)


def scenario_results(
    args: argparse.Namespace,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
    **figures: Any,
) -> dict[str, Any]:
    """The JSON of a run of one scenario (--soak, --upgrade-under-load), taken once it ran."""
    return {
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "command": "hack/bench.sh " + " ".join(_portable_args(sys.argv[1:])),
        "machine": machine(),
        "parameters": {"racks": args.racks, "nodes": spec.total_nodes},
        "controller_settings": controller_settings(args.overrides),
        "setup": setup,
        **figures,
    }


def controller_settings(overrides: Mapping[str, str]) -> dict[str, Any]:
    """What the run's controllers were set to: the figures that bound a burst, and any --set."""
    # Any existing file passes the kubeconfig check; the run's own is made later.
    settings = parse_settings([], {**environ(kubeconfig=__file__), **overrides})
    return {
        "kube_api_qps": settings.kube_api_qps,
        "kube_api_burst": settings.kube_api_burst,
        "workers": settings.workers,
        "overrides": dict(overrides),
    }


def _portable_args(argv: list[str]) -> list[str]:
    """The command line as recorded in the results: an --output path names only its file, so
    no machine's directories end up in the repository."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--output":
            arg = f"docs/benchmark-results/{Path(arg).name}"
        elif arg.startswith("--output="):
            arg = f"--output=docs/benchmark-results/{Path(arg.split('=', 1)[1]).name}"
        out.append(arg)
    return out


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_end": [round(x, 2) for x in load],
        "note": "2 cores shared with other work; compare ratios within one run",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = resolve(parser.parse_args(argv), parser)
    configure_logging(log_format="text", verbosity=max(args.verbosity, 0))
    if args.verbosity < 0:
        logging.getLogger().setLevel(logging.WARNING)
    started = time.time()
    print(
        f"bench: {args.racks} racks ({args.racks * 18} nodes), {args.cds} CDs burst, "
        f"{args.changes} clique changes, {args.jobs}x{args.workers} e2e, "
        f"{args.idle_seconds:.0f}s idle",
        flush=True,
    )
    # Started from the main thread: the children die with the thread that spawned them.
    with ControlPlane.start(
        log=lambda line: print(f"devcluster: {line}", flush=True),
        node_heartbeat_s=args.node_heartbeat,
    ) as cp:
        results = asyncio.run(run(args, cp, started))
    # Written before the table is printed: a run of many minutes is never lost to the report.
    stamp = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H%M%SZ")
    suffix = ("-quick" if args.quick else "") + ("-webhook-cost" if args.webhook_cost else "")
    output = args.output or RESULTS_DIR / f"{stamp}{suffix}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    shown = output.relative_to(REPO_ROOT) if output.is_relative_to(REPO_ROOT) else output
    print()
    print(versus_report(results["versus"]) if "versus" in results else report(results))
    print(f"\nresults: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
