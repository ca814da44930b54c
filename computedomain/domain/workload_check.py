"""A CD's workload pods, looked at only while the CD waits for them (``workload`` decides).

The design, for cost: the controller watches no workload pod. Workload pods carry no label of
their CD (only ``spec.resourceClaims`` names its template), so a watch would have to be of every
pod in the cluster: every pod's churn in the leader's memory and CPU, for the rare CD that
waits. Instead a CD that has waited for its workload longer than ``WORKLOAD_START_GRACE_PERIOD``
(counted by this process, from its first reconcile that saw it waiting) gets one LIST of the
``Pending`` pods of its own namespace (a field selector; ``resourceVersion=0``, so the
apiserver answers from its watch cache, not etcd), at most once per
``WORKLOAD_POD_CHECK_INTERVAL`` per CD: again after that interval while it finds stuck pods
(the condition follows them), when the youngest Pending pod of the template outlives the grace
period if there is one, and otherwise after an interval that doubles up to
``IDLE_BACKOFF_FACTOR`` times (an idle CD created ahead of its job costs one LIST per 8 minutes
by default). A CD that has daemons never costs a LIST. The RBAC is the ClusterRole's pods
``list``, granted already for NVIDIA's controller pods and kubelet plugin.
"""

from __future__ import annotations

import logging

from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain.context import ReconcileContext
from computedomain.domain.workload import WorkloadPodProblem, WorkloadScan, scan_workload_pods
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import PODS

log = logging.getLogger(__name__)

# While a LIST finds none of the CD's workload pods, the next waits twice as long, up to this
# many check intervals.
IDLE_BACKOFF_FACTOR = 8
PENDING = "status.phase=Pending"


class WorkloadCheck:
    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx

    async def look(
        self, cd: ComputeDomain, waiting: bool
    ) -> tuple[tuple[WorkloadPodProblem, ...], float | None]:
        """The CD's workload pods that have not started, as last seen, and in how many seconds
        to look again (None: not waiting, nothing to look at). ``waiting``: the CD's Ready
        would say ``WaitingForWorkload`` (``conditions.waits_for_workload``)."""
        ctx = self._ctx
        memory = ctx.memory_of(cd.metadata.uid).workload_check
        if not waiting or cd.spec is None:
            memory.workload_check_at = None
            memory.workload_idle_interval = None
            memory.workload_problems = ()
            return (), None
        now = ctx.clock.now()
        if memory.workload_check_at is None:
            memory.workload_check_at = now + ctx.settings.workload_start_grace_period
        wait = memory.workload_check_at - now
        if wait > 0:
            return memory.workload_problems, wait
        interval = ctx.settings.workload_pod_check_interval
        scan = await self._scan(cd, cd.spec.channel.resource_claim_template.name)
        if scan is None:  # the LIST failed: keep what was seen, try again later
            after = interval
        elif scan.problems or scan.due is not None:
            memory.workload_problems = scan.problems
            memory.workload_idle_interval = None
            after = interval if scan.problems else max(interval, scan.due or 0.0)
        else:
            memory.workload_problems = ()
            after = memory.workload_idle_interval or interval
            memory.workload_idle_interval = min(after * 2, interval * IDLE_BACKOFF_FACTOR)
        memory.workload_check_at = now + after
        return memory.workload_problems, after

    async def _scan(self, cd: ComputeDomain, template: str) -> WorkloadScan | None:
        """One LIST of the Pending pods of the CD's namespace, read for ``template``'s pods;
        None when it failed (logged: a 403 is missing RBAC, counted in rest_client_requests)."""
        ctx = self._ctx
        try:
            listed = await ctx.client.list(
                PODS, namespace=cd.metadata.namespace, field_selector=PENDING, resource_version="0"
            )
        except ApiError as err:
            log.warning(
                "Could not list the Pending pods of a ComputeDomain waiting for its workload",
                extra={
                    "computeDomain": f"{cd.metadata.namespace}/{cd.metadata.name}",
                    "err": str(err),
                },
            )
            return None
        grace = ctx.settings.workload_start_grace_period
        return scan_workload_pods(listed.get("items") or [], template, ctx.clock.wall(), grace)
