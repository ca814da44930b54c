"""Reading the audit log: the identity, the pod of a pod-bound token, and the timestamps."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from computedomain.devcluster.audit import POD_NAME_EXTRA, AuditLog


def event(user: str, pod: str | None, received: str, completed: str, uri: str = "") -> str:
    info: dict[str, object] = {"username": user}
    if pod is not None:
        info["extra"] = {POD_NAME_EXTRA: [pod], "authentication.kubernetes.io/pod-uid": ["u"]}
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": "update",
            "user": info,
            "objectRef": {"resource": "leases", "namespace": "ns", "name": "lock"},
            "responseStatus": {"code": 200},
            "requestReceivedTimestamp": received,
            "stageTimestamp": completed,
            "requestURI": uri or "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lock",
        }
    )


def test_pod_and_times_of_each_write(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text(
        event("sa", "ctl-a", "2026-12-04T11:00:00.250000Z", "2026-12-04T11:00:00.500000Z")
        + "\n"
        + event("admin", None, "2026-12-04T11:00:01.000000Z", "2026-12-04T11:00:01.000000Z")
        + "\n{partial"
    )
    first, second = AuditLog(log).writes()
    assert (first.user, first.pod, first.target) == ("sa", "ctl-a", "update leases ns/lock")
    at = datetime(2026, 12, 4, 11, 0, 0, tzinfo=UTC).timestamp()
    assert (first.received, first.completed) == (at + 0.25, at + 0.5)
    assert second.pod == ""
    assert AuditLog(log).writes(user="sa") == [first]


def test_writes_between_two_marks(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    audit = AuditLog(log)
    stamp = "2026-12-04T11:00:00.000000Z"
    log.write_text(event("before", None, stamp, stamp) + "\n")
    start = audit.mark()
    with log.open("a") as out:
        out.write(event("within", None, stamp, stamp) + "\n")
    end = audit.mark()
    with log.open("a") as out:
        out.write(event("after", None, stamp, stamp) + "\n")
    assert [w.user for w in audit.writes(since=start, until=end)] == ["within"]
    assert [w.user for w in audit.writes(since=start)] == ["within", "after"]


def test_a_server_side_dry_run_is_told_apart(tmp_path: Path) -> None:
    """`kubectl ... --dry-run=server` is logged as a write; nothing was stored."""
    log = tmp_path / "audit.log"
    stamp = "2026-12-04T11:00:00.000000Z"
    uri = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lock?dryRun=All&fieldManager=kubectl"
    log.write_text(
        event("sa", None, stamp, stamp, uri) + "\n" + event("sa", None, stamp, stamp) + "\n"
    )
    assert [w.dry_run for w in AuditLog(log).writes()] == [True, False]
