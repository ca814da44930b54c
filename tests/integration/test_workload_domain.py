"""A ComputeDomain for a workload that wrote none, on the real control plane: a Job whose pod
template carries ``workload.computedomain.io/enabled: "true"`` and no claim is admitted by the
kube-apiserver through our webhook, which creates the Job's CD and wires each pod to its
channel; the pods run on the simulated fleet in one clique, the CD is Ready with their nodes,
and when the Job is deleted the garbage collector (kube-controller-manager) deletes the CD,
which our controller then finalizes, once the Job's last pod, held terminating, is gone. The
same for an annotated StatefulSet: its CD, owned by it, Ready with its pods' nodes, gone with it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configured,
    webhook_environ,
)
from computedomain.domain.placement import RECORDED_CLIQUE_ANNOTATION
from computedomain.domain.workload_domain import (
    CLAIM_NAME,
    WORKLOAD_DOMAIN_OPT_IN,
    domain_name,
)
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import condition
from computedomain.runtime.resources import (
    DAEMONSETS,
    JOBS,
    NODES,
    PODS,
    STATEFULSETS,
)
from tests.integration.e2e_harness import EndToEnd, cd_ready, status_nodes, workload
from tests.integration.test_placement_webhook import scheduled

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SIZE = 2
# Keeps a deleted pod terminating until the test lets it go.
HOLD = "test.computedomain.io/hold"
# Strategic merge patches: the Job controller's own finalizer on the pod stays.
HELD = {"metadata": {"finalizers": [HOLD]}}
LET_GO = {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}}


def annotated(body: dict[str, Any]) -> dict[str, Any]:
    """What an ML engineer writes: the workload with the annotation on its pod template, no
    claim, no CD (the harness's pod template, one pod per node, without its claim)."""
    template = body["spec"]["template"]
    spec = template["spec"]
    del spec["resourceClaims"]
    for container in spec["containers"]:
        del container["resources"]
    template["metadata"]["annotations"] = {WORKLOAD_DOMAIN_OPT_IN: "true"}
    return body


def annotated_job(name: str, size: int) -> dict[str, Any]:
    """An annotated Job of ``size`` pods, all at once."""
    template = annotated(workload(name, size))["spec"]["template"]
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": size, "completions": size, "backoffLimit": 0,
                 "template": template},
    }  # fmt: skip


async def ready_in_its_clique(
    e2e: EndToEnd, kube: KubeClient, name: str, pods: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The workload's CD ``name`` once Ready with its pods' nodes: each pod wired to the CD's
    channel by the webhook, and placed in the one clique recorded on the CD."""
    for pod in pods.values():
        claims = pod["spec"]["resourceClaims"]
        assert {"name": CLAIM_NAME, "resourceClaimTemplateName": f"{name}-channel"} in claims
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": CLAIM_NAME}]
    cd = await e2e.cd_until(
        name, lambda cd: cd_ready(cd) and len(status_nodes(cd)) == SIZE, f"Ready with {SIZE} nodes"
    )
    assert cd is not None
    e2e.uids.add(cd["metadata"]["uid"])
    assert {p["spec"]["nodeName"] for p in pods.values()} == set(status_nodes(cd))
    nodes = {objects.name(n): n for n in (await kube.list(NODES))["items"]}
    cliques = {
        objects.label(nodes[p["spec"]["nodeName"]], c.GPU_CLIQUE_NODE_LABEL) for p in pods.values()
    }
    assert cliques == {cd["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION]}
    return cd


async def test_an_annotated_job_gets_its_domain_which_goes_with_it(
    e2e: EndToEnd, kube: KubeClient, namespace: str
) -> None:
    started = time.monotonic()
    configuration = f"workload-domain-{namespace}"
    async with webhook_configured(kube, configuration, namespace) as port:
        try:
            await e2e.start_simulator()
            await e2e.start_controller(**webhook_environ(port, configuration))
            await ca_bundle_written(kube, configuration)
            job = await kube.create(JOBS, annotated_job("train", SIZE), namespace)
            name = domain_name("train", job["metadata"]["uid"])

            pods = await e2e.workload_pods("train", scheduled(SIZE), "admitted and scheduled")
            cd = await ready_in_its_clique(e2e, kube, name, pods)
            # The Job deleted: the garbage collector deletes its pods and its CD. One pod is held
            # terminating (a finalizer of the test's, as a real kubelet keeps a deleted pod Running
            # through its grace period; kwok deletes one at once): the CD keeps its IMEX daemons
            # while that pod still uses its channel, and says so.
            held = sorted(pods)[0]
            await kube.patch(PODS, held, HELD, namespace, patch_type="strategic")
            deleted = time.monotonic()
            await kube.delete(JOBS, "train", namespace, propagation_policy="Background")
            waiting = await e2e.cd_until(
                name,
                lambda cd: (
                    f"IMEX daemons stay while 1 workload pod still uses its channel: {held}"
                    in str(condition(cd or {}, "Ready").get("message"))
                ),
                "waits for the terminating pod",
                within=60,
            )
            assert waiting is not None
            assert waiting["metadata"].get("deletionTimestamp")
            terminating = await kube.get(PODS, held, namespace)
            assert terminating["metadata"].get("deletionTimestamp")
            assert terminating["status"]["phase"] == "Running"
            daemonset = await kube.get(
                DAEMONSETS, c.daemon_name(cd["metadata"]["uid"]), e2e.driver_namespace
            )
            assert not daemonset["metadata"].get("deletionTimestamp"), "IMEX torn down under a pod"
            released = time.monotonic()
            await kube.patch(PODS, held, LET_GO, namespace, patch_type="strategic")
            await e2e.cd_until(name, lambda cd: cd is None, "gone with its Job", within=60)
            print(
                f"CD waited {released - deleted:.1f}s for its terminating pod, gone "
                f"{time.monotonic() - released:.1f}s after the pod was"
            )
        finally:
            for pod in (await kube.list(PODS, namespace))["items"]:
                if HOLD in (pod["metadata"].get("finalizers") or []):
                    with contextlib.suppress(ApiError):
                        await kube.patch(
                            PODS, objects.name(pod), LET_GO, namespace, patch_type="strategic"
                        )
            with contextlib.suppress(ApiError):
                await kube.delete(JOBS, "train", namespace, propagation_policy="Background")
    print(f"workload domain e2e: {time.monotonic() - started:.1f}s")


async def test_an_annotated_statefulset_gets_its_domain_ready_which_goes_with_it(
    e2e: EndToEnd, kube: KubeClient, namespace: str
) -> None:
    """The acceptance's other workload: a StatefulSet (pods owned by it directly) with the
    annotation and no CD YAML gets its CD, owned by it; the CD becomes Ready with the pods'
    nodes, in the clique recorded on it; deleting the StatefulSet takes the CD and its IMEX
    DaemonSet with it."""
    configuration = f"workload-domain-sts-{namespace}"
    async with webhook_configured(kube, configuration, namespace) as port:
        try:
            await e2e.start_simulator()
            await e2e.start_controller(**webhook_environ(port, configuration))
            await ca_bundle_written(kube, configuration)
            sts = await kube.create(STATEFULSETS, annotated(workload("serve", SIZE)), namespace)
            name = domain_name("serve", sts["metadata"]["uid"])
            pods = await e2e.workload_pods("serve", scheduled(SIZE), "admitted and scheduled")
            cd = await ready_in_its_clique(e2e, kube, name, pods)
            assert [(o["kind"], o["name"]) for o in cd["metadata"]["ownerReferences"]] == [
                ("StatefulSet", "serve")
            ]

            daemon = c.daemon_name(cd["metadata"]["uid"])
            await kube.delete(STATEFULSETS, "serve", namespace, propagation_policy="Background")
            await e2e.cd_until(name, lambda cd: cd is None, "gone with its StatefulSet", within=90)
            with pytest.raises(ApiError) as gone:
                await kube.get(DAEMONSETS, daemon, e2e.driver_namespace)
            assert gone.value.is_not_found, gone.value
        finally:
            with contextlib.suppress(ApiError):
                await kube.delete(STATEFULSETS, "serve", namespace, propagation_policy="Background")
