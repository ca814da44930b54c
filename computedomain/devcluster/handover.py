"""Leadership handovers, from the Lease and from the audit log (the upgrade scenario of
hack/bench.sh, issue 18): how long nobody led, and whether two pods ever wrote at once."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from computedomain.devcluster.audit import AuditedWrite
from computedomain.runtime.clock import parse_time

UNBOUND = "(unbound token)"


@dataclass(frozen=True)
class LeaseSeen:
    """One state of the Lease as a watch delivered it."""

    at: float  # wall clock when the watch delivered it
    holder: str
    acquire: float | None  # spec.acquireTime, seconds since the epoch
    renew: float | None  # spec.renewTime
    transitions: int

    @classmethod
    def of(cls, lease: Mapping[str, Any], at: float) -> LeaseSeen:
        spec = lease.get("spec") or {}
        return cls(
            at=at,
            holder=str(spec.get("holderIdentity") or ""),
            acquire=_stamp(spec.get("acquireTime")),
            renew=_stamp(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def same_as(self, other: LeaseSeen | None) -> bool:
        return other is not None and (self.holder, self.acquire, self.renew) == (
            other.holder,
            other.acquire,
            other.renew,
        )


def _stamp(value: Any) -> float | None:
    return parse_time(value).timestamp() if value else None


def pod_of(identity: str) -> str:
    """The pod of a leader identity ``<POD_NAME>-<uuid4>`` (the controller's)."""
    return identity[:-37] if len(identity) > 37 and identity[-37] == "-" else identity


def handovers(seen: Sequence[LeaseSeen]) -> list[dict[str, Any]]:
    """Every change of holder: from the old holder's last renewTime to the new holder's
    acquireTime (``without_leader_s``), and, when the old one released the Lease (empty
    holder), from the release to the acquisition (``after_release_s``)."""
    out: list[dict[str, Any]] = []
    last: LeaseSeen | None = None
    released: LeaseSeen | None = None
    for item in seen:
        if not item.holder:
            released = item
            continue
        if last is not None and item.holder != last.holder:
            out.append(
                {
                    "from": pod_of(last.holder),
                    "to": pod_of(item.holder),
                    "released": released is not None,
                    "without_leader_s": _gap(last.renew, item.acquire),
                    "after_release_s": _gap(released.renew, item.acquire) if released else None,
                }
            )
        released = None
        last = item
    return out


def _gap(since: float | None, until: float | None) -> float | None:
    return round(until - since, 3) if since is not None and until is not None else None


def writer_overlaps(writes: Sequence[AuditedWrite]) -> dict[str, Any]:
    """The span (first request received to last answered) of each pod's successful writes,
    the writes that fall inside another pod's span, the pairs of pods whose spans overlap, and
    the gap between consecutive spans. One writer at a time means 0 and no pairs."""
    ok = sorted((w for w in writes if 200 <= w.code < 300), key=lambda w: w.received)
    spans: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for w in ok:
        span = spans.setdefault(w.pod, [w.received, w.completed])
        span[0], span[1] = min(span[0], w.received), max(span[1], w.completed)
        counts[w.pod] = counts.get(w.pod, 0) + 1
    order = sorted(spans, key=lambda pod: spans[pod][0])
    inside = sum(
        1 for w in ok if any(spans[p][0] < w.received < spans[p][1] for p in spans if p != w.pod)
    )
    pairs = [
        [a or UNBOUND, b or UNBOUND]
        for i, a in enumerate(order)
        for b in order[i + 1 :]
        if spans[b][0] < spans[a][1] and spans[a][0] < spans[b][1]
    ]
    gaps = [
        {"from": a, "to": b, "without_writes_s": round(spans[b][0] - spans[a][1], 3)}
        for a, b in itertools.pairwise(order)
    ]
    first = min((s[0] for s in spans.values()), default=0.0)
    return {
        "writers": [
            {
                "pod": pod or UNBOUND,
                "writes_2xx": counts[pod],
                "from_s": round(spans[pod][0] - first, 3),
                "to_s": round(spans[pod][1] - first, 3),
            }
            for pod in order
        ],
        "writes_inside_another_writers_span": inside,
        "overlapping_writer_pairs": pairs,
        "handover_gaps": gaps,
        "unbound_writes": counts.get("", 0),
    }
