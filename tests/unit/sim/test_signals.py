import asyncio

from computedomain.sim.signals import Signals
from computedomain.sim.simulator import changed_entries
from tests.kit.clock import FakeClock, settle


async def test_a_notified_key_wakes_its_waiter_and_only_it() -> None:
    signals = Signals(FakeClock())
    with signals.listen(["node:a", "cd:u"]) as waiter_a, signals.listen(["node:b"]) as waiter_b:
        wait_a = asyncio.create_task(waiter_a.wait())
        wait_b = asyncio.create_task(waiter_b.wait())
        await settle()
        signals.notify("cd:u")
        await settle()
        assert wait_a.done()
        assert wait_a.result() is True
        assert not wait_b.done()
        wait_b.cancel()
    assert signals.waiting == 0


async def test_a_change_between_reading_and_waiting_is_not_lost() -> None:
    signals = Signals(FakeClock())
    with signals.listen(["node:a"]) as waiter:
        signals.notify("node:a")  # lands after registration, before the wait
        assert await waiter.wait(at_most=1.0) is True


async def test_wait_gives_up_after_the_recheck_interval_on_the_clock() -> None:
    clock = FakeClock()
    signals = Signals(clock)
    with signals.listen(["node:a"]) as waiter:
        task = asyncio.create_task(waiter.wait(at_most=5.0))
        await clock.advance(4.9)
        assert not task.done()
        await clock.advance(0.2)
        assert task.done()
        assert task.result() is False


def test_changed_entries_names_added_removed_and_modified_nodes() -> None:
    old = {
        "daemons": [{"nodeName": "a", "status": "NotReady"}, {"nodeName": "b", "status": "Ready"}]
    }
    new = {
        "daemons": [{"nodeName": "a", "status": "Ready"}, {"nodeName": "c", "status": "NotReady"}]
    }
    assert changed_entries(old, new, ("daemons",), "nodeName") == {"a", "b", "c"}
    assert changed_entries(new, new, ("daemons",), "nodeName") == set()
    assert changed_entries(
        None, {"status": {"nodes": [{"name": "x"}]}}, ("status", "nodes"), "name"
    ) == {"x"}
