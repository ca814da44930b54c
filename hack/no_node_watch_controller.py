"""The controller whose Node informers select nothing, for ``hack/bench.py``'s idle CPU split
(Node heartbeats against the rest). A measuring instrument only: it cannot tell lost nodes."""

from __future__ import annotations

import asyncio
import os
import signal

from computedomain.app import ControllerProcess, run_controller
from computedomain.config import parse_settings
from computedomain.observability.logging import configure_logging


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def ready(process: ControllerProcess) -> None:
        for informer in (process.caches.nodes, process.caches.labelled_nodes):
            informer.label_selector = "bench.computedomain.dev/no-node-watch"

    configure_logging(log_format="text", verbosity=0)
    await run_controller(parse_settings([], dict(os.environ)), stop, on_ready=ready)


if __name__ == "__main__":
    asyncio.run(main())
