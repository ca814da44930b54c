"""``computedomain-sim`` / ``python -m computedomain.sim``: run the fake node-side driver.

Plays NVIDIA's compute-domain kubelet plugin and IMEX daemons for every kwok node of the
cluster until SIGTERM or SIGINT. See docs/simulator.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence

from computedomain.api import constants as c
from computedomain.observability.logging import configure_logging
from computedomain.runtime.client import load_client

from .context import DEFAULT_DRIVER_NAMESPACE, SimSettings
from .faults import DEFAULT_FAIL_START_MESSAGE, DelayRange, FaultSettings, parse_node_list
from .ipam import DEFAULT_POD_CIDR
from .simulator import Simulator

log = logging.getLogger("computedomain.sim")


def _delay(text: str) -> DelayRange:
    try:
        return DelayRange.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a probability in [0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="computedomain-sim",
        description="Play NVIDIA's compute-domain kubelet plugin and IMEX daemons on kwok nodes.",
    )
    parser.add_argument(
        "--kubeconfig", default=env("KUBECONFIG"), help="kubeconfig (env KUBECONFIG)"
    )
    parser.add_argument(
        "--driver-namespace",
        default=env("NAMESPACE", DEFAULT_DRIVER_NAMESPACE),
        help="namespace of the daemon pods and cliques (env NAMESPACE; default %(default)s)",
    )
    parser.add_argument(
        "--pod-cidr", default=DEFAULT_POD_CIDR, help="pod IPs to hand out (%(default)s)"
    )
    parser.add_argument(
        "--qps", type=float, default=50.0, help="client request rate (%(default)s/s)"
    )
    parser.add_argument("--burst", type=int, default=100, help="client burst (%(default)s)")
    parser.add_argument(
        "--max-concurrent-writes", type=int, default=16, help="API writes in flight (%(default)s)"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for delays and faults")
    parser.add_argument("--all-nodes", action="store_true", help="act on non-kwok nodes too")
    parser.add_argument(
        "--imex-mode",
        choices=c.IMEX_MODES,
        default=env("IMEX_MODE", c.IMEX_MODE_DRIVER),
        help="driverManaged: wait for IMEX daemons and cliques; hostManaged: the host's IMEX "
        "is taken as healthy, workload pods start once their claim is allocated "
        "(env IMEX_MODE; default %(default)s)",
    )

    faults = parser.add_argument_group("delays and faults")
    faults.add_argument(
        "--daemon-delay",
        type=_delay,
        default=DelayRange(0.5, 3.0),
        help="IMEX start-up time, fixed or a range (e.g. 2s, 0.5-3s; default %(default)s)",
    )
    faults.add_argument(
        "--never-ready-nodes",
        type=parse_node_list,
        default=frozenset(),
        help="comma-separated nodes whose daemon never turns Ready",
    )
    faults.add_argument(
        "--never-ready-probability",
        type=_probability,
        default=0.0,
        help="chance that any other daemon never turns Ready",
    )
    faults.add_argument(
        "--fail-start-nodes",
        type=parse_node_list,
        default=frozenset(),
        help="nodes whose daemon container exits at start and crash-loops without joining",
    )
    faults.add_argument(
        "--fail-start-probability",
        type=_probability,
        default=0.0,
        help="chance that any other daemon fails at start",
    )
    faults.add_argument(
        "--fail-start-message",
        default=DEFAULT_FAIL_START_MESSAGE,
        help="termination message of a daemon that fails at start (default: %(default)s)",
    )
    faults.add_argument(
        "--crash-nodes",
        type=parse_node_list,
        default=frozenset(),
        help="nodes whose daemon crashes once and restarts with a new IP",
    )
    faults.add_argument(
        "--crash-probability",
        type=_probability,
        default=0.0,
        help="chance that any other daemon crashes once",
    )
    faults.add_argument(
        "--crash-after",
        type=_delay,
        default=DelayRange(5.0, 30.0),
        help="time from Ready to the crash (default %(default)s)",
    )
    faults.add_argument(
        "--restart-delay",
        type=_delay,
        default=DelayRange(1.0, 1.0),
        help="time in CrashLoopBackOff before the restart (default %(default)s)",
    )
    faults.add_argument(
        "--node-not-ready-nodes",
        type=parse_node_list,
        default=frozenset(),
        help="nodes turned NotReady (kwok chaos label) after their daemon is Ready",
    )
    faults.add_argument("--node-not-ready-probability", type=_probability, default=0.0)
    faults.add_argument(
        "--node-delete-nodes",
        type=parse_node_list,
        default=frozenset(),
        help="nodes deleted after their daemon is Ready",
    )
    faults.add_argument("--node-delete-probability", type=_probability, default=0.0)
    faults.add_argument(
        "--node-fault-after",
        type=_delay,
        default=DelayRange(5.0, 30.0),
        help="time from a node's daemon Ready to its node fault (default %(default)s)",
    )

    parser.add_argument("--log-format", choices=("json", "text"), default=env("LOG_FORMAT", "text"))
    parser.add_argument("-v", "--verbosity", type=int, default=0, help="log verbosity (klog-style)")
    return parser


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    faults = FaultSettings(
        daemon_delay=args.daemon_delay,
        never_ready_nodes=args.never_ready_nodes,
        never_ready_probability=args.never_ready_probability,
        fail_start_nodes=args.fail_start_nodes,
        fail_start_probability=args.fail_start_probability,
        fail_start_message=args.fail_start_message,
        crash_nodes=args.crash_nodes,
        crash_probability=args.crash_probability,
        crash_after=args.crash_after,
        restart_delay=args.restart_delay,
        node_not_ready_nodes=args.node_not_ready_nodes,
        node_not_ready_probability=args.node_not_ready_probability,
        node_delete_nodes=args.node_delete_nodes,
        node_delete_probability=args.node_delete_probability,
        node_fault_after=args.node_fault_after,
    )
    return SimSettings(
        driver_namespace=args.driver_namespace,
        pod_cidr=args.pod_cidr,
        faults=faults,
        max_concurrent_writes=args.max_concurrent_writes,
        only_kwok_nodes=not args.all_nodes,
        seed=args.seed,
        imex_mode=args.imex_mode,
    )


async def serve(args: argparse.Namespace) -> None:
    client = await load_client(
        args.kubeconfig, args.qps, args.burst, field_manager="computedomain-sim"
    )
    simulator = Simulator(client, settings_from_args(args))
    task = asyncio.create_task(simulator.run())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await client.close()
        log.info("Simulator stopped")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(log_format=args.log_format, verbosity=args.verbosity)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
