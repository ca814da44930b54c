"""Swap hazards: an installed CRD without our status fields, NVIDIA's controller beside ours."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.domain.caches import build_caches
from computedomain.domain.coexistence import CoexistenceMonitor
from computedomain.domain.crdschema import CD_CRD_NAME, crd_outdated_message, missing_status_fields
from computedomain.domain.kubeletplugin import (
    daemon_image,
    image_drift_message,
    trim_plugin_daemonset,
)
from computedomain.domain.nvidiacontroller import (
    concurrent_controller_message,
    nvidia_lease,
    running_nvidia_controllers,
    trim_pod_identity,
)
from computedomain.domain.selectors import matches, parse_selector
from computedomain.domain.watches import EventRouter, wire
from computedomain.runtime.events import EventRecorder
from tests.kit.clock import FakeClock
from tests.kit.fakeapi import FakeApiServer

ROOT = Path(__file__).resolve().parents[3]
OUR_CRD = yaml.safe_load((ROOT / "crds/resource.nvidia.com_computedomains.yaml").read_text())
OURS_ONLY = ("conditions", "observedGeneration", "nodeCount", "readyNodeCount", "cliqueCount")


def nvidia_crd() -> dict[str, Any]:
    """Our CRD with the status schema cut back to NVIDIA's two fields."""
    crd: dict[str, Any] = copy.deepcopy(OUR_CRD)
    for version in crd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        status["properties"] = {k: status["properties"][k] for k in ("status", "nodes")}
    return crd


def test_our_crd_misses_nothing() -> None:
    assert missing_status_fields(OUR_CRD) == ()


def test_nvidias_crd_misses_our_status_fields() -> None:
    assert missing_status_fields(nvidia_crd()) == OURS_ONLY


def test_absent_crd_or_preserved_status_reports_nothing() -> None:
    assert missing_status_fields(None) == ()
    crd = nvidia_crd()
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status["x-kubernetes-preserve-unknown-fields"] = True
    assert missing_status_fields(crd) == ()


def test_outdated_message_names_fields_and_the_fix_on_one_line() -> None:
    message = crd_outdated_message(("conditions", "nodeCount"))
    assert "conditions, nodeCount" in message
    assert c.CRD_UPGRADE_COMMAND in message
    assert "\n" not in message


def pod(
    name: str,
    *,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "nvidia-dra-driver-gpu",
        "uid": f"uid-{name}",
        "labels": {"nvidia-dra-driver-gpu-component": "controller"} if labels is None else labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_only_running_nvidia_controller_pods_count() -> None:
    pods = [
        pod("b"),
        pod("a"),
        pod("pending", phase="Pending"),
        pod("going", deleting=True),
        pod("plugin", labels={"nvidia-dra-driver-gpu-component": "kubelet-plugin"}),
        pod(
            "ours",
            labels={
                "nvidia-dra-driver-gpu-component": "controller",
                "app.kubernetes.io/name": "computedomain-controller",
            },
        ),
    ]
    assert [p["metadata"]["name"] for p in running_nvidia_controllers(pods)] == ["a", "b"]


def test_concurrent_message_says_what_to_do() -> None:
    message = concurrent_controller_message(pod("x"))
    assert "nvidia-dra-driver-gpu/x" in message
    # Only the legacy label: an install upgraded from v25.x (nameOverride=nvidia-dra-driver-gpu).
    assert "scale deployment nvidia-dra-driver-gpu-controller --replicas=0" in message
    assert "controller.replicas=0" in message


# NVIDIA's controller Deployment as helm renders its charts (how: the fixture's header).
NVIDIA_CHART = yaml.safe_load((ROOT / "tests/fixtures/nvidia-chart/controller.yaml").read_text())
INSTALLS: dict[str, dict[str, Any]] = NVIDIA_CHART["installs"]


def chart_pod(install: str, *, replica_set: bool = False) -> dict[str, Any]:
    shape = INSTALLS[install]
    body = pod("controller-0", labels=dict(shape["podLabels"]))
    body["metadata"]["namespace"] = shape["namespace"]
    if replica_set:
        owner = {"kind": "ReplicaSet", "name": f"{shape['deployment']}-7d9f8c6b5d"}
        body["metadata"]["ownerReferences"] = [owner]
    return body


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_nvidias_controller_pods_are_found_in_every_install_shape(install: str) -> None:
    """v0.4.0 and v0.4.1, fresh and upgraded: v0.4.1's fresh pods carry no
    nvidia-dra-driver-gpu-component label at all."""
    found = running_nvidia_controllers([chart_pod(install)])
    assert [p["metadata"]["name"] for p in found] == ["controller-0"]
    # Each Deployment's own selector is among ours, so what it runs, we see.
    selector = ",".join(f"{k}={v}" for k, v in INSTALLS[install]["selector"].items())
    assert selector in c.NVIDIA_CONTROLLER_SELECTORS


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_the_message_names_the_deployment_of_each_install_shape(install: str) -> None:
    deployment = INSTALLS[install]["deployment"]
    for replica_set in (True, False):
        message = concurrent_controller_message(chart_pod(install, replica_set=replica_set))
        assert f"-n {INSTALLS[install]['namespace']} scale deployment {deployment} " in message


def test_a_pod_both_selectors_match_counts_once() -> None:
    """v0.4.0's fresh pods carry both labels; the two informers each deliver them."""
    both = chart_pod("v0.4.0 fresh")
    assert len(running_nvidia_controllers([both, copy.deepcopy(both)])) == 1


def test_our_own_pods_are_never_nvidias() -> None:
    """No default selector matches our pods' labels, and our pods are skipped even when a
    values file gives them NVIDIA's label."""
    ours = dict(c.OWN_POD_TEMPLATE_LABELS)
    assert not any(matches(parse_selector(s), ours) for s in c.NVIDIA_CONTROLLER_SELECTORS)
    for extra in ({"dra-driver-nvidia-gpu-component": "controller"}, {}):
        disguised = pod("ours", labels={**ours, **extra})
        assert running_nvidia_controllers([disguised]) == []
    renamed = {
        "app.kubernetes.io/part-of": "computedomain",
        **INSTALLS["v0.4.1 fresh"]["podLabels"],
    }
    assert running_nvidia_controllers([pod("renamed", labels=renamed)]) == []


def test_selectors_can_be_overridden() -> None:
    custom = pod("custom", labels={"my-gpu-driver-component": "controller"})
    assert running_nvidia_controllers([custom]) == []
    assert running_nvidia_controllers([custom], ["my-gpu-driver-component=controller"]) == [custom]
    assert running_nvidia_controllers([chart_pod("v0.4.1 fresh")], []) == []


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.notes: list[str] = []
        self.related: list[str | None] = []

    def record(
        self,
        regarding: Any,
        type: str,
        reason: str,
        action: str,
        note: str,
        related: Any = None,
    ) -> bool:
        self.events.append((regarding["metadata"]["name"], type, reason))
        self.notes.append(note)
        self.related.append(None if related is None else related["metadata"]["name"])
        return True


class Metrics:
    def __init__(self) -> None:
        self.missing = -1
        self.concurrent = -1
        self.standing_by: bool | None = None
        self.drift = -1

    def set_standing_by(self, standing_by: bool) -> None:
        self.standing_by = standing_by

    def set_daemon_image_drift(self, count: int) -> None:
        self.drift = count

    def set_crd_missing_status_fields(self, count: int) -> None:
        self.missing = count

    def set_concurrent_controllers(self, count: int) -> None:
        self.concurrent = count


@pytest.fixture
def monitor_parts() -> tuple[CoexistenceMonitor, Recorder, Metrics, list[int]]:
    recorder, metrics, requeues = Recorder(), Metrics(), []
    monitor = CoexistenceMonitor(
        recorder,  # type: ignore[arg-type]
        metrics,
        requeue_all=lambda: requeues.append(1),
    )
    return monitor, recorder, metrics, requeues


def test_monitor_reports_on_the_crd_only_while_leading_once_per_pod(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    """A second controller is the cluster's problem: one Event per pod of it, on the CRD where
    CRDOutdated is (not one per ComputeDomain), and one Resumed there when the stand-by ends."""
    monitor, recorder, metrics, _ = monitor_parts
    assert (metrics.missing, metrics.concurrent) == (0, 0)
    monitor.controller_pods_changed([pod("a")])
    assert metrics.concurrent == 1
    assert recorder.events == []  # a standby writes nothing
    monitor.set_leading(True)
    assert recorder.events == []  # nowhere to say it yet: said once the CRD is known
    monitor.crd_changed(OUR_CRD)
    monitor.controller_pods_changed([pod("a")])
    monitor.controller_pods_changed([pod("a"), pod("b")])
    assert recorder.events == [(CD_CRD_NAME, "Warning", "ConcurrentController")] * 2
    assert "(pod nvidia-dra-driver-gpu/a)" in recorder.notes[0]
    assert "(pod nvidia-dra-driver-gpu/b)" in recorder.notes[1]
    # Each pod its own Event (the recorder makes Events about one object and reason one series).
    assert recorder.related == ["a", "b"]
    monitor.controller_pods_changed([])
    assert metrics.concurrent == 0
    assert recorder.events[2:] == [(CD_CRD_NAME, "Normal", "Resumed")]
    monitor.controller_pods_changed([])
    monitor.crd_changed(OUR_CRD)
    assert len(recorder.events) == 3  # each said once


async def test_each_pod_of_nvidias_controller_is_an_event_of_its_own() -> None:
    """With the real recorder, which makes Events about one object with one reason a series
    whatever their note: a second pod, or NVIDIA's controller back later (a new pod), is a new
    Event naming it, not a count on the first one's."""
    api = FakeApiServer()
    recorder = EventRecorder(api, "example.com/controller", "ours-1", clock=FakeClock())
    monitor = CoexistenceMonitor(recorder, Metrics(), requeue_all=lambda: None)
    task = asyncio.create_task(recorder.run())
    try:
        monitor.set_leading(True)
        monitor.crd_changed(OUR_CRD)
        monitor.controller_pods_changed([pod("a")])
        monitor.controller_pods_changed([])
        monitor.controller_pods_changed([pod("b")])
        await recorder.wait_idle()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [
        body
        for (verb, _, _), body in zip(api.calls, api.bodies, strict=True)
        if verb == "create" and body["reason"] == "ConcurrentController"
    ]
    assert [w["related"]["name"] for w in warnings] == ["a", "b"]
    assert "(pod nvidia-dra-driver-gpu/b)" in warnings[1]["note"]


def test_monitor_stands_by_while_a_pod_of_nvidias_controller_runs(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    """Level-triggered: every CD is requeued when the stand-by starts and when it ends, not
    on every pod event; only a leader's gauge says it stands by."""
    monitor, _, metrics, requeues = monitor_parts
    assert (monitor.standing_by, metrics.standing_by) == ("", False)
    monitor.controller_pods_changed([pod("starting", phase="Pending")])
    assert (monitor.standing_by, requeues) == ("", [])

    monitor.controller_pods_changed([pod("a")])
    assert "so this one stands by" in monitor.standing_by
    assert "scale deployment nvidia-dra-driver-gpu-controller --replicas=0" in monitor.standing_by
    assert (len(requeues), metrics.standing_by) == (1, False)  # not leading: not standing by
    monitor.set_leading(True)
    assert metrics.standing_by is True
    monitor.controller_pods_changed([pod("a"), pod("b")])
    monitor.controller_pods_changed([pod("a", deleting=True), pod("b")])
    assert len(requeues) == 1  # still standing by: nothing to requeue

    monitor.controller_pods_changed([pod("a", deleting=True), pod("b", deleting=True)])
    assert (monitor.standing_by, len(requeues), metrics.standing_by) == ("", 2, False)
    monitor.controller_pods_changed([pod("c")])
    assert (len(requeues), metrics.standing_by) == (3, True)
    monitor.set_leading(False)
    assert metrics.standing_by is False
    assert monitor.standing_by  # a replica that does not lead writes nothing anyway


def test_monitor_requeues_when_the_crd_changes(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    monitor, _, metrics, requeues = monitor_parts
    monitor.crd_changed(OUR_CRD)
    assert requeues == []  # nothing changed from the assumed full schema
    monitor.crd_changed(nvidia_crd())
    assert (monitor.missing, metrics.missing, len(requeues)) == (OURS_ONLY, 5, 1)
    monitor.crd_changed(OUR_CRD)
    assert (monitor.missing, metrics.missing, len(requeues)) == ((), 0, 2)


def test_an_outdated_crd_is_one_warning_on_the_crd_from_the_leader(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    """A cluster-level problem: one Event, on the CRD (kubectl describe crd shows it), not one
    per ComputeDomain; again only when the CRD is replaced by another outdated one."""
    monitor, recorder, _, _ = monitor_parts
    crd = {**nvidia_crd(), "metadata": {**OUR_CRD["metadata"], "uid": "crd-1"}}
    monitor.crd_changed(crd)
    assert recorder.events == []  # a standby writes nothing
    monitor.set_leading(True)
    name = OUR_CRD["metadata"]["name"]
    assert recorder.events == [(name, "Warning", "CRDOutdated")]
    monitor.crd_changed(crd)
    monitor.set_leading(True)
    assert len(recorder.events) == 1
    monitor.crd_changed(OUR_CRD)  # upgraded, then NVIDIA's CRD put back
    monitor.crd_changed({**crd, "metadata": {**crd["metadata"], "uid": "crd-2"}})
    assert recorder.events == [(name, "Warning", "CRDOutdated")] * 2


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_the_caches_watch_every_selector_and_wake_the_monitor(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]], install: str
) -> None:
    """What the informers deliver (one per selector: the apiserver filters by each) reaches
    the gauge, for a pod of each chart's shape."""
    namespace = INSTALLS[install]["namespace"]
    caches = build_caches(None, driver_namespace=namespace)  # type: ignore[arg-type]
    # In every namespace: NVIDIA's controller writes from wherever it runs.
    assert [(i.namespace, i.label_selector) for i in caches.nvidia_controller_pods] == [
        (None, selector) for selector in c.NVIDIA_CONTROLLER_SELECTORS
    ]
    monitor, _, metrics, _ = monitor_parts
    wire(EventRouter(caches, Queue(), orphan_grace=5.0), monitor)  # type: ignore[arg-type]
    running = chart_pod(install, replica_set=True)
    for informer in caches.nvidia_controller_pods:
        labels = running["metadata"]["labels"]
        if matches(parse_selector(informer.label_selector or ""), labels):
            informer.feed("ADDED", trim_pod_identity(copy.deepcopy(running)))
    assert metrics.concurrent == 1
    for informer in caches.nvidia_controller_pods:
        if informer.store.list():
            informer.feed("DELETED", trim_pod_identity(copy.deepcopy(running)))
    assert metrics.concurrent == 0


class Queue:
    def add(self, key: str, priority: int = 0) -> None:
        pass

    def add_after(self, key: str, delay: float, priority: int = 0) -> None:
        pass


def with_leader_election(
    body: dict[str, Any], env: dict[str, str], args: list[str] | None = None
) -> dict[str, Any]:
    """``body`` running NVIDIA's controller command with these settings, as its chart renders
    them (values, and the downward API for others that do not matter here)."""
    container = {
        "name": "compute-domain",
        "command": ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)", *(args or [])],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LOG_VERBOSITY", "value": "4"},
            *({"name": k, "value": v} for k, v in env.items()),
        ],
    }
    return {**body, "spec": {"containers": [container]}}


LE_ON = {
    "LEADER_ELECTION_ENABLED": "true",
    "LEADER_ELECTION_LEASE_LOCK_NAME": "dra-driver-nvidia-gpu-controller",
    "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "nvidia-dra-driver-gpu",
}
SHARED = ("nvidia-dra-driver-gpu", "dra-driver-nvidia-gpu-controller")


def test_nvidias_lease_is_read_as_its_binary_reads_it() -> None:
    """Off by default (its chart's default too); flags win over the environment; the binary's
    own defaults fill what is not given."""
    assert nvidia_lease(pod("a")) is None
    assert (
        nvidia_lease(with_leader_election(pod("a"), {"LEADER_ELECTION_ENABLED": "false"})) is None
    )
    assert nvidia_lease(with_leader_election(pod("a"), LE_ON)) == SHARED
    only_on = with_leader_election(pod("a"), {"LEADER_ELECTION_ENABLED": "1"})
    assert nvidia_lease(only_on) == ("default", "nvidia-compute-domain-controller")
    flags = ["--leader-election-enabled", "--leader-election-lease-lock-name=other"]
    assert nvidia_lease(with_leader_election(pod("a"), {}, flags)) == (
        "default",
        "other",
    )
    # What the caches keep of the pod is enough to tell.
    trimmed = trim_pod_identity(with_leader_election(pod("a"), LE_ON))
    assert nvidia_lease(trimmed) == SHARED
    assert [e["name"] for e in trimmed["spec"]["containers"][0]["env"]] == list(LE_ON)


def test_a_pod_of_nvidias_controller_on_our_own_lease_is_reported_but_no_stand_by() -> None:
    """It cannot write while ours holds the Lease (and ours writes nothing when it does not):
    standing by would leave no controller at all. One on another Lease, or without leader
    election, can write at any time: ours stands by."""
    recorder, metrics, requeues = Recorder(), Metrics(), []
    monitor = CoexistenceMonitor(
        recorder,  # type: ignore[arg-type]
        metrics,
        requeue_all=lambda: requeues.append(1),
        own_lease=SHARED,
    )
    monitor.set_leading(True)
    monitor.crd_changed(OUR_CRD)
    waiting = with_leader_election(pod("waiting"), LE_ON)
    monitor.controller_pods_changed([waiting])
    assert (monitor.standing_by, metrics.standing_by, requeues) == ("", False, [])
    assert metrics.concurrent == 0  # it cannot write beside ours: nothing for an alert
    assert recorder.events == [(CD_CRD_NAME, "Warning", "ConcurrentController")]
    message = concurrent_controller_message(waiting, SHARED)
    assert "same Lease nvidia-dra-driver-gpu/dra-driver-nvidia-gpu-controller" in message

    elsewhere = {**LE_ON, "LEADER_ELECTION_LEASE_LOCK_NAME": "another"}
    for name, body in (("other-lease", elsewhere), ("no-election", {})):
        other = with_leader_election(pod(name), body)
        monitor.controller_pods_changed([waiting, other])
        assert f"pod nvidia-dra-driver-gpu/{name}), so this one stands by" in monitor.standing_by
        assert (metrics.standing_by, metrics.concurrent) == (True, 1)
        monitor.controller_pods_changed([waiting])
        assert monitor.standing_by == ""


V040 = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"
V041 = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"


PLUGIN_NS = "nvidia-dra-driver-gpu"


def plugin_daemonset(
    image: str, *, component: str = "kubelet-plugin", namespace: str = PLUGIN_NS
) -> dict[str, Any]:
    """NVIDIA's kubelet plugin DaemonSet as its v0.4.x chart renders it (fresh install)."""
    return {
        "metadata": {
            "name": "dra-driver-nvidia-gpu-kubelet-plugin",
            "namespace": namespace,
            "uid": "uid-plugin",
            "labels": {"app.kubernetes.io/name": "dra-driver-nvidia-gpu"},
        },
        "spec": {
            "selector": {"matchLabels": {"dra-driver-nvidia-gpu-component": component}},
            "template": {"spec": {"containers": [{"name": "compute-domains", "image": image}]}},
        },
    }


def test_nvidias_kubelet_plugin_on_another_image_than_image_name_is_reported_once() -> None:
    recorder, metrics = Recorder(), Metrics()
    monitor = CoexistenceMonitor(
        recorder,  # type: ignore[arg-type]
        metrics,
        requeue_all=lambda: None,
        daemon_image=V040,
        driver_namespace=PLUGIN_NS,
    )
    monitor.plugin_daemonsets_changed([plugin_daemonset(V040)])
    assert metrics.drift == 0
    upgraded = trim_plugin_daemonset(plugin_daemonset(V041))  # what the cache keeps suffices
    monitor.plugin_daemonsets_changed([upgraded])
    assert (metrics.drift, recorder.events) == (1, [])  # Events only from the leader
    monitor.set_leading(True)
    monitor.plugin_daemonsets_changed([upgraded])
    warning = ("dra-driver-nvidia-gpu-kubelet-plugin", "Warning", "DaemonImageDrift")
    assert recorder.events == [warning]
    # Another of the chart's DaemonSets (not the plugin) says nothing about the daemons.
    monitor.plugin_daemonsets_changed(
        [plugin_daemonset(V040), plugin_daemonset(V041, component="x")]
    )
    assert (metrics.drift, recorder.events) == (0, [warning])
    message = image_drift_message(upgraded, V041, V040)
    assert f"runs {V041}, but the IMEX daemons of new ComputeDomains get {V040}" in message
    assert "Leave IMAGE_NAME unset" in message


# -- One controller per cluster, whatever the install path (issue 29) ----------------------------
OURS_NS = "computedomain-system"


def monitor_for(
    driver_namespace: str, **kwargs: Any
) -> tuple[CoexistenceMonitor, Recorder, Metrics]:
    recorder, metrics = Recorder(), Metrics()
    monitor = CoexistenceMonitor(
        recorder,  # type: ignore[arg-type]
        metrics,
        requeue_all=lambda: None,
        driver_namespace=driver_namespace,
        **kwargs,
    )
    monitor.crd_changed({**OUR_CRD, "metadata": {**OUR_CRD["metadata"], "uid": "crd-1"}})
    monitor.set_leading(True)
    return monitor, recorder, metrics


def test_a_kubelet_plugin_in_another_namespace_makes_ours_stand_by_said_once() -> None:
    """The README's first install path beside NVIDIA's chart: ours in a namespace of its own,
    NVIDIA's plugin (and daemons, cliques) in NVIDIA's. Daemons made there would serve nothing."""
    monitor, recorder, metrics = monitor_for(OURS_NS)
    elsewhere = plugin_daemonset(V041)
    monitor.plugin_daemonsets_changed([elsewhere])
    assert f"runs in namespace {PLUGIN_NS} " in monitor.standing_by
    assert f"driverNamespace={PLUGIN_NS}" in monitor.standing_by
    assert metrics.standing_by is True
    monitor.plugin_daemonsets_changed([elsewhere])
    crd = OUR_CRD["metadata"]["name"]
    assert recorder.events == [(crd, "Warning", "DriverNamespaceMismatch")]
    # Another of NVIDIA's DaemonSets elsewhere (not the plugin) says nothing.
    monitor.plugin_daemonsets_changed([plugin_daemonset(V041, component="webhook")])
    assert monitor.standing_by == ""
    assert recorder.events[-1] == (crd, "Normal", "Resumed")
    # Back again later: said again.
    monitor.plugin_daemonsets_changed([elsewhere])
    assert recorder.events[-1] == (crd, "Warning", "DriverNamespaceMismatch")
    assert len(recorder.events) == 3


def test_a_kubelet_plugin_in_the_driver_namespace_or_none_at_all_is_no_reason() -> None:
    monitor, recorder, metrics = monitor_for(PLUGIN_NS)
    # A second install of NVIDIA's elsewhere too: ours serves the one in its driver namespace.
    monitor.plugin_daemonsets_changed(
        [plugin_daemonset(V041), plugin_daemonset(V041, namespace="other")]
    )
    assert (monitor.standing_by, metrics.standing_by) == ("", False)
    monitor.plugin_daemonsets_changed([])
    assert (monitor.standing_by, recorder.events) == ("", [])


def daemon_daemonset(namespace: str, uid: str = "cd-1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": c.daemon_name(uid),
            "namespace": namespace,
            "uid": f"ds-{uid}-{namespace}",
            "labels": {c.CD_LABEL: uid},
        }
    }


def test_daemons_of_a_live_cd_outside_our_namespaces_make_ours_stand_by() -> None:
    """What another controller does, whatever labels its pods carry: daemons for the same CDs
    made from another namespace (measured: one CD, two DaemonSets, two status writers)."""
    monitor, recorder, metrics = monitor_for(OURS_NS, namespaces=("old-driver-ns",))
    monitor.foreign_daemonsets_changed(
        [daemon_daemonset(OURS_NS), daemon_daemonset("old-driver-ns")]
    )
    assert monitor.standing_by == ""  # ours, and a namespace named in ADDITIONAL_NAMESPACES
    theirs = daemon_daemonset(PLUGIN_NS)
    monitor.foreign_daemonsets_changed([theirs])
    assert f"DaemonSet {PLUGIN_NS}/{c.daemon_name('cd-1')}" in monitor.standing_by
    assert "ADDITIONAL_NAMESPACES" in monitor.standing_by
    assert (metrics.standing_by, metrics.concurrent) == (True, 1)
    monitor.foreign_daemonsets_changed([theirs])
    crd = OUR_CRD["metadata"]["name"]
    assert recorder.events == [(crd, "Warning", "ForeignDaemonSets")]
    monitor.foreign_daemonsets_changed([])
    assert (monitor.standing_by, metrics.concurrent) == ("", 0)
    assert recorder.events[-1] == (crd, "Normal", "Resumed")


def test_the_caches_watch_nvidias_install_and_foreign_daemons_in_every_namespace() -> None:
    caches = build_caches(
        None,  # type: ignore[arg-type]
        driver_namespace=OURS_NS,
        additional_namespaces=["old-driver-ns"],
    )
    assert (caches.nvidia_daemonsets.namespace, caches.foreign_daemonsets.namespace) == (None, None)
    # The apiserver leaves ours out: the store stays empty unless another controller made some.
    assert caches.foreign_daemonsets.field_selector == (
        f"metadata.namespace!={OURS_NS},metadata.namespace!=old-driver-ns"
    )
    assert caches.foreign_daemonsets.label_selector == c.CD_LABEL
    # Those listed at start were made before this process ran: no sign of a controller now.
    caches.foreign_daemonsets.feed_list([daemon_daemonset("torn-down", "live")])
    # Of those made later, only those of live CDs count: what is left of a CD deleted
    # meanwhile is no controller at work.
    caches.foreign_daemonsets.feed("ADDED", daemon_daemonset(PLUGIN_NS, "gone"))
    caches.foreign_daemonsets.feed("ADDED", daemon_daemonset(PLUGIN_NS, "live"))
    cd = {"apiVersion": f"{c.GROUP}/{c.VERSION}", "kind": "ComputeDomain"}
    caches.compute_domains.feed(
        "ADDED", {**cd, "metadata": {"name": "a", "namespace": "u", "uid": "live"}}
    )
    assert [objects_name(ds) for ds in caches.foreign_daemonsets_of_live_cds()] == [
        c.daemon_name("live")
    ]


def objects_name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def test_the_daemon_image_is_the_plugins_in_the_driver_namespace_unless_given() -> None:
    plugins = [plugin_daemonset(V041), plugin_daemonset(V040, namespace="other")]
    assert daemon_image("", plugins, PLUGIN_NS) == V041
    assert daemon_image(V040, plugins, PLUGIN_NS) == V040  # an explicit IMAGE_NAME wins
    assert daemon_image("", plugins, OURS_NS) == c.NVIDIA_DRIVER_IMAGE  # none found there
    trimmed = [trim_plugin_daemonset(ds) for ds in plugins]  # what the cache keeps suffices
    assert daemon_image("", trimmed, PLUGIN_NS) == V041


def test_without_an_explicit_image_nothing_drifts() -> None:
    """The plugin's image is what new daemons get: an upgrade of NVIDIA's release moves both."""
    monitor, recorder, metrics = monitor_for(PLUGIN_NS)
    monitor.plugin_daemonsets_changed([plugin_daemonset(V041)])
    assert (metrics.drift, recorder.events) == (0, [])


def gpu_operator_plugin(image: str) -> dict[str, Any]:
    """GPU Operator's kubelet plugin DaemonSet (its state-dra-driver manifests, contract §21)."""
    return {
        "metadata": {
            "name": "nvidia-dra-driver-kubelet-plugin",
            "namespace": "gpu-operator",
            "uid": "uid-gpu-operator-plugin",
            "labels": {"app.kubernetes.io/name": c.GPU_OPERATOR_NAME},
        },
        "spec": {
            "selector": {"matchLabels": {"app": c.GPU_OPERATOR_KUBELET_PLUGIN_APP}},
            "template": {"spec": {"containers": [{"name": "gpus", "image": image}]}},
        },
    }


def test_gpu_operators_install_is_recognised() -> None:
    plugin = gpu_operator_plugin(V041)
    assert f",{c.GPU_OPERATOR_NAME})" in c.NVIDIA_CHART_DAEMONSETS_SELECTOR  # the apiserver's
    assert daemon_image("", [plugin], "gpu-operator") == V041
    controller = {
        "metadata": {
            "name": "nvidia-dra-driver-controller-abc",
            "namespace": "gpu-operator",
            "uid": "p-1",
            "labels": {"app": c.GPU_OPERATOR_CONTROLLER_APP},
        },
        "spec": {
            "containers": [
                {
                    "name": "compute-domain",
                    "env": [{"name": "LEADER_ELECTION_ENABLED", "value": "false"}],
                }
            ]
        },
        "status": {"phase": "Running"},
    }
    assert [p["metadata"]["name"] for p in running_nvidia_controllers([controller])] == [
        "nvidia-dra-driver-controller-abc"
    ]
