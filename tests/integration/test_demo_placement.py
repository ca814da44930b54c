"""The demo's placement step (``hack/demo.sh``, computedomain.devcluster.demo.show_placement) on
the real control plane: the apiserver calls our controller's webhook over TLS, the scheduler
places the pods on the simulated fleet. One clique is filled up to 2 free nodes by a job the
webhook does not place; the 6 pods of a job whose ComputeDomain is annotated for placement
must all land in one other clique, the one recorded on the CD, and ``kubectl cdom cliques``
(its table's rows) must agree.
"""

from __future__ import annotations

import time

import pytest

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.demo import (
    JOB_SIZE,
    PLACED_JOB,
    ROOM_LEFT,
    nodes_held,
    show_placement,
)
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configured,
    webhook_environ,
)
from computedomain.domain.capacity import clique_capacity
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import NODES
from tests.integration.e2e_harness import EndToEnd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def test_the_demos_job_lands_in_one_clique_with_room_beside_a_nearly_full_one(
    e2e: EndToEnd, kube: KubeClient, namespace: str
) -> None:
    started = time.monotonic()
    configuration = f"demo-placement-{namespace}"
    async with webhook_configured(kube, configuration, namespace) as port:
        await e2e.start_simulator()
        await e2e.start_controller(**webhook_environ(port, configuration))
        await ca_bundle_written(kube, configuration)

        shown = await show_placement(kube, namespace, within=120)

        assert shown.room_left == ROOM_LEFT < JOB_SIZE
        assert len(shown.landed) == JOB_SIZE
        cliques = set(shown.landed.values())
        assert cliques == {shown.recorded}, shown
        assert shown.nearly_full not in cliques, shown
        # What `kubectl cdom cliques` prints, computed as it does: the job's nodes in that clique.
        job = await kube.get(COMPUTE_DOMAINS, PLACED_JOB, namespace)
        await nodes_held(kube, job["metadata"]["uid"], JOB_SIZE, 60, f"{PLACED_JOB} holds")
        rows = clique_capacity(
            (await kube.list(NODES))["items"],
            (await kube.list(COMPUTE_DOMAINS, namespace))["items"],
        )
        held = {r.clique: r.domains.get(f"{namespace}/{PLACED_JOB}", 0) for r in rows}
        assert {k: v for k, v in held.items() if v} == {shown.recorded: JOB_SIZE}, held
        nearly_full = next(r for r in rows if r.clique == shown.nearly_full)
        assert nearly_full.free <= ROOM_LEFT, nearly_full.as_dict()
    print(f"demo placement step: {time.monotonic() - started:.1f}s")
