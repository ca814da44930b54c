import random

import pytest

from computedomain.sim.faults import (
    DEFAULT_FAIL_START_MESSAGE,
    DelayRange,
    FaultPlanner,
    FaultSettings,
    parse_duration,
    parse_node_list,
)


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("2s", 2.0), ("1.5", 1.5), ("1m", 60.0), (".25s", 0.25)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("0.5-3s", 0.5, 3.0), ("200ms-1s", 0.2, 1.0), ("2s", 2.0, 2.0), ("1-2", 1.0, 2.0)],
)
def test_delay_range_parse(text: str, low: float, high: float) -> None:
    delay = DelayRange.parse(text)
    assert delay.low == pytest.approx(low)
    assert delay.high == pytest.approx(high)


@pytest.mark.parametrize("text", ["3-1s", "abc", "1s-x", "-1"])
def test_delay_range_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        DelayRange.parse(text)


def test_samples_stay_in_range_and_repeat_for_a_seed() -> None:
    delay = DelayRange(0.5, 3.0)
    first = [delay.sample(random.Random(7)) for _ in range(3)]
    assert first == [delay.sample(random.Random(7)) for _ in range(3)]
    rng = random.Random(1)
    assert all(0.5 <= delay.sample(rng) <= 3.0 for _ in range(200))


def test_named_nodes_always_get_their_fault_others_by_probability() -> None:
    settings = FaultSettings(
        daemon_delay=DelayRange.fixed(1.0),
        never_ready_nodes=parse_node_list("n1, n2"),
        crash_nodes=frozenset({"n3"}),
        crash_after=DelayRange.fixed(4.0),
    )
    planner = FaultPlanner(settings, random.Random(0))
    assert planner.daemon_fate("n1", "uid-1").never_ready
    assert planner.daemon_fate("n1", "uid-1").crash_after is None
    fate = planner.daemon_fate("n3", "uid-3")
    assert fate.crash_after == 4.0
    assert fate.start_delay == 1.0
    # one crash per pod: the restarted container runs on
    assert planner.daemon_fate("n3", "uid-3").crash_after is None
    # its replacement pod may crash again
    assert planner.daemon_fate("n3", "uid-3b").crash_after == 4.0
    assert not planner.daemon_fate("n9", "uid-9").never_ready


def test_fail_start_wins_over_other_daemon_faults() -> None:
    settings = FaultSettings(
        fail_start_nodes=frozenset({"n1"}),
        never_ready_nodes=frozenset({"n1"}),
        crash_nodes=frozenset({"n1"}),
        fail_start_message="no IMEX for you",
    )
    planner = FaultPlanner(settings, random.Random(0))
    fate = planner.daemon_fate("n1", "uid-1")
    assert (fate.fail_start, fate.never_ready, fate.crash_after) == ("no IMEX for you", False, None)
    assert planner.daemon_fate("n2", "uid-2").fail_start is None
    assert FaultSettings().fail_start_message == DEFAULT_FAIL_START_MESSAGE


def test_probabilities_apply_to_roughly_that_share() -> None:
    planner = FaultPlanner(FaultSettings(never_ready_probability=0.3), random.Random(42))
    hits = sum(planner.daemon_fate(f"n{i}", f"u{i}").never_ready for i in range(2000))
    assert 500 < hits < 700


def test_a_node_fails_at_most_once_and_deletion_wins_over_not_ready() -> None:
    settings = FaultSettings(
        node_not_ready_nodes=frozenset({"a", "b"}),
        node_delete_nodes=frozenset({"b"}),
        node_fault_after=DelayRange.fixed(2.0),
    )
    planner = FaultPlanner(settings, random.Random(0))
    assert planner.node_fate("a").not_ready_after == 2.0
    assert not planner.node_fate("a").any
    fate_b = planner.node_fate("b")
    assert fate_b.delete_after == 2.0
    assert fate_b.not_ready_after is None
    assert not planner.node_fate("c").any


def test_probabilities_are_validated() -> None:
    with pytest.raises(ValueError, match="crash_probability"):
        FaultSettings(crash_probability=1.5)
