"""Living inside an NVIDIA DRA driver install: the two hazards of a swap, found and reported.

- NVIDIA's chart installs its CRDs once and never upgrades them, so after a swap the installed
  ComputeDomain CRD may lack the status fields we add. The apiserver then prunes them silently:
  conditions vanish, printer columns go empty, and a status written with them would differ from
  the stored one forever (a write loop). We detect the missing fields, write only the upstream
  fields, and say what to run.
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
from computedomain.domain import modes
from computedomain.domain.ports import CoexistenceMetricsSink
from computedomain.domain.selectors import matches, parse_selector
from computedomain.runtime import objects
from computedomain.runtime.event_types import NORMAL, WARNING
from computedomain.runtime.events import EventRecorder

log = logging.getLogger(__name__)

CD_CRD_NAME = c.CD_CRD_NAME
CLIQUE_CRD_NAME = c.CLIQUE_CRD_NAME
CRD_INSTALL_COMMAND = c.CRD_INSTALL_COMMAND
# Status fields NVIDIA's CRD has, and ours besides (defined with the status modes, pure).
UPSTREAM_STATUS_FIELDS = modes.UPSTREAM_STATUS_FIELDS
OUR_STATUS_FIELDS = modes.OUR_STATUS_FIELDS
CRD_UPGRADE_COMMAND = c.CRD_UPGRADE_COMMAND
RESUMED_NOTE = (
    "Nothing makes this controller stand by any more (no other ComputeDomain controller runs, "
    "and NVIDIA's kubelet plugin runs in its driver namespace): it manages every ComputeDomain "
    "again"
)


def missing_status_fields(crd: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Our status fields the installed CD CRD would prune (empty when it keeps them all).

    An absent CRD or one without our version reports nothing here: that is another failure,
    with its own message.
    """
    if crd is None:
        return ()
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != c.VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        status = (schema.get("properties") or {}).get("status") or {}
        if status.get("x-kubernetes-preserve-unknown-fields"):
            return ()
        properties = status.get("properties") or {}
        return tuple(name for name in OUR_STATUS_FIELDS if name not in properties)
    return ()


def crd_outdated_message(missing: Iterable[str]) -> str:
    return (
        f"the installed ComputeDomain CRD lacks status fields {', '.join(missing)}: the apiserver "
        "drops them, so conditions and `kubectl wait --for=condition=Ready` do not work; only "
        f"status.status and status.nodes are written. Upgrade the CRD: {CRD_UPGRADE_COMMAND} "
        "(or apply the chart's crds/, the same files)"
    )


def is_own_pod(labels: Mapping[str, str]) -> bool:
    return any(labels.get(key) == value for key, value in c.OWN_POD_LABELS.items())


def running_nvidia_controllers(
    pods: Iterable[Mapping[str, Any]],
    selectors: Sequence[str] = c.NVIDIA_CONTROLLER_SELECTORS,
) -> list[Mapping[str, Any]]:
    """NVIDIA's controller pods that are running now (matching a selector, not ours, not
    terminating), once each, by name."""
    parsed = [parse_selector(selector) for selector in selectors]
    found: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        meta = objects.meta(pod)
        labels = meta.get("labels") or {}
        if not any(matches(selector, labels) for selector in parsed):
            continue
        if is_own_pod(labels) or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        found[meta.get("uid") or objects.object_key(pod)] = pod
    return sorted(found.values(), key=lambda p: (objects.namespace(p) or "", objects.name(p)))


def nvidia_deployment_of(pod: Mapping[str, Any]) -> str:
    """The Deployment that runs one of NVIDIA's controller pods: its ReplicaSet's name without
    the pod-template hash; else from the chart's selector label ``<name>-component``, whose
    Deployment is ``<name>-controller`` (contract §19)."""
    meta = objects.meta(pod)
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "ReplicaSet" and "-" in str(owner.get("name", "")):
            return str(owner["name"]).rsplit("-", 1)[0]
    labels = meta.get("labels") or {}
    names = [
        key.removesuffix("-component")
        for key, value in labels.items()
        if key.endswith("-component") and "/" not in key and value == c.NVIDIA_CONTROLLER_COMPONENT
    ]
    # v0.4.0 put its fixed legacy label beside the selector label: the latter names the chart.
    chosen = [n for n in names if f"{n}-component" != c.NVIDIA_COMPONENT_LABEL] or names
    return f"{chosen[0]}-controller" if chosen else c.NVIDIA_CONTROLLER_DEPLOYMENT


# NVIDIA's controller's leader-election settings (environment; flags of the same name win) and
# their defaults in its binary: off, Lease default/nvidia-compute-domain-controller.
NVIDIA_LE_ENABLED = "LEADER_ELECTION_ENABLED"
NVIDIA_LE_NAME = "LEADER_ELECTION_LEASE_LOCK_NAME"
NVIDIA_LE_NAMESPACE = "LEADER_ELECTION_LEASE_LOCK_NAMESPACE"
NVIDIA_LE_SETTINGS = {
    NVIDIA_LE_ENABLED: "--leader-election-enabled",
    NVIDIA_LE_NAME: "--leader-election-lease-lock-name",
    NVIDIA_LE_NAMESPACE: "--leader-election-lease-lock-namespace",
}
NVIDIA_LE_DEFAULTS = {
    NVIDIA_LE_ENABLED: "false",
    NVIDIA_LE_NAME: "nvidia-compute-domain-controller",
    NVIDIA_LE_NAMESPACE: "default",
}
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}


def nvidia_lease(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Lease (namespace, name) one of NVIDIA's controller pods must hold before it writes,
    or None: its leader election is off (its chart's default), it writes as soon as it runs."""
    containers = (pod.get("spec") or {}).get("containers") or []
    settings = dict(NVIDIA_LE_DEFAULTS)
    if containers:
        container = containers[0]
        for item in container.get("env") or []:
            if item.get("name") in settings and "valueFrom" not in item:
                settings[item["name"]] = str(item.get("value") or "")
        argv = [*(container.get("command") or [])[1:], *(container.get("args") or [])]
        for env, flag in NVIDIA_LE_SETTINGS.items():
            for index, arg in enumerate(argv):
                if arg == flag and env == NVIDIA_LE_ENABLED:
                    settings[env] = "true"
                elif arg.startswith(f"{flag}="):
                    settings[env] = arg.split("=", 1)[1]
                elif arg == flag and index + 1 < len(argv):
                    settings[env] = argv[index + 1]
    if settings[NVIDIA_LE_ENABLED] not in _TRUE:
        return None
    return settings[NVIDIA_LE_NAMESPACE], settings[NVIDIA_LE_NAME]


def shares_lease(pod: Mapping[str, Any], own_lease: tuple[str, str] | None) -> bool:
    """One of NVIDIA's controller pods elects its leader on the Lease ours leads on: it waits
    while ours leads, so it is no second writer."""
    return own_lease is not None and nvidia_lease(pod) == own_lease


def concurrent_controller_message(
    pod: Mapping[str, Any], shared_lease: tuple[str, str] | None = None
) -> str:
    """What an SRE reads about one of NVIDIA's controller pods running beside ours: ours stands
    by, or (``shared_lease``: both elect on that Lease) the Lease lets one write at a time."""
    meta = objects.meta(pod)
    namespace = meta.get("namespace")
    if shared_lease is None:
        what = (
            "so this one stands by: it writes nothing to ComputeDomains, their children, cliques "
            "or node labels until no such pod runs, and NVIDIA's controller manages them meanwhile"
        )
    else:
        what = (
            f"and elects its leader on the same Lease {shared_lease[0]}/{shared_lease[1]}, so "
            "only the holder of that Lease writes (this one keeps working while it leads)"
        )
    return (
        f"NVIDIA's ComputeDomain controller runs beside this one (pod {namespace}/"
        f"{meta.get('name')}), {what}. Scale it to 0 (kubectl -n {namespace} scale deployment "
        f"{nvidia_deployment_of(pod)} --replicas=0) and keep it there in NVIDIA's Helm values "
        "(controller.replicas=0)"
    )


def trim_pod_identity(pod: dict[str, Any]) -> dict[str, Any]:
    """What we read of a controller pod: identity, labels, owner, phase."""
    meta = objects.meta(pod)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "ownerReferences",
                "deletionTimestamp",
            )
            if key in meta
        },
        # Its leader-election settings: whether it can write while ours leads (nvidia_lease).
        "spec": {
            "containers": [
                {
                    "command": container.get("command") or [],
                    "args": container.get("args") or [],
                    "env": [
                        item
                        for item in container.get("env") or []
                        if item.get("name") in NVIDIA_LE_SETTINGS
                    ],
                }
                for container in ((pod.get("spec") or {}).get("containers") or [])[:1]
            ]
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def trim_plugin_daemonset(ds: dict[str, Any]) -> dict[str, Any]:
    """What we read of one of NVIDIA's DaemonSets: identity, selector, container images."""
    meta = objects.meta(ds)
    spec = ds.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion") if key in meta
        },
        "spec": {
            "selector": spec.get("selector") or {},
            "template": {
                "spec": {
                    "containers": [
                        {"name": item.get("name"), "image": item.get("image")}
                        for item in containers
                    ]
                }
            },
        },
    }


def kubelet_plugin_image(ds: Mapping[str, Any]) -> str | None:
    """The driver image one of NVIDIA's DaemonSets runs if it is its kubelet plugin (its pods
    selected by `<name>-component: kubelet-plugin`, or GPU Operator's
    `app: nvidia-dra-driver-kubelet-plugin`); None for any other DaemonSet."""
    spec = ds.get("spec") or {}
    match = ((spec.get("selector") or {}).get("matchLabels")) or {}
    if not any(
        (key.endswith("-component") and value == c.NVIDIA_KUBELET_PLUGIN_COMPONENT)
        or (key == "app" and value == c.GPU_OPERATOR_KUBELET_PLUGIN_APP)
        for key, value in match.items()
    ):
        return None
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    images = [item.get("image") for item in containers if item.get("image")]
    return str(images[0]) if images else None


def kubelet_plugins(
    daemonsets: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], str]]:
    """NVIDIA's kubelet plugin DaemonSets among ``daemonsets`` with the image each runs, by
    namespace and name."""
    found = [(ds, image) for ds in daemonsets if (image := kubelet_plugin_image(ds)) is not None]
    return sorted(found, key=lambda item: objects.object_key(item[0]))


def daemon_image(explicit: str, daemonsets: Iterable[Mapping[str, Any]], namespace: str) -> str:
    """The image of new IMEX daemons: IMAGE_NAME when given; else the image NVIDIA's kubelet
    plugin runs in the driver namespace (NVIDIA ships one driver image for both, and the two must
    be the same release); else, with no plugin found, NVIDIA_DRIVER_IMAGE."""
    if explicit:
        return explicit
    for ds, image in kubelet_plugins(daemonsets):
        if objects.namespace(ds) == namespace:
            return image
    return c.NVIDIA_DRIVER_IMAGE


def driver_namespace_problem(
    plugins: Sequence[tuple[Mapping[str, Any], str]], driver_namespace: str
) -> str:
    """Why this controller must not write while NVIDIA's kubelet plugin (``plugins``, from
    ``kubelet_plugins``) runs, but not in its driver namespace; empty when the plugin runs
    there, or nowhere.

    The plugin finds IMEX daemons and cliques in its own namespace only: daemons created
    elsewhere never make a workload ready, and NVIDIA's install manages ComputeDomains from
    there (a README install in a namespace of its own, beside NVIDIA's chart, did exactly that).
    """
    if not plugins or any(objects.namespace(ds) == driver_namespace for ds, _ in plugins):
        return ""
    namespaces = sorted({objects.namespace(ds) or "" for ds, _ in plugins})
    first = plugins[0][0]
    there = namespaces[0]
    return (
        f"NVIDIA's kubelet plugin runs in namespace {', '.join(namespaces)} (DaemonSet "
        f"{objects.object_key(first)}), not in this controller's driver namespace "
        f"{driver_namespace}: it finds IMEX daemons and cliques in its own namespace only, so "
        "this one stands by and writes nothing to ComputeDomains. Install it for that "
        f"namespace: Helm --set driverNamespace={there}, or NAMESPACE={there} "
        "(kustomize: manifests/nvidia)"
    )


def foreign_daemonsets_problem(
    daemonsets: Iterable[Mapping[str, Any]], namespaces: Sequence[str]
) -> str:
    """Why this controller must not write while IMEX daemon DaemonSets of live ComputeDomains
    exist outside ``namespaces`` (driver and additional): another controller made them, and
    manages those ComputeDomains from there. Empty when there are none."""
    foreign = sorted(
        (ds for ds in daemonsets if objects.namespace(ds) not in namespaces),
        key=objects.object_key,
    )
    if not foreign:
        return ""
    there = objects.namespace(foreign[0]) or ""
    return (
        f"IMEX daemon DaemonSet {objects.object_key(foreign[0])} of a live ComputeDomain "
        "is outside this controller's namespaces "
        f"({', '.join(namespaces)}): another ComputeDomain controller manages them from {there} "
        "(NVIDIA's, or a second install of this one), so this one stands by and writes nothing "
        f"to ComputeDomains. Remove the other controller, or install this one with driver "
        f"namespace {there}; if {there} is a driver namespace left behind, name it in "
        "ADDITIONAL_NAMESPACES"
    )


def image_drift_message(ds: Mapping[str, Any], plugin_image: str, daemon_image: str) -> str:
    meta = objects.meta(ds)
    return (
        f"NVIDIA's kubelet plugin (DaemonSet {meta.get('namespace')}/{meta.get('name')}) runs "
        f"{plugin_image}, but the IMEX daemons of new ComputeDomains get {daemon_image} "
        "(IMAGE_NAME): the two must be the same driver release. Leave IMAGE_NAME unset (Helm: "
        "image.tag empty) and new daemons get the plugin's image, or set it to "
        f"{plugin_image}"
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
