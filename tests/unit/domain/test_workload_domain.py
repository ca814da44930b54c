"""The ComputeDomain of a workload that wrote none: who gets one (an opted-in pod of a Job or a
StatefulSet), its name, its body (owned by the workload, numNodes 0, placed), and the claim
wiring the pod gets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.domain.placement import PLACEMENT_OPT_IN
from computedomain.domain.workload import claim_templates
from computedomain.domain.workload_domain import (
    CLAIM_NAME,
    WORKLOAD_ANNOTATION,
    WORKLOAD_DOMAIN_OPT_IN,
    claim_wiring,
    domain_body,
    domain_name,
    for_pod,
    owned_by,
    wired,
)


def applied(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSONPatch of ``add`` operations on object members, as the apiserver applies it
    (``add`` of a member that exists replaces it)."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = op["path"][1:].split("/")
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = op["value"]
    return out


UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def pod(kind: str = "Job", api_version: str = "batch/v1", opted: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "annotations": {WORKLOAD_DOMAIN_OPT_IN: "true"} if opted else {},
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "train",
                                 "uid": UID, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"containers": [{"name": "a", "image": "x"},
                                {"name": "b", "resources": {"limits": {"cpu": "1"}}}]},
    }  # fmt: skip


@pytest.mark.parametrize(("kind", "api_version"), [("Job", "batch/v1"), ("StatefulSet", "apps/v1")])
def test_an_opted_in_pod_of_a_job_or_statefulset_gets_a_domain_named_after_it(
    kind: str, api_version: str
) -> None:
    found = for_pod(pod(kind, api_version))
    assert found is not None
    assert (found.name, found.template) == ("train-0f1e2d3c", "train-0f1e2d3c-channel")
    assert found.owner == {"apiVersion": api_version, "kind": kind, "name": "train", "uid": UID}


@pytest.mark.parametrize(
    "case",
    ["not opted in", "a ReplicaSet's", "no controller", "a bare pod", "false", "a JobSet's"],
)
def test_other_pods_get_none(case: str) -> None:
    p = pod(opted=case != "not opted in")
    if case == "a ReplicaSet's":
        p = pod("ReplicaSet", "apps/v1")
    if case == "no controller":
        p["metadata"]["ownerReferences"][0]["controller"] = False
    if case == "a bare pod":
        del p["metadata"]["ownerReferences"]
    if case == "a JobSet's":  # its controller is one Job of several: one CD each would split it
        p["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "train"}
    if case == "false":
        p["metadata"]["annotations"][WORKLOAD_DOMAIN_OPT_IN] = "false"
    assert for_pod(p) is None


def test_the_name_is_deterministic_short_enough_and_new_for_a_new_workload() -> None:
    assert domain_name("train", UID) == domain_name("train", UID)
    assert domain_name("train", UID) != domain_name("train", "9" + UID[1:])
    long = domain_name("x" * 60 + "-y", UID)
    assert len(long) + len("-channel") <= 63
    assert long.endswith("-0f1e2d3c")


def test_the_body_is_owned_by_the_workload_opted_in_to_placement_and_of_any_size() -> None:
    found = for_pod(pod())
    assert found is not None
    body = domain_body(found)
    assert body["apiVersion"] == c.API_VERSION
    assert body["metadata"]["ownerReferences"] == [found.owner]
    # No blockOwnerDeletion: it would need update on the workload's finalizers.
    assert "blockOwnerDeletion" not in body["metadata"]["ownerReferences"][0]
    assert body["metadata"]["annotations"] == {
        WORKLOAD_ANNOTATION: "Job/train",
        PLACEMENT_OPT_IN: "true",
    }
    assert body["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "train-0f1e2d3c-channel"}},
    }
    assert owned_by(body, found)
    assert not owned_by({"metadata": {"name": found.name}}, found)


def test_the_wiring_adds_the_claim_to_the_pod_and_each_container() -> None:
    p = pod()
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
    p["spec"]["containers"][1]["resources"]["claims"] = [{"name": "gpu"}]
    patched = applied(p, claim_wiring(p, "t-channel"))
    assert patched["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "gpus"},
        {"name": CLAIM_NAME, "resourceClaimTemplateName": "t-channel"},
    ]
    assert [x["resources"].get("claims") for x in patched["spec"]["containers"]] == [
        [{"name": CLAIM_NAME}],
        [{"name": "gpu"}, {"name": CLAIM_NAME}],
    ]
    assert patched["spec"]["containers"][1]["resources"]["limits"] == {"cpu": "1"}
    # What placement reads of the wired pod is what the patch gives it.
    assert claim_templates(wired(p, "t-channel")) == claim_templates(patched)


def test_a_pod_wired_by_hand_is_left_as_it_is() -> None:
    p = pod()
    p["spec"]["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": "t-channel"}]
    assert claim_wiring(p, "t-channel") == []
    assert wired(p, "t-channel") == p
