"""Handovers from Lease states, and overlapping writers from audited writes."""

from __future__ import annotations

from computedomain.devcluster.audit import AuditedWrite
from computedomain.devcluster.handover import LeaseSeen, handovers, pod_of, writer_overlaps

A = "ctl-7f9c-a1b2c-00000000-0000-4000-8000-000000000001"
B = "ctl-7f9c-x9y8z-00000000-0000-4000-8000-000000000002"


def seen(holder: str, acquire: float, renew: float) -> LeaseSeen:
    return LeaseSeen(at=renew, holder=holder, acquire=acquire, renew=renew, transitions=0)


def write(pod: str, received: float, completed: float, code: int = 200) -> AuditedWrite:
    return AuditedWrite("sa", "patch", "computedomains", "status", "ns", "cd", code, pod, received,
                        completed)  # fmt: skip


def test_pod_of_strips_the_uuid_only() -> None:
    assert pod_of(A) == "ctl-7f9c-a1b2c"
    assert pod_of("no-uuid") == "no-uuid"


def test_a_released_lease_and_an_expired_one() -> None:
    states = [
        seen(A, 100.0, 100.0),
        seen(A, 100.0, 102.0),
        seen("", 103.0, 103.0),  # released on SIGTERM
        seen(B, 104.5, 104.5),
        seen(B, 104.5, 106.5),
        seen(A, 125.0, 125.0),  # B died; A's lease (say, a new container) after expiry
    ]
    assert handovers(states) == [
        {"from": "ctl-7f9c-a1b2c", "to": "ctl-7f9c-x9y8z", "released": True,
         "without_leader_s": 2.5, "after_release_s": 1.5},
        {"from": "ctl-7f9c-x9y8z", "to": "ctl-7f9c-a1b2c", "released": False,
         "without_leader_s": 18.5, "after_release_s": None},
    ]  # fmt: skip


def test_one_writer_at_a_time() -> None:
    found = writer_overlaps(
        [write("a", 1.0, 1.1), write("a", 5.0, 5.2), write("b", 6.0, 6.1), write("b", 9.0, 9.1),
         write("a", 5.5, 5.6, code=409)]  # a failed write is not a write
    )  # fmt: skip
    assert found["writes_inside_another_writers_span"] == 0
    assert found["overlapping_writer_pairs"] == []
    assert found["handover_gaps"] == [{"from": "a", "to": "b", "without_writes_s": 0.8}]
    assert [w["writes_2xx"] for w in found["writers"]] == [2, 2]


def test_two_writers_at_once_are_counted() -> None:
    found = writer_overlaps(
        [write("a", 1.0, 1.1), write("b", 2.0, 2.1), write("a", 3.0, 3.1), write("", 4.0, 4.1)]
    )
    assert found["writes_inside_another_writers_span"] == 1  # b's write inside a's span
    assert found["overlapping_writer_pairs"] == [["a", "b"]]
    assert found["unbound_writes"] == 1
