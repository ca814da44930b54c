"""The leader-election identity of one controller process, ``<pod name>-<random UUID>``: a
restarted container of the same pod is told apart from its previous one, and the pod is read
back from the identity (a Lease's holder checked against the pods that run)."""

from __future__ import annotations

import uuid

_UUID_LENGTH = 36  # str(uuid.UUID): 32 hex digits and 4 dashes


def new_identity(pod_name: str) -> str:
    return f"{pod_name}-{uuid.uuid4()}"


def identity_pod(identity: str) -> str | None:
    """The pod name ``identity`` was made from by ``new_identity``; None for any other form."""
    pod, dash, suffix = (
        identity[: -_UUID_LENGTH - 1],
        identity[-_UUID_LENGTH - 1 : -_UUID_LENGTH],
        identity[-_UUID_LENGTH:],
    )
    if not pod or dash != "-":
        return None
    try:
        uuid.UUID(suffix)
    except ValueError:
        return None
    return pod
