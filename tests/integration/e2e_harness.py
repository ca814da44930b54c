"""End-to-end helpers: our controller and the fleet simulator together on the real control plane.

Workloads are StatefulSets of pods that consume the CD's channel ResourceClaimTemplate, pinned to
fleet racks by the simulation's rack label. Waiting is list+watch, never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.harness import Controllers, RunningController
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.devcluster.workloads import STATEFULSETS as STATEFULSETS
from computedomain.devcluster.workloads import WORKLOAD_LABEL as WORKLOAD_LABEL
from computedomain.devcluster.workloads import workload as workload
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import condition_true
from computedomain.runtime.objects import pod_ready as pod_ready
from computedomain.runtime.resources import Resource
from computedomain.sim.context import SimSettings
from computedomain.sim.daemon import FakeImexDaemon
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import DaemonFactory, Simulator, WorkloadKubeletFactory
from tests.kit.controllers import controllers_for, create_cd

FAST_DAEMONS = DelayRange(0.1, 0.5)


def status_nodes(cd: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in ((cd or {}).get("status") or {}).get("nodes") or []}


def cd_ready(cd: Mapping[str, Any] | None) -> bool:
    """The CD's Ready condition is True."""
    return condition_true(cd, "Ready")


def pod_running(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("status") or {}).get("phase") == "Running")


@dataclass
class EndToEnd:
    """One test's world: its namespace, the driver namespace, a controller and a simulator."""

    kube: KubeClient
    namespace: str
    driver_namespace: str
    controllers: Controllers
    simulator_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    uids: set[str] = field(default_factory=set)

    async def start_controller(self, **env: str) -> RunningController:
        return await self.controllers.start(**env)

    async def start_simulator(
        self,
        faults: FaultSettings | None = None,
        imex_mode: str = c.IMEX_MODE_DRIVER,
        daemon_factory: DaemonFactory = FakeImexDaemon,
        workload_kubelet: WorkloadKubeletFactory | None = None,
    ) -> Simulator:
        settings = SimSettings(
            driver_namespace=self.driver_namespace,
            faults=faults or FaultSettings(daemon_delay=FAST_DAEMONS),
            seed=7,
            imex_mode=imex_mode,
        )
        simulator = Simulator(
            self.kube, settings, daemon_factory=daemon_factory, workload_kubelet=workload_kubelet
        )
        task = asyncio.create_task(simulator.run(), name="e2e-simulator")
        self.simulator_tasks.append(task)
        ready = asyncio.create_task(simulator.wait_ready())
        done, _ = await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            ready.cancel()
            task.result()
        return simulator

    async def create_cd(
        self, name: str, rct_name: str = "imex-channel-0", num_nodes: int = 0
    ) -> dict[str, Any]:
        cd = await create_cd(self.kube, self.namespace, name, rct_name, num_nodes)
        self.uids.add(cd["metadata"]["uid"])
        return cd

    async def run_workload(self, body: dict[str, Any]) -> None:
        await self.kube.create(STATEFULSETS, body, self.namespace)

    async def scale(self, name: str, replicas: int) -> None:
        await self.kube.patch(STATEFULSETS, name, {"spec": {"replicas": replicas}}, self.namespace)

    # -- waiting ----------------------------------------------------------------------------

    async def cd_until(
        self,
        name: str,
        predicate: Callable[[dict[str, Any] | None], bool],
        what: str,
        within: float = 90.0,
    ) -> dict[str, Any] | None:
        def check(objects: Objects) -> Any:
            obj = objects.get(name)
            return (obj or {"gone": True}) if predicate(obj) else None

        found = await watch_objects(
            self.kube,
            COMPUTE_DOMAINS,
            check,
            namespace=self.namespace,
            field_selector=f"metadata.name={name}",
            within=within,
            what=f"ComputeDomain {name}: {what}",
        )
        return None if found.get("gone") is True else dict(found)

    async def workload_pods(
        self, name: str, predicate: Callable[[Objects], bool], what: str, within: float = 90.0
    ) -> Objects:
        def check(pods: Objects) -> Objects | None:
            return dict(pods) if predicate(pods) else None

        result: Objects = await watch_objects(
            self.kube,
            r.PODS,
            check,
            namespace=self.namespace,
            label_selector=f"{WORKLOAD_LABEL}={name}",
            within=within,
            what=f"pods of {name}: {what}",
        )
        return result

    async def pods_gone(self, within: float = 90.0) -> None:
        """No pod is left in the test namespace (its workloads deleted and drained)."""
        await watch_objects(
            self.kube,
            r.PODS,
            lambda pods: not pods,
            namespace=self.namespace,
            within=within,
            what="workload pods gone",
        )

    async def daemon_pods_gone(self, uid: str, within: float = 60.0) -> None:
        """No IMEX daemon pod of the domain with this UID is left."""
        await watch_objects(
            self.kube,
            r.PODS,
            lambda pods: not pods,
            namespace=self.driver_namespace,
            label_selector=f"{c.CD_LABEL}={uid}",
            within=within,
            what=f"daemon pods of {uid} gone",
        )

    async def nodes_labelled(
        self, uid: str, predicate: Callable[[set[str]], bool], what: str
    ) -> set[str]:
        def check(nodes: Objects) -> set[str] | None:
            names = set(nodes)
            return (names or {"<none>"}) if predicate(names) else None

        found: set[str] = await watch_objects(
            self.kube,
            r.NODES,
            check,
            label_selector=f"{c.CD_LABEL}={uid}",
            within=60,
            what=f"nodes labelled for {uid}: {what}",
        )
        return found - {"<none>"}

    async def cliques_of(
        self, uid: str, predicate: Callable[[Objects], bool], what: str
    ) -> Objects:
        def check(cliques: Objects) -> Objects | None:
            return (dict(cliques) or {"<none>": {}}) if predicate(cliques) else None

        found: Objects = await watch_objects(
            self.kube,
            CLIQUES,
            check,
            namespace=self.driver_namespace,
            label_selector=f"{c.CD_LABEL}={uid}",
            within=60,
            what=f"cliques of {uid}: {what}",
        )
        found.pop("<none>", None)
        return found

    async def events_for(
        self, name: str, predicate: Callable[[list[dict[str, Any]]], bool], what: str
    ) -> list[dict[str, Any]]:
        def check(events: Objects) -> list[dict[str, Any]] | None:
            mine = [e for e in events.values() if (e.get("regarding") or {}).get("name") == name]
            return (mine or [{}]) if predicate(mine) else None

        found: list[dict[str, Any]] = await watch_objects(
            self.kube,
            r.EVENTS,
            check,
            namespace=self.namespace,
            within=60,
            what=f"events of {name}: {what}",
        )
        return found

    # -- teardown ---------------------------------------------------------------------------

    async def clean_up(self) -> None:
        """Workloads first, then CDs (finalized by the still-running controller), then the
        controller and simulator: later tests must find the shared fleet's nodes clean."""
        try:
            workloads = await self.kube.list(STATEFULSETS, self.namespace)
            for sts in workloads["items"]:
                await _delete(self.kube, STATEFULSETS, sts["metadata"]["name"], self.namespace)
            await self.pods_gone()
            cds = await self.kube.list(COMPUTE_DOMAINS, self.namespace)
            for cd in cds["items"]:
                self.uids.add(cd["metadata"]["uid"])
                await _delete(self.kube, COMPUTE_DOMAINS, cd["metadata"]["name"], self.namespace)
            await watch_objects(
                self.kube,
                COMPUTE_DOMAINS,
                lambda items: not items,
                namespace=self.namespace,
                within=90,
                what="ComputeDomains finalized",
            )
            for uid in self.uids:
                await self.nodes_labelled(uid, lambda names: not names, "labels removed")
        finally:
            await self.controllers.stop_all()
            for task in self.simulator_tasks:
                task.cancel()
            await asyncio.gather(*self.simulator_tasks, return_exceptions=True)


async def _delete(kube: KubeClient, res: Resource, name: str, namespace: str) -> None:
    try:
        await kube.delete(res, name, namespace, propagation_policy="Background")
    except ApiError as err:
        if not err.is_not_found:
            raise


@contextlib.asynccontextmanager
async def end_to_end(
    kube: KubeClient, kubeconfig: Path, namespace: str, driver_namespace: str
) -> AsyncIterator[EndToEnd]:
    env = EndToEnd(kube, namespace, driver_namespace, controllers_for(kubeconfig, driver_namespace))
    try:
        yield env
    finally:
        await env.clean_up()
