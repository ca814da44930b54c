"""The controller process of the soak (``hack/soak.py``): our controller, reached through the
fault proxy, and a line protocol through which the soak asks what its caches say unlike the
apiserver. It imports no more than the controller does, so its RSS is the controller's.

    python hack/soak_controller.py PROXIED DIRECT DRIVER_NAMESPACE [NAME=VALUE ...]

Prints "built" once the controller runs; then for each "check" line on stdin, one JSON line:
its informers' differences from a fresh LIST made directly (after they are synced). Ends at EOF.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from computedomain.devcluster.convergence import caches_differences
from computedomain.devcluster.harness import start_controller
from computedomain.runtime.client import load_client


async def serve_controller(
    proxied: Path, direct: Path, driver_namespace: str, env: Mapping[str, str]
) -> None:
    running = await start_controller(proxied, driver_namespace, env, wait_synced=None)
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
    await running.shutdown()
    await kube.close()


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    proxied_kubeconfig, direct_kubeconfig, namespace, *pairs = sys.argv[1:]
    overrides = dict(pair.split("=", 1) for pair in pairs)
    os.environ.pop("KUBECONFIG", None)  # the one given is the proxied one, not the caller's
    asyncio.run(
        serve_controller(Path(proxied_kubeconfig), Path(direct_kubeconfig), namespace, overrides)
    )
