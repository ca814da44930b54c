"""Plays kubelet for one controller pod on the local control plane.

kwok marks pods Running but runs nothing, so a Deployment installed by Helm or kustomize would
never run our controller here. This runs the pod's container as a local process instead: the
environment resolved from the pod spec (values and fieldRefs, as the kubelet does), the
credentials of the pod's ServiceAccount (a TokenRequest token, so every write is attributed to
that identity), and SIGTERM when the pod is deleted. Only the listeners move: the pod's
`HTTP_ENDPOINT` and `PROBE_ADDRESS` become free loopback ports, because every pod shares this
host's network. The container image itself is built and run by hack/image.sh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.watching import watch_object
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import PODS

# The image's ENTRYPOINT, from this environment.
CONTROLLER_COMMAND: tuple[str, ...] = (
    str(Path(sys.executable).with_name("computedomain-controller")),
)
# Listener settings rewritten to loopback ports (the pod network is the host's here).
LISTENERS = ("HTTP_ENDPOINT", "PROBE_ADDRESS")
FIELD_PATHS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.uid": ("metadata", "uid"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.podIP": ("status", "podIP"),
}


class PodRunError(RuntimeError):
    """The pod asks for something this stand-in kubelet cannot provide."""


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (values and fieldRefs)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = str(item["value"])
            continue
        ref = (item.get("valueFrom") or {}).get("fieldRef") or {}
        path = FIELD_PATHS.get(ref.get("fieldPath", ""))
        if path is None:
            raise PodRunError(f"env {name}: only values and fieldRefs are supported, got {item}")
        env[name] = str((pod.get(path[0]) or {}).get(path[1], ""))
    return env


@dataclass
class LocalPod:
    namespace: str
    name: str
    process: asyncio.subprocess.Process
    env: dict[str, str]
    log_path: Path
    _follower: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def metrics_url(self) -> str | None:
        address = self.env.get("HTTP_ENDPOINT")
        path = self.env.get("METRICS_PATH", "/metrics")
        return f"http://{address}{path}" if address else None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait(self) -> int:
        return await self.process.wait()

    async def stop(self, grace: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` (the pod's termination grace period)."""
        if self._follower is not None:
            self._follower.cancel()
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await self.process.wait()
            except TimeoutError:
                self.process.kill()
        return await self.process.wait()


async def run_pod(
    admin: ApiClient,
    cp: ControlPlane,
    pod: Mapping[str, Any],
    workdir: Path,
    *,
    container: str | None = None,
    command: Sequence[str] = CONTROLLER_COMMAND,
) -> LocalPod:
    """Start the pod's container (the first one, or ``container``) as a local process that is
    sent SIGTERM once the pod is deleted."""
    meta = pod["metadata"]
    spec = pod["spec"]
    containers = spec["containers"]
    chosen = next((c for c in containers if c["name"] == container), None) if container else None
    chosen = chosen or containers[0]
    env = resolve_env(pod, chosen)
    for name in LISTENERS:
        if env.get(name):
            env[name] = f"127.0.0.1:{free_port()}"
    account = spec.get("serviceAccountName") or "default"
    token = await request_service_account_token(admin, meta["namespace"], account)
    env["KUBECONFIG"] = str(_write_kubeconfig(workdir, meta["name"], cp, token))
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    log_path = workdir / f"{meta['name']}.log"
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *command,
            *(chosen.get("args") or []),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env={**base, **env},
        )
    local = LocalPod(meta["namespace"], meta["name"], process, env, log_path)
    kube = KubeClient.from_api_client(admin, field_manager="podrunner")
    local._follower = asyncio.create_task(_terminate_when_deleted(kube, local))
    return local


def _write_kubeconfig(workdir: Path, pod_name: str, cp: ControlPlane, token: str) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    return token_kubeconfig(workdir / f"{pod_name}.kubeconfig", cp.server, cp.ca_file, token)


async def _terminate_when_deleted(kube: KubeClient, local: LocalPod) -> None:
    def deleted(pod: dict[str, Any] | None) -> bool:
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    with contextlib.suppress(asyncio.CancelledError):
        await watch_object(
            kube, PODS, local.name, deleted, namespace=local.namespace, within=24 * 3600
        )
        if local.process.returncode is None:
            local.process.send_signal(signal.SIGTERM)
