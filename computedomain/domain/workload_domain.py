"""A ComputeDomain for a workload that did not write one (pure; the placement webhook creates it
and wires its pods to it, computedomain/admission/).

Opt-in by one annotation on the pod template (so on every pod of the workload):
``workload.computedomain.io/enabled: "true"``, the same shape as placement's opt-in
(``placement.computedomain.io/enabled``): the subdomain names the feature, ``enabled`` says
"on", and ``"true"`` is the one value that turns it on. It is read on the pod, because the
webhook sees pods, not their templates.

The workload is the pod's controller (its ``ownerReference`` with ``controller: true``): a Job
(``batch/v1``) or a StatefulSet (``apps/v1``). Others (a JobSet's pods belong to one Job per
replicated job, a LeaderWorkerSet's to StatefulSets per group, a Deployment's to ReplicaSets)
are not supported: their pods are admitted unchanged (a JobSet's and a LeaderWorkerSet's
recognised by their labels, so that no Job or StatefulSet of theirs gets a CD of its own).

The CD is named after the workload and the first characters of its UID, so that a workload
deleted and created again under the same name (an ML engineer re-applying a Job) gets a new CD
at once instead of the old one its garbage collector and our finalizer are still removing, and a
Job and a StatefulSet of one name never share one. It is owned by the workload (an
ownerReference without ``blockOwnerDeletion``, which would need ``update`` on the workload's
``finalizers``), so the garbage collector deletes it with the workload; our finalizer then takes
its daemons down as for any CD. ``numNodes`` is 0, as NVIDIA's Grove does: the field is
deprecated (contract §14), a StatefulSet may scale after the CD is made and nothing would keep a
count current, and placement sizes the job from the workload itself (domain/placement.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.placement import PLACEMENT_OPT_IN

WORKLOAD_DOMAIN_OPT_IN = "workload.computedomain.io/enabled"
# On the CD made for a workload: which one, as ``<Kind>/<name>`` (also in its ownerReference;
# this one is for people and ``kubectl get -o``).
WORKLOAD_ANNOTATION = "workload.computedomain.io/workload"
# The name of the pod's ``spec.resourceClaims`` entry the webhook adds, and that each
# container's ``resources.claims`` names.
CLAIM_NAME = "compute-domain-channel"
# The workloads whose pods get a CD: (apiVersion, kind).
SUPPORTED_OWNERS = (("batch/v1", "Job"), ("apps/v1", "StatefulSet"))
# The labels a JobSet's and a LeaderWorkerSet's pods carry: their controller is one of several
# Jobs or StatefulSets of the one workload, whose pods must share one CD, so one CD per
# controller would split it. Not supported yet: such pods are admitted unchanged.
SPLIT_WORKLOAD_LABELS = ("jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name")
UID_CHARS = 8
# CD names stay a DNS label (63), and so does its template's (``<cd>-channel``).
MAX_NAME = 63 - len("-channel")


@dataclass(frozen=True)
class WorkloadDomain:
    """The CD a workload's pods use: its name, its channel template's, and its owner."""

    name: str
    template: str
    kind: str
    workload: str
    owner: Mapping[str, Any]  # the ownerReference to the workload


def opted_in(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(WORKLOAD_DOMAIN_OPT_IN) == "true"


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's supported controller (its ownerReference), or None."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        if (owner.get("apiVersion"), owner.get("kind")) in SUPPORTED_OWNERS and owner.get("uid"):
            return dict(owner)
        return None
    return None


def domain_name(workload: str, uid: str) -> str:
    suffix = "-" + uid.replace("-", "")[:UID_CHARS].lower()
    return workload[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def for_pod(pod: Mapping[str, Any]) -> WorkloadDomain | None:
    """The CD for an opted-in pod of a Job or StatefulSet; None for any other pod."""
    if not opted_in(pod):
        return None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if any(label in labels for label in SPLIT_WORKLOAD_LABELS):
        return None
    owner = controller_of(pod)
    if owner is None:
        return None
    name = domain_name(str(owner["name"]), str(owner["uid"]))
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["name"],
        "uid": owner["uid"],
    }
    kind, workload = str(owner["kind"]), str(owner["name"])
    return WorkloadDomain(name, f"{name}-channel", kind, workload, reference)


def domain_body(domain: WorkloadDomain) -> dict[str, Any]:
    """The CD as the webhook creates it: owned by the workload, opted in to placement."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {
            "name": domain.name,
            "annotations": {
                WORKLOAD_ANNOTATION: f"{domain.kind}/{domain.workload}",
                PLACEMENT_OPT_IN: "true",
            },
            "ownerReferences": [dict(domain.owner)],
        },
        "spec": {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": domain.template}},
        },
    }


def owned_by(cd: Mapping[str, Any], domain: WorkloadDomain) -> bool:
    """Whether ``cd`` is the one made for this workload (not a CD of that name made by hand)."""
    refs = (cd.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == domain.owner["uid"] for ref in refs)


def claim_wiring(pod: Mapping[str, Any], template: str) -> list[dict[str, Any]]:
    """The JSONPatch that gives ``pod`` the channel claim from ``template``: a
    ``spec.resourceClaims`` entry, and that entry named in each container's
    ``resources.claims`` (as NVIDIA's examples wire a channel). Nothing when the pod already
    names the template. Init containers are left alone: the channel is for the job's own
    processes, and a claim a container names is prepared before any container starts anyway."""
    spec = pod.get("spec") or {}
    claims = list(spec.get("resourceClaims") or [])
    for claim in claims:
        if isinstance(claim, Mapping) and claim.get("resourceClaimTemplateName") == template:
            return []
    taken = {claim.get("name") for claim in claims if isinstance(claim, Mapping)}
    name = CLAIM_NAME
    while name in taken:
        name += "-x"
    ops: list[dict[str, Any]] = [
        {
            "op": "add",
            "path": "/spec/resourceClaims",
            "value": [*claims, {"name": name, "resourceClaimTemplateName": template}],
        }
    ]
    for index, container in enumerate(spec.get("containers") or []):
        resources = dict(container.get("resources") or {})
        resources["claims"] = [*(resources.get("claims") or []), {"name": name}]
        ops.append({"op": "add", "path": f"/spec/containers/{index}/resources", "value": resources})
    return ops


def wired(pod: Mapping[str, Any], template: str) -> dict[str, Any]:
    """``pod`` as it is once the wiring is applied (what placement then reads): only its
    ``spec.resourceClaims`` matter to it."""
    spec = dict(pod.get("spec") or {})
    if template not in {
        claim.get("resourceClaimTemplateName")
        for claim in spec.get("resourceClaims") or []
        if isinstance(claim, Mapping)
    }:
        spec["resourceClaims"] = [
            *(spec.get("resourceClaims") or []),
            {"name": CLAIM_NAME, "resourceClaimTemplateName": template},
        ]
    return {**pod, "spec": spec}
