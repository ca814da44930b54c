"""Plays kubelet for one controller pod on the local control plane.

kwok marks pods Running but runs nothing, so a Deployment installed by Helm or kustomize would
never run our controller here. This runs the pod's container as a local process instead: the
environment resolved from the pod spec (values and fieldRefs, as the kubelet does), the
credentials of the pod's ServiceAccount (a TokenRequest token, so every write is attributed to
that identity), and SIGTERM when the pod is deleted. Only the listeners move: the pod's
`HTTP_ENDPOINT` and `PROBE_ADDRESS` become free loopback ports, because every pod shares this
host's network. Like a kubelet, it keeps a deleted pod (a finalizer) until the process has
exited, so `kubectl wait --for=delete pod` means what it means on a real node. The container
image itself is built and run by hack/image.sh.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.runtime import patches
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import PODS

# The image's ENTRYPOINT, from this environment.
RUNNING_FINALIZER = "podrunner.computedomain.dev/running"
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


# The argv a container runs, before ``$(VAR)`` expansion: what stands for its image here.
Entrypoint = Callable[[Mapping[str, Any]], Sequence[str]]


def controller_entrypoint(container: Mapping[str, Any]) -> list[str]:
    """Our image: its ENTRYPOINT (our controller, from this environment) and the container's
    args."""
    return [*CONTROLLER_COMMAND, *(container.get("args") or [])]


def expand(argument: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of a command argument."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), argument)


def pod_container(pod: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    """The container called ``name``, else the pod's first (as ``kubectl exec`` picks one)."""
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == name), containers[0])


class PodRunError(RuntimeError):
    """The pod asks for something this stand-in kubelet cannot provide."""


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (values and fieldRefs)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            # The apiserver drops an empty value: `value: ""` comes back as no value at all.
            env[name] = str(item.get("value") or "")
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
        code = await terminate(self.process, grace)
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)
        return code


async def terminate(process: asyncio.subprocess.Process, grace: float) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await process.wait()
        except TimeoutError:
            process.kill()
    return await process.wait()


async def run_pod(
    admin: ApiClient,
    cp: ControlPlane,
    pod: Mapping[str, Any],
    workdir: Path,
    *,
    container: str | None = None,
    entrypoint: Entrypoint = controller_entrypoint,
    bind_token: bool = False,
) -> LocalPod:
    """Start the pod's container (the first one, or ``container``) as a local process that is
    sent SIGTERM once the pod is deleted; ``entrypoint`` says what runs for its image. With
    ``bind_token`` its token is bound to the pod (as a kubelet's projected token), so the audit
    log names the pod of each request."""
    meta = pod["metadata"]
    spec = pod["spec"]
    chosen = pod_container(pod, container)
    env = resolve_env(pod, chosen)
    for name in LISTENERS:
        if env.get(name):
            env[name] = f"127.0.0.1:{free_port()}"
    account = spec.get("serviceAccountName") or "default"
    bound = (meta["name"], meta["uid"]) if bind_token else None
    token = await request_service_account_token(admin, meta["namespace"], account, pod=bound)
    env["KUBECONFIG"] = str(_write_kubeconfig(workdir, meta["name"], cp, token))
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    log_path = workdir / f"{meta['name']}.log"
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *(expand(arg, env) for arg in entrypoint(chosen)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env={**base, **env},
        )
    local = LocalPod(meta["namespace"], meta["name"], process, env, log_path)
    kube = KubeClient.from_api_client(admin, field_manager="podrunner")
    finalizer = patches.add_finalizer(pod, RUNNING_FINALIZER, guard_rv=False)
    if finalizer is not None:
        await kube.patch(PODS, meta["name"], finalizer, meta["namespace"], patch_type="json")
    local._follower = asyncio.create_task(_terminate_when_deleted(kube, local))
    return local


def _write_kubeconfig(workdir: Path, pod_name: str, cp: ControlPlane, token: str) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    return token_kubeconfig(workdir / f"{pod_name}.kubeconfig", cp.server, cp.ca_file, token)


async def _terminate_when_deleted(kube: KubeClient, local: LocalPod) -> None:
    def deleted(pod: dict[str, Any] | None) -> bool:
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    try:
        await watch_object(
            kube, PODS, local.name, deleted, namespace=local.namespace, within=24 * 3600
        )
        await terminate(local.process, grace=30.0)
    finally:
        await _release(kube, local)


async def _release(kube: KubeClient, local: LocalPod) -> None:
    """Drop our finalizer: the container has exited, the pod may go."""
    try:
        pod = await kube.get(PODS, local.name, local.namespace)
    except ApiError as err:
        if err.is_not_found:
            return
        raise
    patch = patches.remove_finalizer(pod, RUNNING_FINALIZER)
    if patch is not None:
        with contextlib.suppress(ApiError):
            await kube.patch(PODS, local.name, patch, local.namespace, patch_type="json")


class Kubelet:
    """Runs every pod matching a label selector in a namespace as it appears (see run_pod)."""

    def __init__(
        self,
        admin: ApiClient,
        cp: ControlPlane,
        namespace: str,
        selector: str,
        workdir: Path,
        *,
        bind_tokens: bool = False,
        entrypoint: Entrypoint = controller_entrypoint,
    ) -> None:
        self.admin = admin
        self.bind_tokens = bind_tokens
        self.entrypoint = entrypoint
        self.cp = cp
        self.namespace = namespace
        self.selector = selector
        self.workdir = workdir
        self.pods: dict[str, LocalPod] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        kube = KubeClient.from_api_client(self.admin, field_manager="podrunner")

        def startable(pods: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
            fresh = [
                pod
                for name, pod in pods.items()
                if name not in self.pods
                and pod["spec"].get("nodeName")
                and not pod["metadata"].get("deletionTimestamp")
            ]
            return fresh or None

        while True:
            fresh: list[dict[str, Any]] = await watch_objects(
                kube,
                PODS,
                startable,
                namespace=self.namespace,
                label_selector=self.selector,
                within=24 * 3600,
                what=f"pods {self.selector} to run",
            )
            for pod in fresh:
                self.pods[pod["metadata"]["name"]] = await run_pod(
                    self.admin,
                    self.cp,
                    pod,
                    self.workdir,
                    entrypoint=self.entrypoint,
                    bind_token=self.bind_tokens,
                )

    def running(self) -> list[LocalPod]:
        return [pod for pod in self.pods.values() if pod.process.returncode is None]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*(pod.stop() for pod in self.pods.values()))
