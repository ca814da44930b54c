"""Living inside an NVIDIA DRA driver install: the two hazards of a swap, found and reported by
``CoexistenceMonitor``, the one stateful part. What it reads is pure and lives apart:
``crdschema.py`` (an outdated CRD), ``nvidiacontroller.py`` (NVIDIA's controller pods, their
Lease, daemons outside our namespaces) and ``kubeletplugin.py`` (the plugin's image and
namespace).

- NVIDIA's chart installs its CRDs once and never upgrades them, so after a swap the installed
  ComputeDomain CRD may lack the status fields we add, and the apiserver prunes them silently
  (``crdschema.py``). We detect the missing fields, write only the upstream fields, and say
  what to run.
- NVIDIA's controller running beside ours (a later `helm upgrade` of NVIDIA's chart scales it
  back to 1, or ours was installed in a namespace of its own beside NVIDIA's chart) would mean
  two writers of status, children, cliques, node labels and finalizers. Its pods carry the
  selector label of NVIDIA's chart (contract §19) or GPU Operator's, found in every namespace by
  `NVIDIA_CONTROLLER_SELECTORS` (one informer each). Two more signs, whatever the other
  controller's labels: IMEX daemon DaemonSets of live CDs outside our namespaces (what another
  controller does), and NVIDIA's kubelet plugin running in another namespace than our driver
  namespace (daemons ours made would serve no workload). A pod whose leader election is on and
  names the Lease ours leads on cannot write while ours leads (it waits for that Lease), so it
  is only reported: standing by then would leave no controller writing at all. While any other
  one runs (phase Running, not terminating; its leader election is off by default), ours
  **stands by**: ``standing_by`` gives the reason, the reconciler then writes nothing to any
  ComputeDomain or what belongs to it, and the leader's API client refuses such writes still in
  flight. We say so loudly: a log line per transition, the gauges, and a Warning Event per such
  pod, recorded once on the ComputeDomain CRD (a cluster's problem, not each CD's: told where
  ``CRDOutdated`` is, and shown by ``kubectl cdom doctor``), then a Normal ``Resumed`` there
  when the stand-by ends. When the last one is gone every CD is reconciled again
  (level-triggered).
  No condition on the CDs says it: NVIDIA's controller replaces the whole status with its own
  two fields on each of its writes (docs/operations.md, Stand-by).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.crdschema import (
    CRD_INSTALL_COMMAND,
    crd_outdated_message,
    missing_status_fields,
)
from computedomain.domain.kubeletplugin import (
    driver_namespace_problem,
    image_drift_message,
    kubelet_plugins,
)
from computedomain.domain.nvidiacontroller import (
    concurrent_controller_message,
    foreign_daemonsets_problem,
    running_nvidia_controllers,
    shares_lease,
)
from computedomain.domain.ports import CoexistenceMetricsSink
from computedomain.runtime import objects
from computedomain.runtime.event_types import NORMAL, WARNING
from computedomain.runtime.events import EventRecorder

log = logging.getLogger(__name__)

RESUMED_NOTE = (
    "Nothing makes this controller stand by any more (no other ComputeDomain controller runs, "
    "and NVIDIA's kubelet plugin runs in its driver namespace): it manages every ComputeDomain "
    "again"
)


class CoexistenceMonitor:
    """Reacts to the CD CRD, NVIDIA's controller pods and kubelet plugin, and daemon DaemonSets
    outside our namespaces; every replica logs and exports, only the leader records Events (a
    standby writes nothing).

    Three things make ours stand by, each found cluster-wide (any of them alone means a second
    writer, or daemons nothing would use): a running pod of NVIDIA's controller that can write
    beside ours; NVIDIA's kubelet plugin running, but not in our driver namespace; IMEX daemon
    DaemonSets of live ComputeDomains outside our namespaces.

    ``requeue_all`` runs when what every reconcile depends on changed: the CRD's status fields,
    and the start and the end of a stand-by."""

    def __init__(
        self,
        recorder: EventRecorder,
        metrics: CoexistenceMetricsSink,
        requeue_all: Callable[[], None],
        selectors: Sequence[str] = c.NVIDIA_CONTROLLER_SELECTORS,
        own_lease: tuple[str, str] | None = None,
        daemon_image: str = "",
        driver_namespace: str = "",
        namespaces: Sequence[str] = (),
    ) -> None:
        self._recorder = recorder
        self._selectors = tuple(selectors)
        # The Lease ours leads on (None: leader election off). A pod of NVIDIA's controller
        # that must hold the same Lease to write cannot write while ours leads: no stand-by.
        self._own_lease = own_lease
        # IMAGE_NAME as given ("": new daemons get the plugin's image, which cannot drift).
        self._daemon_image = daemon_image
        self._driver_namespace = driver_namespace
        # The namespaces whose daemon DaemonSets are ours: driver and additional ones.
        self._namespaces = tuple(dict.fromkeys([driver_namespace, *namespaces]))
        self._drift: dict[str, tuple[Mapping[str, Any], str]] = {}
        self._reported_drift: set[tuple[str, str]] = set()
        self._metrics = metrics
        self._requeue_all = requeue_all
        self._leading = False
        self.missing: tuple[str, ...] = ()
        # The outdated CRD, and what of it was reported: one Event on the CRD per outdated
        # schema, for the whole cluster (not one per ComputeDomain).
        self._crd: Mapping[str, Any] | None = None
        self._reported_crd: tuple[str, tuple[str, ...]] | None = None
        self.missing_crds: list[str] = []
        self._running: dict[str, Mapping[str, Any]] = {}
        self._writers: list[Mapping[str, Any]] = []
        # The other two reasons to stand by ("" when none), each said once on the CRD.
        self._namespace_problem = ""
        self._foreign_problem = ""
        self._foreign_count = 0
        self._reported_problems: set[str] = set()
        # Pods reported by an Event on the CRD, and whether a stand-by was (a Resumed ends it).
        self._reported_pods: set[str] = set()
        self._reported_standby = False
        self._standing_by = ""
        metrics.set_crd_missing_status_fields(0)
        metrics.set_concurrent_controllers(0)
        metrics.set_standing_by(False)
        metrics.set_daemon_image_drift(0)

    @property
    def standing_by(self) -> str:
        """Why this controller must write nothing to ComputeDomains now; empty when it may."""
        return self._standing_by

    # CRD ---------------------------------------------------------------------------------------
    def crd_changed(self, crd: Mapping[str, Any] | None) -> None:
        missing = missing_status_fields(crd)
        self._crd = crd
        if missing == self.missing:
            self._report()  # what waited for the CRD to be known, e.g. a concurrent controller
            return
        self.missing = missing
        self._metrics.set_crd_missing_status_fields(len(missing))
        if missing:
            log.warning("ComputeDomain CRD is outdated: %s", crd_outdated_message(missing))
        else:
            log.info("ComputeDomain CRD has every status field; writing conditions again")
        self._report()
        self._requeue_all()

    def crds_present(self, missing: list[str]) -> None:
        """Our CRDs the apiserver lacks: nothing works without them; say which and how."""
        if missing == self.missing_crds:
            return
        self.missing_crds = missing
        if missing:
            log.error("%s", self.crd_problem)
        else:
            log.info("ComputeDomain CRDs are installed")

    @property
    def crd_problem(self) -> str:
        """One line naming the CRDs not installed and the command that installs them."""
        if not self.missing_crds:
            return ""
        return (
            f"CustomResourceDefinition {', '.join(self.missing_crds)} not installed: install "
            f"with {CRD_INSTALL_COMMAND} (the Helm chart installs them on its first install)"
        )

    # NVIDIA's controller ------------------------------------------------------------------------
    def controller_pods_changed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        running = {
            objects.meta(p).get("uid", ""): p
            for p in running_nvidia_controllers(pods, self._selectors)
        }
        for uid, pod in running.items():
            if uid not in self._running:
                log.warning("Concurrent controller: %s", self._message(pod))
        for uid, pod in self._running.items():
            if uid not in running:
                meta = objects.meta(pod)
                log.info(
                    "NVIDIA's controller pod %s/%s no longer runs",
                    meta.get("namespace"),
                    meta.get("name"),
                )
        self._running = running
        self._reported_pods &= running.keys()
        # Only those that can write beside ours: one waiting on our Lease is reported by Event.
        self._writers = [pod for pod in running.values() if not self._shares_our_lease(pod)]
        self._stand_by_or_resume()

    def foreign_daemonsets_changed(self, daemonsets: Iterable[Mapping[str, Any]]) -> None:
        """IMEX daemon DaemonSets of live ComputeDomains outside our namespaces (another
        controller's work), whoever made them."""
        foreign = [ds for ds in daemonsets if objects.namespace(ds) not in self._namespaces]
        problem = foreign_daemonsets_problem(foreign, self._namespaces)
        self._foreign_count = len({objects.namespace(ds) for ds in foreign})
        if problem != self._foreign_problem:
            if problem:
                log.warning("Concurrent controller: %s", problem)
            self._foreign_problem = problem
            self._stand_by_or_resume()

    def _stand_by_or_resume(self) -> None:
        self._metrics.set_concurrent_controllers(len(self._writers) + self._foreign_count)
        was_standing_by = bool(self._standing_by)
        reasons = [
            concurrent_controller_message(self._writers[0]) if self._writers else "",
            self._namespace_problem,
            self._foreign_problem,
        ]
        self._standing_by = next((reason for reason in reasons if reason), "")
        if bool(self._standing_by) != was_standing_by:
            if self._standing_by:
                log.warning(
                    "Standing by: writing nothing to ComputeDomains, their children, cliques or "
                    "node labels: %s",
                    self._standing_by,
                )
            else:
                log.info(
                    "Resuming: nothing makes this controller stand by; reconciling every "
                    "ComputeDomain"
                )
            # Every CD, both ways: each says it stands by (an Event), or gets back to work.
            self._requeue_all()
        self._report()

    # NVIDIA's kubelet plugin ---------------------------------------------------------------------
    def plugin_daemonsets_changed(self, daemonsets: Iterable[Mapping[str, Any]]) -> None:
        """NVIDIA's kubelet plugin, in any namespace: it must run in our driver namespace; and
        after an upgrade of NVIDIA's release it runs the new driver image, while an IMAGE_NAME
        given explicitly still names the old: new IMEX daemons would run another release."""
        plugins = kubelet_plugins(daemonsets)
        drift: dict[str, tuple[Mapping[str, Any], str]] = {}
        for ds, image in plugins:
            if objects.namespace(ds) != self._driver_namespace:
                continue
            if self._daemon_image and image != self._daemon_image:
                drift[objects.meta(ds).get("uid") or objects.object_key(ds)] = (ds, image)
        for uid, (ds, image) in drift.items():
            if self._drift.get(uid, (None, None))[1] != image:
                message = image_drift_message(ds, image, self._daemon_image)
                log.warning("Daemon image drift: %s", message)
        if self._drift and not drift:
            log.info("The kubelet plugin and IMAGE_NAME name the same driver image again")
        self._drift = drift
        self._metrics.set_daemon_image_drift(len(drift))
        problem = driver_namespace_problem(plugins, self._driver_namespace)
        if problem != self._namespace_problem:
            if problem:
                log.warning("Driver namespace: %s", problem)
            self._namespace_problem = problem
            self._stand_by_or_resume()
        else:
            self._report()

    def set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._report()

    def _report(self) -> None:
        self._metrics.set_standing_by(self._leading and bool(self._standing_by))
        if not self._leading:
            return
        if self.missing and self._crd is not None:
            reported = (objects.meta(self._crd).get("uid") or "", self.missing)
            if reported != self._reported_crd:
                self._reported_crd = reported
                message = crd_outdated_message(self.missing)
                self._recorder.record(self._crd, WARNING, "CRDOutdated", "Detect", message)
        if self._crd is not None:
            # Cluster-wide problems go on the CRD, once each: one per NVIDIA pod, not one per CD.
            # The pod is the Event's `related` object: Events about the same object with the
            # same reason are one series whatever their note, so without it a second pod (or
            # NVIDIA's controller back after a swap) would only count up the first pod's Event.
            for uid, pod in self._running.items():
                if uid in self._reported_pods:
                    continue
                self._reported_pods.add(uid)
                self._recorder.record(
                    self._crd,
                    WARNING,
                    "ConcurrentController",
                    "Detect",
                    self._message(pod),
                    related=pod,
                )
            problems = (
                ("DriverNamespaceMismatch", self._namespace_problem),
                ("ForeignDaemonSets", self._foreign_problem),
            )
            # Said again should one come back after it ended.
            self._reported_problems &= {problem for _, problem in problems}
            for reason, problem in problems:
                if problem and problem not in self._reported_problems:
                    self._reported_problems.add(problem)
                    self._recorder.record(self._crd, WARNING, reason, "Detect", problem)
            if self._standing_by:
                self._reported_standby = True
            elif self._reported_standby:
                self._reported_standby = False
                self._recorder.record(self._crd, NORMAL, "Resumed", "Detect", RESUMED_NOTE)
        for uid, (ds, image) in self._drift.items():
            if (uid, image) in self._reported_drift:
                continue
            self._reported_drift.add((uid, image))
            message = image_drift_message(ds, image, self._daemon_image)
            self._recorder.record(ds, WARNING, "DaemonImageDrift", "Detect", message)

    def _shares_our_lease(self, pod: Mapping[str, Any]) -> bool:
        return shares_lease(pod, self._own_lease)

    def _message(self, pod: Mapping[str, Any]) -> str:
        return concurrent_controller_message(
            pod, self._own_lease if self._shares_our_lease(pod) else None
        )
