"""A stand-in kubelet for pods on nodes served by a real DRA kubelet plugin (NVIDIA's
``compute-domain-kubelet-plugin``), loopback only. What it does, as the kubelet does:

- registration: ``connect`` speaks to the plugin's registration socket (``dragrpc.register``)
  and keeps the DRA endpoint it announced;
- prepare: for a pod bound to the node, the pod's claims (``spec.resourceClaims`` resolved
  through ``status.resourceClaimStatuses``) allocated for the driver go to
  ``NodePrepareResources``; while that fails no container starts: the pod stays Pending with
  its containers waiting in ``ContainerCreating``, each new error is a Warning Event
  ``FailedPrepareDynamicResources`` ("Failed to prepare dynamic resources: ..."), and the call
  is retried with back-off;
- start: the returned CDI device IDs are resolved in the node's CDI directories
  (``cdi.Registry``) and their edits applied to the container process: the environment, the
  mounts bound, the device nodes as plain files (``<type> <major>:<minor>``: no real device
  exists here) bound at their paths, all inside the pod's private mount namespace
  (hack/upstream/run.sh --bind); then the pod is written Running and Ready as the simulator
  writes it;
- stop: the container ends (SIGTERM, SIGKILL after the grace period), then
  ``NodeUnprepareResources``, retried while it fails.

The container process is a stand-in (``WORKLOAD``): it records the environment and the files
the pod sees, then sleeps, because there is no image to run. CDI hooks are not run (logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from computedomain.api import constants as c
from computedomain.devcluster.cdi import CdiError, Injected, Registry, apply
from computedomain.devcluster.dragrpc import ClaimRef, DraCallError, DraClient, register
from computedomain.devcluster.podrunner import terminate
from computedomain.devcluster.upstream import UPSTREAM_RUN_SCRIPT
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import format_time
from computedomain.runtime.resources import PODS
from computedomain.sim.context import SimContext
from computedomain.sim.decisions import pod_claim_refs
from computedomain.sim.podstatus import (
    CONDITION_TYPES,
    ContainerPhase,
    PodState,
    node_internal_ip,
    pod_status,
)

log = logging.getLogger("computedomain.devcluster.drakubelet")

FAILED_PREPARE = "FailedPrepareDynamicResources"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"
# What the stand-in container runs: it writes what it sees to $DRA_KUBELET_OBSERVED, then waits.
WORKLOAD = """#!/bin/sh
set -u
{
  echo "pid $$"
  env | sort | sed 's/^/env /'
  for path in "$@"; do
    if [ -f "$path" ]; then echo "file $path $(cat "$path")"; \
    elif [ -d "$path" ]; then echo "dir $path"; else echo "missing $path"; fi
  done
} > "$DRA_KUBELET_OBSERVED.tmp"
mv "$DRA_KUBELET_OBSERVED.tmp" "$DRA_KUBELET_OBSERVED"
trap 'exit 0' TERM
while :; do sleep 1; done
"""


@dataclass
class NodePlugin:
    """One node's registered plugin: where to call it and where its CDI specs are."""

    node_name: str
    dra: DraClient
    cdi_dirs: Sequence[Path]


async def connect(
    node_name: str, registration_socket: Path, cdi_dirs: Sequence[Path]
) -> NodePlugin:
    """Register the plugin behind ``registration_socket`` as the node's kubelet does."""
    info, version = await register(registration_socket, c.DRIVER_NAME)
    log.info(
        "Registered DRA plugin",
        extra={"node": node_name, "endpoint": info.endpoint, "version": version},
    )
    return NodePlugin(node_name, DraClient(Path(info.endpoint), version), cdi_dirs)


def driver_claims(
    pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any] | None], driver: str
) -> list[ClaimRef] | str:
    """The pod's claims allocated for ``driver``, as the kubelet names them to the plugin; or
    why they cannot be named yet (a claim not created, unseen, or not allocated)."""
    namespace = str(pod["metadata"]["namespace"])
    refs = []
    for ref in pod_claim_refs(pod):
        if ref.claim_name is None:
            return f"claim {ref.pod_claim_name} not created yet"
        claim = claims.get(ref.claim_name)
        allocation = ((claim or {}).get("status") or {}).get("allocation")
        if claim is None or not allocation:
            return f"claim {ref.claim_name} not allocated yet"
        results = (allocation.get("devices") or {}).get("results") or []
        if any(result.get("driver") == driver for result in results):
            refs.append(ClaimRef(namespace, str(claim["metadata"]["uid"]), ref.claim_name))
    return refs


def pending_status(pod: Mapping[str, Any], host_ip: str, now: str) -> dict[str, Any]:
    """The status the kubelet reports while the pod's sandbox cannot be made yet: Pending,
    containers waiting in ContainerCreating, no pod IP."""
    spec = pod.get("spec") or {}
    old = pod.get("status") or {}
    names = [str(container.get("name", "")) for container in spec.get("containers") or []]
    unready = f"containers with unready status: [{' '.join(names)}]"
    previous = {str(x.get("type")): x for x in old.get("conditions") or []}
    wanted = {
        "PodReadyToStartContainers": ("False", "", ""),
        "Initialized": ("True", "", ""),
        "Ready": ("False", "ContainersNotReady", unready),
        "ContainersReady": ("False", "ContainersNotReady", unready),
        "PodScheduled": ("True", "", ""),
    }
    conditions = []
    for kind in CONDITION_TYPES:
        value, reason, message = wanted[kind]
        before = previous.get(kind) or {}
        condition: dict[str, Any] = {
            "type": kind,
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": before.get("lastTransitionTime", now)
            if before.get("status") == value
            else now,
        }
        if reason:
            condition.update(reason=reason, message=message)
        conditions.append(condition)
    return {
        "phase": "Pending",
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": str(container.get("name", "")),
                "image": container.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            for container in spec.get("containers") or []
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}] if host_ip else [],
        "startTime": old.get("startTime") or now,
        "qosClass": old.get("qosClass") or "BestEffort",
    }


@dataclass
class Container:
    """A started stand-in container of one pod."""

    pod_dir: Path
    process: asyncio.subprocess.Process
    injected: Injected

    @property
    def observed_path(self) -> Path:
        return self.pod_dir / "observed"

    def observed(self) -> dict[str, Any] | None:
        """What the process saw at its start: {"env": {...}, "files": {path: content|None}}."""
        if not self.observed_path.exists():
            return None
        env: dict[str, str] = {}
        files: dict[str, str | None] = {}
        for line in self.observed_path.read_text().splitlines():
            what, _, rest = line.partition(" ")
            if what == "env":
                name, _, value = rest.partition("=")
                env[name] = value
            elif what == "file":
                path, _, content = rest.partition(" ")
                files[path] = content
            elif what == "dir":
                files[rest] = ""
            elif what == "missing":
                files[rest] = None
        return {"env": env, "files": files}


@dataclass
class DraKubelet:
    """The kubelet's DRA and container part for the pods of the nodes in ``plugins``."""

    ctx: SimContext
    plugins: Mapping[str, NodePlugin]
    workdir: Path
    backoff: float = 1.0
    backoff_max: float = 10.0
    grace_period: float = 5.0
    containers: dict[str, Container] = field(default_factory=dict)
    prepared: dict[str, list[ClaimRef]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)

    def serves(self, node_name: str) -> bool:
        return node_name in self.plugins

    async def start(self, pod: dict[str, Any]) -> None:
        """Prepare the pod's claims (until it works), start its container, write it Running;
        returns once it runs. Cancel it to give up (the pod is gone)."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        injected = await self.prepare(pod)
        if injected is None:
            return  # the pod is gone
        current = self.ctx.pod(key) or pod
        self.containers[str(pod["metadata"]["uid"])] = await self._run_container(current, injected)
        await self._write_running(current)

    async def stop(self, pod: Mapping[str, Any]) -> None:
        """The pod is gone: end its container, then unprepare its claims (retried)."""
        uid = str(pod["metadata"].get("uid", ""))
        container = self.containers.pop(uid, None)
        if container is not None:
            await terminate(container.process, self.grace_period)
            _kill_group(container.process)
        await self.unprepare(pod)

    async def prepare(self, pod: Mapping[str, Any]) -> Injected | None:
        """Prepare the pod's claims with the node's plugin, retried (with Warning Events and a
        Pending status) until it works: the CDI edits for its container; None once the pod is
        gone. Any pod with claims of the driver: a workload's or an IMEX daemon's."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        plugin = self.plugins[pod["spec"]["nodeName"]]
        return await self._prepare(key, str(pod["metadata"]["uid"]), plugin)

    async def unprepare(self, pod: Mapping[str, Any]) -> None:
        """Unprepare what ``prepare`` prepared for the pod (its container has ended), retried."""
        uid = str(pod["metadata"].get("uid", ""))
        refs = self.prepared.pop(uid, None)
        if not refs:
            return
        plugin = self.plugins[pod["spec"]["nodeName"]]
        delay = self.backoff
        for _ in range(10):
            try:
                await plugin.dra.unprepare_pod(refs)
                return
            except DraCallError as error:
                log.warning("Unprepare failed; retrying", extra={"pod": uid, "err": str(error)})
                await self.ctx.report(
                    pod, "Warning", FAILED_UNPREPARE, f"Failed to unprepare: {error}", once=False
                )
            await self.ctx.clock.sleep(delay)
            delay = min(delay * 2, self.backoff_max)

    # -- prepare ------------------------------------------------------------------------

    async def _prepare(self, key: str, uid: str, plugin: NodePlugin) -> Injected | None:
        delay = self.backoff
        last_error = ""
        while True:
            pod = self.ctx.pod(key)
            if pod is None or pod["metadata"].get("uid") != uid:
                return None
            try:
                return await self._prepare_once(pod, plugin)
            except (DraCallError, CdiError) as error:
                message = f"Failed to prepare dynamic resources: {error}"
                self.failures.setdefault(uid, []).append(message)
                if message != last_error:  # the recorder folds repeats into one Event
                    log.info("Prepare failed; retrying", extra={"pod": key, "err": str(error)})
                    await self.ctx.report(pod, "Warning", FAILED_PREPARE, message, once=False)
                    await self._write_pending(pod)
                last_error = message
            await self.ctx.clock.sleep(delay)
            delay = min(delay * 2, self.backoff_max)

    async def _prepare_once(self, pod: dict[str, Any], plugin: NodePlugin) -> Injected:
        namespace = pod["metadata"]["namespace"]
        claims = {
            ref.claim_name: self.ctx.claim(namespace, ref.claim_name)
            for ref in pod_claim_refs(pod)
            if ref.claim_name
        }
        refs = driver_claims(pod, claims, c.DRIVER_NAME)
        if isinstance(refs, str):
            raise DraCallError(refs)
        uid = str(pod["metadata"]["uid"])
        results = await plugin.dra.prepare_pod(refs) if refs else {}
        self.prepared[uid] = refs
        device_ids = [
            device_id
            for ref in refs
            for device in results[ref.uid].devices
            for device_id in device.cdi_device_ids
        ]
        registry = Registry(plugin.cdi_dirs)
        try:
            edits = registry.resolve(device_ids)
        except CdiError as error:
            detail = f"; {'; '.join(registry.errors)}" if registry.errors else ""
            raise CdiError(f"CDI device injection failed: {error}{detail}") from error
        if edits.hooks:
            log.info("CDI hooks not run", extra={"hooks": [h.path for h in edits.hooks]})
        return apply(edits)

    # -- the container ------------------------------------------------------------------

    async def _run_container(self, pod: Mapping[str, Any], injected: Injected) -> Container:
        pod_dir = self.workdir / f"{pod['metadata']['namespace']}.{pod['metadata']['name']}"
        out = self.workdir / "container-image"
        for directory in (pod_dir / "devices", out / "bin", out / "templates"):
            directory.mkdir(parents=True, exist_ok=True)
        program = out / "bin" / "workload"
        program.write_text(WORKLOAD)
        program.chmod(0o755)
        binds = container_binds(injected, pod_dir / "devices")
        seen = [node.path for node in injected.device_nodes]
        seen += [mount.container_path for mount in injected.mounts]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **injected.env}
        env["DRA_KUBELET_OBSERVED"] = str(pod_dir / "observed")
        (pod_dir / "observed").unlink(missing_ok=True)
        with (pod_dir / "container.log").open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                "bash",
                str(UPSTREAM_RUN_SCRIPT),
                *binds,
                str(out / "bin"),
                "workload",
                *seen,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=pod_dir,
                start_new_session=True,
            )
        container = Container(pod_dir, process, injected)
        async with asyncio.timeout(30):
            while container.observed() is None:
                if process.returncode is not None:
                    text = (pod_dir / "container.log").read_text(errors="replace")
                    raise RuntimeError(f"container exited {process.returncode}: {text}")
                await asyncio.sleep(0.05)
        return container

    # -- status -------------------------------------------------------------------------

    async def _patch_status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(
                    PODS,
                    metadata["name"],
                    {"status": status},
                    metadata["namespace"],
                    subresource="status",
                )
            )
        except ApiError as error:
            if error.is_not_found:
                return
            raise
        self.ctx.observe("pods", updated)

    async def _write_pending(self, pod: Mapping[str, Any]) -> None:
        host_ip = node_internal_ip(self.ctx.node(pod["spec"]["nodeName"]))
        await self._patch_status(
            pod, pending_status(pod, host_ip, format_time(self.ctx.clock.wall()))
        )

    async def _write_running(self, pod: Mapping[str, Any]) -> None:
        uid = str(pod["metadata"]["uid"])
        ip = self.ctx.ipam.get(uid) or self.ctx.ipam.allocate(uid)
        state = PodState(
            pod_ip=ip,
            host_ip=node_internal_ip(self.ctx.node(pod["spec"]["nodeName"])),
            phase=ContainerPhase.READY,
        )
        await self._patch_status(pod, pod_status(pod, state, self.ctx.clock.wall()))


def container_binds(injected: Injected, devices_dir: Path) -> list[str]:
    """hack/upstream/run.sh's ``--bind`` arguments for the CDI edits: each mount bound, each
    device node a plain file (``<type> <major>:<minor>``) made in ``devices_dir`` and bound at
    its path (run.sh then gives the container a private /dev)."""
    devices_dir.mkdir(parents=True, exist_ok=True)
    binds: list[str] = []
    unbound = []
    for mount in injected.mounts:
        if _bindable(mount.container_path):
            binds += ["--bind", f"{mount.host_path}:{mount.container_path}"]
        else:
            unbound.append(mount.container_path)
    if unbound:
        # A runtime would make these mount points in the image's root; the container here
        # shares the host's root, where run.sh creates nothing (e.g. the driver's files that
        # NVIDIA's plugin mounts for its "all" device: /usr/bin/nvidia-smi, libraries).
        log.info("CDI mounts not bound: no such path here", extra={"paths": unbound})
    for index, node in enumerate(injected.device_nodes):
        plain = devices_dir / f"{index}-{Path(node.path).name}"
        # The spec omits a zero minor (omitempty): 0, as a runtime takes it.
        plain.write_text(f"{node.type or 'c'} {node.major}:{node.minor or 0}\n")
        binds += ["--bind", f"{plain}:{node.path}"]
    return binds


def _bindable(container_path: str) -> bool:
    """Whether run.sh can bind at ``container_path`` without creating anything on the host: it
    exists, or lies in a new top-level directory, under /run or under /dev."""
    path = Path(container_path)
    top = Path("/", *path.parts[1:2])
    return (
        path.exists()
        or not top.exists()
        or top.name in ("run", "dev")
        or (path.parts[1:3] == ("var", "run"))
    )


@dataclass
class SharedDraKubelet:
    """One DraKubelet per simulator context for ``plugins``: the simulator's
    ``workload_kubelet`` factory and the IMEX daemons' (``DaemonRuntime.kubelet``) at once,
    so both kinds of pods on a node go through the same stand-in kubelet."""

    plugins: Mapping[str, NodePlugin]
    workdir: Path
    backoff: float = 1.0
    made: dict[int, DraKubelet] = field(default_factory=dict)

    def __call__(self, ctx: SimContext) -> DraKubelet:
        kubelet = self.made.get(id(ctx))
        if kubelet is None or kubelet.ctx is not ctx:
            kubelet = DraKubelet(ctx, self.plugins, self.workdir, backoff=self.backoff)
            self.made[id(ctx)] = kubelet
        return kubelet


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
