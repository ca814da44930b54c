"""The `computedomain-controller` console script (also installed as NVIDIA's name,
`compute-domain-controller`, so NVIDIA's Deployment command runs it unchanged)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from computedomain.config import ConfigError, Settings, parse_settings
from computedomain.runtime.credentials import ResolverRun

log = logging.getLogger("computedomain")

EXIT_CONFIG = 2
EXIT_LEADERSHIP_LOST = 3
EXIT_STARTUP = 1


async def _main(settings: Settings, resolver: ResolverRun) -> int:
    # Imported here: `--help` and configuration errors answer without loading the client stack.
    from computedomain.app import run_controller
    from computedomain.runtime.errors import StartupError
    from computedomain.runtime.leaderelection import LeadershipLost

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    code = 0
    try:
        await run_controller(settings, stop, resolver=resolver)
    except* LeadershipLost:
        # Exit at once: a restart gets a clean cache, and the new leader owns all writes.
        log.error("Lost leadership, exiting")
        code = EXIT_LEADERSHIP_LOST
    except* StartupError as group:
        for err in group.exceptions:
            print(f"computedomain-controller: {err}", file=sys.stderr)
        code = EXIT_STARTUP
    finally:
        resolver.close()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(argv)
    except ConfigError as err:
        print(f"computedomain-controller: {err}", file=sys.stderr)
        return EXIT_CONFIG
    # First, so the child's imports (kubernetes-asyncio, ~0.6-1 s) overlap ours: everything
    # heavier than the settings (aiohttp, prometheus-client, the app) is imported after it.
    resolver = ResolverRun(settings.kubeconfig)
    from prometheus_client import disable_created_metrics

    from computedomain.observability.logging import configure_logging

    # Go controllers expose no *_created series; dashboards and alerts expect the same.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    configure_logging(log_format=settings.log_format, verbosity=settings.log_verbosity)  # type: ignore[arg-type]
    log.info(
        "Starting",
        extra={
            "driverNamespace": settings.driver_namespace,
            "managedNamespaces": list(settings.managed_namespaces),
            "imexMode": settings.reconciler.imex_mode,
            "featureGates": dict(settings.daemon.feature_gates),
            "leaderElection": settings.leader_election,
        },
    )
    for notice in settings.notices:  # NVIDIA's flags and gates that do nothing here, once
        log.info("Ignored: %s", notice)
    return asyncio.run(_main(settings, resolver))


if __name__ == "__main__":
    sys.exit(main())
