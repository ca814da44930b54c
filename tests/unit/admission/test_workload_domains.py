"""A workload's ComputeDomain made at its pods' admission: created once whatever the number of
pods and replicas asking, never taken over from a CD of that name made by hand, and the pod
wired to its channel and placed in the same answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from computedomain.admission.webhook import PlacementWebhook
from computedomain.admission.workload_domains import NotTheWorkloadsDomainError, WorkloadDomains
from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import parse_settings
from computedomain.domain.caches import build_caches
from computedomain.domain.placement import RECORDED_CLIQUE_ANNOTATION
from computedomain.domain.workload_domain import CLAIM_NAME, WORKLOAD_DOMAIN_OPT_IN, for_pod
from computedomain.observability.metrics import DomainMetrics
from computedomain.runtime.clock import SystemClock
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import JOBS
from tests.kit.fakeapi import FakeApiServer
from tests.kit.world import DRIVER_NS, NS
from tests.unit.admission.test_placer import fleet

UID = "5a5a5a5a-0000-4000-8000-000000000001"
NAME = "train-5a5a5a5a"


class Api(FakeApiServer):
    def unfenced(self) -> Api:
        return self


def job_pod() -> dict[str, Any]:
    return {
        "metadata": {
            "generateName": "train-",
            "annotations": {WORKLOAD_DOMAIN_OPT_IN: "true"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                 "uid": UID, "controller": True}],
        },
        "spec": {"containers": [{"name": "worker", "image": "x"}]},
    }  # fmt: skip


def webhook(api: Api, nodes: list[dict[str, Any]]) -> PlacementWebhook:
    caches = build_caches(api, driver_namespace=DRIVER_NS)  # type: ignore[arg-type]
    for informer in caches.all:
        informer.feed_list([])
    caches.nodes.feed_list(nodes)
    registry = CollectorRegistry()
    return PlacementWebhook(
        parse_settings([], {"NAMESPACE": DRIVER_NS}),
        api,  # type: ignore[arg-type]
        caches,
        RuntimeMetrics(registry),
        SystemClock(),
        "computedomain.io/controller",
        DomainMetrics(registry),
    )


async def test_concurrent_pods_of_one_job_make_one_domain_and_each_is_wired_and_placed() -> None:
    api = Api()
    api.add(JOBS, {"kind": "Job", "metadata": {"name": "train", "namespace": NS},
                   "spec": {"parallelism": 4}})  # fmt: skip
    hook = webhook(api, fleet(A=3, B=5))
    placements = await asyncio.gather(*(hook.place(NS, job_pod(), False) for _ in range(4)))
    creates = [call for call in api.calls if call[0] == "create" and call[1] == c.CD_PLURAL]
    assert len(creates) == 4  # one made it, three AlreadyExists
    cd = api.objects[(c.CD_PLURAL, NS, NAME)]
    assert cd["metadata"]["ownerReferences"][0]["uid"] == UID
    # Sized by the Job's parallelism (4): only clique B has room.
    assert cd["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION] == "B"
    for placement in placements:
        assert placement is not None
        assert (placement.domain, placement.clique) == (f"{NS}/{NAME}", "B")
        first = placement.wiring[0]
        assert first["value"] == [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": f"{NAME}-channel"}
        ]


async def test_a_pod_not_opted_in_makes_no_domain() -> None:
    api = Api()
    hook = webhook(api, fleet(A=3))
    plain = job_pod()
    plain["metadata"]["annotations"] = {}
    assert await hook.place(NS, plain, False) is None
    assert api.calls == []


async def test_a_domain_of_that_name_not_owned_by_the_workload_is_not_taken_over() -> None:
    api = Api()
    api.add(COMPUTE_DOMAINS, {"metadata": {"name": NAME, "namespace": NS}, "spec": {}})
    domain = for_pod(job_pod())
    assert domain is not None
    caches = build_caches(api, driver_namespace=DRIVER_NS)  # type: ignore[arg-type]
    with pytest.raises(NotTheWorkloadsDomainError):
        await WorkloadDomains(api, caches).ensure(NS, domain)  # type: ignore[arg-type]
