"""The controller's API writes, counted on the real control plane (issue 10): a new CD costs at
most 6 (finalizer, 3 children, 1 status, 1 `Created` Event), and bringing up its daemons at
most 1.2 writes per daemon state change (each daemon joins NotReady, then turns Ready), Events
included. NVIDIA's controller makes 6 and 1.0.

Counted from the replica's own ``rest_client_requests_total`` (every write it sends: status
patches, Events, clique prunes); the test runs one CD alone, so every write is for it.
"""

from __future__ import annotations

import pytest

from computedomain.sim.faults import FaultSettings
from tests.integration.e2e_harness import EndToEnd, cd_ready, status_nodes, workload

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WORKERS = 8
CREATION_BUDGET = 6
PER_CHANGE_BUDGET = 1.2


async def test_a_bring_up_costs_at_most_its_write_budget(e2e: EndToEnd) -> None:
    running = await e2e.start_controller()
    # Daemons start 0.5-3 s apart, as in the demo and the benchmark: changes overlap in time.
    await e2e.start_simulator(FaultSettings())
    await running.wait_idle()

    before = running.writes()
    await e2e.create_cd("budget", num_nodes=WORKERS)
    await e2e.cd_until(
        "budget", lambda o: bool(((o or {}).get("status") or {}).get("conditions")), "a status"
    )
    await running.wait_idle(timers=False)
    creation = running.writes() - before

    before = running.writes()
    await e2e.run_workload(workload("budget", WORKERS, racks=["r02"]))

    def all_ready(cd: dict[str, object] | None) -> bool:
        nodes = status_nodes(cd)
        return cd_ready(cd) and len(nodes) == WORKERS

    await e2e.cd_until("budget", all_ready, f"Ready with {WORKERS} nodes")
    await running.wait_idle()  # a coalesced write at a window's end counts too
    bring_up = running.writes() - before
    changes = 2 * WORKERS
    print(
        f"writes: creation {creation:.0f}; bring-up {bring_up:.0f} for {changes} daemon state "
        f"changes = {bring_up / changes:.2f} per change"
    )
    assert creation <= CREATION_BUDGET, creation
    assert bring_up / changes <= PER_CHANGE_BUDGET, (bring_up, changes)
