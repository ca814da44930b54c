"""The one place that does I/O for a ComputeDomain: read caches, decide, write the differences.

Level-triggered: a reconcile gets only a key, looks at the cached state of the CD and
everything labelled with its UID, and moves the world towards the desired state. It writes
nothing when nothing differs, so a steady state costs no API calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomain, ComputeDomainNode, Condition
from computedomain.domain import coexistence, desired, projection, topology
from computedomain.domain import conditions as cond
from computedomain.domain.caches import (
    BY_CD,
    BY_GPU_CLIQUE,
    BY_UID,
    CLIQUES,
    COMPUTE_DOMAINS,
    Caches,
)
from computedomain.domain.conditions import ChildState, ChildStatus, DomainView
from computedomain.domain.desired import DaemonSettings
from computedomain.domain.ports import DomainMetricsSink
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.controller import Result
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

ORPHAN_KEY_PREFIX = "orphan:"
FOREIGN_RECHECK_SECONDS = 60.0
DELETION_POLL_SECONDS = 2.0
LABEL_PATH = "/metadata/labels/" + c.CD_LABEL.replace("~", "~0").replace("/", "~1")


def orphan_key(uid: str) -> str:
    return f"{ORPHAN_KEY_PREFIX}{uid}"


@dataclass(frozen=True)
class ReconcilerSettings:
    daemon: DaemonSettings
    managed_namespaces: tuple[str, ...]
    cliques_enabled: bool
    orphan_grace_period: float = 5.0
    daemon_pod_wait_timeout: float = 60.0


@dataclass
class _DomainMemory:
    """What one process remembers about a CD between reconciles (metrics and grace timers)."""

    node_first_seen: dict[str, float] = field(default_factory=dict)
    stale_entry_since: dict[tuple[str, str], float] = field(default_factory=dict)
    reported_ready: bool = False
    # While the installed CRD prunes conditions, the last ones we computed live only here.
    conditions: list[Condition] = field(default_factory=list)
    reported_crd_outdated: bool = False


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    value = (_meta(obj).get("labels") or {}).get(key)
    return value if isinstance(value, str) else None


def _ref(obj: Mapping[str, Any], res: Resource) -> dict[str, Any]:
    meta = _meta(obj)
    ref = {"apiVersion": res.api_version, "kind": res.kind, "name": meta.get("name")}
    for key in ("namespace", "uid", "resourceVersion"):
        if meta.get(key):
            ref[key] = meta[key]
    return ref


def _node_ref(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def _finalizer_remove_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    finalizers = list(_meta(obj).get("finalizers") or [])
    if c.FINALIZER not in finalizers:
        return None
    index = finalizers.index(c.FINALIZER)
    path = f"/metadata/finalizers/{index}"
    return [{"op": "test", "path": path, "value": c.FINALIZER}, {"op": "remove", "path": path}]


def _finalizer_add_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    meta = _meta(obj)
    finalizers = meta.get("finalizers")
    if finalizers and c.FINALIZER in finalizers:
        return None
    guard = {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
    if finalizers:
        return [guard, {"op": "add", "path": "/metadata/finalizers/-", "value": c.FINALIZER}]
    return [guard, {"op": "add", "path": "/metadata/finalizers", "value": [c.FINALIZER]}]


class ComputeDomainReconciler:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        settings: ReconcilerSettings,
        recorder: EventRecorder,
        metrics: DomainMetricsSink,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._caches = caches
        self._settings = settings
        self._recorder = recorder
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._memory: dict[str, _DomainMemory] = {}
        # (resource plural, namespace, name) -> monotonic time a foreign object was last confirmed.
        self._foreign: dict[tuple[str, str, str], float] = {}
        self._orphan_seen: dict[str, float] = {}

    # ------------------------------------------------------------------ entry point

    async def reconcile(self, key: str) -> Result:
        if key.startswith(ORPHAN_KEY_PREFIX):
            return await self._reconcile_orphan(key.removeprefix(ORPHAN_KEY_PREFIX))
        obj = self._caches.cds.get(key)
        if obj is None:
            return Result()
        cd = ComputeDomain.model_validate(obj)
        if cd.metadata.deletion_timestamp:
            return await self._finalize(cd, obj)
        return await self._reconcile_live(cd, obj)

    # ------------------------------------------------------------------ live domain

    async def _reconcile_live(self, cd: ComputeDomain, obj: dict[str, Any]) -> Result:
        patch = _finalizer_add_patch(obj)
        if patch is not None:
            # Finalizer first: no child may exist that a deletion would not clean up.
            try:
                obj = await self._client.patch(
                    COMPUTE_DOMAINS,
                    cd.metadata.name,
                    patch,
                    cd.metadata.namespace,
                    patch_type="json",
                )
            except ApiError as err:
                if err.is_not_found:  # deleted since the cache saw it; the watch says so next
                    return Result()
                raise
            self._caches.cds.observe_write(obj)
            cd = ComputeDomain.model_validate(obj)

        children, requeue = await self._ensure_children(cd, obj)
        result = await self._update_status(cd, obj, children)
        if requeue is not None:
            result = Result(requeue_after=min(requeue, result.requeue_after or requeue))
        return result

    async def _ensure_children(
        self, cd: ComputeDomain, obj: dict[str, Any]
    ) -> tuple[dict[str, ChildState], float | None]:
        uid = cd.metadata.uid
        s = self._settings
        driver_ns = s.daemon.driver_namespace
        name = c.daemon_name(uid)
        states: dict[str, ChildState] = {}
        requeue: float | None = None

        # Any DaemonSet labelled with this UID in a managed namespace serves, including one made
        # by an older controller with generateName; never create a second one.
        daemon_rct_cached = self._caches.claim_templates.store.get(f"{driver_ns}/{name}")
        existing_rcts = [
            rct
            for rct in self._caches.claim_templates.store.by_index(BY_CD, uid)
            if _label(rct, c.TARGET_LABEL) == c.TARGET_DAEMON
            and _meta(rct).get("namespace") in s.managed_namespaces
        ]
        if existing_rcts or (daemon_rct_cached and _label(daemon_rct_cached, c.CD_LABEL) == uid):
            states["daemonClaimTemplate"] = ChildState(ChildStatus.OK)
        else:
            states["daemonClaimTemplate"] = await self._create_child(
                cd,
                obj,
                r.RESOURCE_CLAIM_TEMPLATES,
                desired.daemon_resource_claim_template(cd, s.daemon),
            )

        existing_ds = self._caches.daemonsets_of(uid)
        if existing_ds:
            states["daemonSet"] = ChildState(ChildStatus.OK)
        else:
            states["daemonSet"] = await self._create_child(
                cd, obj, r.DAEMONSETS, desired.daemon_daemonset(cd, s.daemon)
            )

        workload_ns = cd.metadata.namespace
        workload_existing = [
            rct
            for rct in self._caches.claim_templates.store.by_index(BY_CD, uid)
            if _label(rct, c.TARGET_LABEL) == c.TARGET_WORKLOAD
        ]
        if workload_existing:
            states["workloadClaimTemplate"] = ChildState(ChildStatus.OK)
        elif cd.spec is None:
            # The CRD lets an object without spec through; it names no template to create.
            states["workloadClaimTemplate"] = ChildState(
                ChildStatus.MISSING, "spec.channel.resourceClaimTemplate.name is not set"
            )
        else:
            states["workloadClaimTemplate"] = await self._create_child(
                cd,
                obj,
                r.RESOURCE_CLAIM_TEMPLATES,
                desired.workload_resource_claim_template(cd),
                namespace=workload_ns,
            )

        if any(state.status is ChildStatus.FOREIGN for state in states.values()):
            requeue = FOREIGN_RECHECK_SECONDS
        return states, requeue

    async def _create_child(
        self,
        cd: ComputeDomain,
        cd_obj: Mapping[str, Any],
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
    ) -> ChildState:
        meta = body["metadata"]
        namespace = namespace or meta["namespace"]
        name = meta["name"]
        memo_key = (res.plural, namespace, name)
        confirmed = self._foreign.get(memo_key)
        if confirmed is not None and self._clock.now() - confirmed < FOREIGN_RECHECK_SECONDS:
            return self._foreign_state(res, namespace, name)
        try:
            created = await self._client.create(res, body, namespace)
        except ApiError as err:
            if err.is_forbidden and "being terminated" in err.message:
                # The namespace is going away; its deletion reaches this CD next, not an error.
                return ChildState(ChildStatus.MISSING, f"namespace {namespace} is being deleted")
            if not err.is_already_exists:
                raise
            current = await self._client.get(res, name, namespace)
            if _label(current, c.CD_LABEL) == cd.metadata.uid:
                # Ours, created by an earlier attempt whose response we lost: adopt it.
                self._observe_child(res, current)
                self._foreign.pop(memo_key, None)
                return ChildState(ChildStatus.OK)
            self._foreign[memo_key] = self._clock.now()
            self._metrics.inc_foreign_refused(res.kind)
            self._recorder.record(
                cd_obj,
                "Warning",
                "ForeignObject",
                "Create",
                f"{res.kind} {namespace}/{name} exists and does not belong to this "
                "ComputeDomain; left untouched",
                related=_ref(current, res),
            )
            return self._foreign_state(res, namespace, name)
        self._observe_child(res, created)
        self._foreign.pop(memo_key, None)
        self._recorder.record(
            cd_obj,
            "Normal",
            "Created",
            "Create",
            f"Created {res.kind} {namespace}/{name}",
            related=_ref(created, res),
        )
        log.info("Created %s", res.kind, extra={"object": f"{namespace}/{name}"})
        # The create succeeded, so the child exists: reporting it as such now saves a second
        # status write once the watch catches up.
        return ChildState(ChildStatus.OK)

    @staticmethod
    def _foreign_state(res: Resource, namespace: str, name: str) -> ChildState:
        return ChildState(
            ChildStatus.FOREIGN,
            f"{res.kind} {namespace}/{name} exists but does not carry this ComputeDomain's "
            "UID label; rename or remove it",
        )

    def _observe_child(self, res: Resource, obj: dict[str, Any]) -> None:
        if res is r.DAEMONSETS:
            for informer in self._caches.daemonsets:
                if informer.namespace == _meta(obj).get("namespace"):
                    informer.store.observe_write(obj)
        elif res is r.RESOURCE_CLAIM_TEMPLATES:
            self._caches.claim_templates.store.observe_write(obj)

    # ------------------------------------------------------------------ status

    def _domain_view(
        self, cd: ComputeDomain, children: Mapping[str, ChildState], deleting: bool = False
    ) -> tuple[DomainView, list[ComputeDomainNode], bool]:
        uid = cd.metadata.uid
        pods = [projection.daemon_pod_from_dict(p) for p in self._caches.pods_of(uid)]
        cliques = [projection.clique_from_dict(cl) for cl in self._caches.cliques_of(uid)]
        daemonsets = self._caches.daemonsets_of(uid)
        legacy = (
            projection.uses_legacy_protocol(daemonsets[0])
            if daemonsets
            else not self._settings.cliques_enabled
        )
        current = list(cd.status.nodes or []) if cd.status else []
        nodes = projection.project_nodes(cliques, pods, legacy=legacy, current=current)

        node_store = self._caches.nodes.store
        member_nodes = {n.name for n in nodes} | {
            _meta(node)["name"] for node in node_store.by_index(BY_CD, uid)
        }
        spanned = topology.cliques_spanned(member_nodes, node_store.get)
        shared: dict[str, set[str]] = {}
        for clique in spanned:
            others = {
                other
                for node in node_store.by_index(BY_GPU_CLIQUE, clique)
                if (other := _label(node, c.CD_LABEL)) and other != uid
            }
            names = set()
            for other_uid in others:
                for other_cd in self._caches.cds.by_index(BY_UID, other_uid):
                    other_meta = _meta(other_cd)
                    names.add(f"{other_meta.get('namespace')}/{other_meta.get('name')}")
            if names:
                shared[clique] = names
        view = DomainView(
            nodes=tuple(nodes),
            pods=tuple(pods),
            num_nodes=cd.spec.num_nodes if cd.spec else 0,
            children=dict(children),
            cliques=frozenset(spanned),
            shared_cliques={k: frozenset(v) for k, v in shared.items()},
            deleting=deleting,
            missing_service_account=self._caches.missing_daemon_service_account(),
        )
        return view, nodes, legacy

    async def _update_status(
        self,
        cd: ComputeDomain,
        obj: dict[str, Any],
        children: Mapping[str, ChildState],
        deleting: bool = False,
    ) -> Result:
        view, nodes, legacy = self._domain_view(cd, children, deleting)
        result = Result()
        if not legacy:
            wait = await self._prune_cliques(cd)
            if wait is not None:
                result = Result(requeue_after=wait)

        now = self._clock.wall()
        memory = self._memory.setdefault(cd.metadata.uid, _DomainMemory())
        missing_fields = self._caches.missing_status_fields()
        previous_status = cd.status
        if missing_fields:
            previous_conditions = memory.conditions
        else:
            previous_conditions = list(previous_status.conditions or []) if previous_status else []
        conditions = cond.conditions_for(
            view, cd.metadata.generation or 0, now, previous_conditions
        )
        counts = cond.status_counts(nodes, view.cliques)
        desired_status: dict[str, Any] = {
            "status": projection.global_status(nodes, view.num_nodes),
            "nodes": [n.to_dict() for n in nodes] or None,
            "conditions": [x.to_dict() for x in conditions],
            "observedGeneration": cd.metadata.generation,
            "nodeCount": counts[0],
            "readyNodeCount": counts[1],
            "cliqueCount": counts[2],
        }
        self._observe_metrics(cd, view, conditions, nodes, desired_status["status"])
        if missing_fields:
            # Writing fields the apiserver prunes would differ from the stored status forever.
            desired_status = {k: desired_status[k] for k in coexistence.UPSTREAM_STATUS_FIELDS}
            if not memory.reported_crd_outdated:
                memory.reported_crd_outdated = True
                message = coexistence.crd_outdated_message(missing_fields)
                self._recorder.record(obj, "Warning", "CRDOutdated", "Reconcile", message)
            memory.conditions = conditions
        current_status = dict(obj.get("status") or {})
        if _status_equal(current_status, desired_status):
            if missing_fields and conditions != previous_conditions:
                # No write carries them, yet their transitions are still news.
                self._emit_transitions(obj, cd, previous_conditions, conditions, nodes)
            return result

        patch = {"metadata": {"resourceVersion": _meta(obj)["resourceVersion"]}}
        patch["status"] = desired_status
        try:
            written = await self._client.patch(
                COMPUTE_DOMAINS,
                cd.metadata.name,
                patch,
                cd.metadata.namespace,
                patch_type="merge",
                subresource="status",
            )
        except ApiError as err:
            if err.is_conflict:
                # Someone (a legacy daemon) wrote in between; the watch event requeues us.
                return Result(requeue=True)
            if err.is_not_found:  # gone without our finalizer; orphan handling takes over
                return Result()
            raise
        self._caches.cds.observe_write(written)
        self._emit_transitions(obj, cd, previous_conditions, conditions, nodes)
        return result

    def _observe_metrics(
        self,
        cd: ComputeDomain,
        view: DomainView,
        conditions: list[Condition],
        nodes: list[ComputeDomainNode],
        global_status: str,
    ) -> None:
        memory = self._memory.setdefault(cd.metadata.uid, _DomainMemory())
        now = self._clock.now()
        by_status: dict[str, int] = {c.STATUS_READY: 0, c.STATUS_NOT_READY: 0}
        for node in nodes:
            by_status[node.status or c.STATUS_NOT_READY] = (
                by_status.get(node.status or c.STATUS_NOT_READY, 0) + 1
            )
            first = memory.node_first_seen.setdefault(node.name, now)
            if node.status == c.STATUS_READY and first >= 0:
                self._metrics.observe_daemon_ready_latency(now - first)
                memory.node_first_seen[node.name] = -1.0  # observed once per join
        for gone in set(memory.node_first_seen) - {n.name for n in nodes}:
            del memory.node_first_seen[gone]
        by_type = {x.type: x.status for x in conditions}
        if by_type.get("Ready") == "True" and not memory.reported_ready:
            memory.reported_ready = True
            created = cd.metadata.creation_timestamp
            if created is not None:
                self._metrics.observe_time_to_ready(
                    max(0.0, (self._clock.wall() - _as_datetime(created)).total_seconds())
                )
        self._metrics.observe_domain(
            cd.metadata.namespace,
            cd.metadata.name,
            conditions=by_type,
            nodes_by_status=by_status,
            cliques=len(view.cliques),
            global_status=global_status,
        )

    def _emit_transitions(
        self,
        obj: Mapping[str, Any],
        cd: ComputeDomain,
        before: list[Condition],
        after: list[Condition],
        nodes: list[ComputeDomainNode],
    ) -> None:
        old_nodes = {n.name: n for n in (cd.status.nodes or [])} if cd.status else {}
        new_nodes = {n.name: n for n in nodes}
        # `related` names the Node, so each node's join or leave is its own event series.
        for name in sorted(new_nodes.keys() - old_nodes.keys()):
            self._recorder.record(
                obj,
                "Normal",
                "NodeJoined",
                "Join",
                f"Node {name} joined (clique {new_nodes[name].clique_id or 'none'})",
                related=_node_ref(name),
            )
        for name in sorted(old_nodes.keys() - new_nodes.keys()):
            self._recorder.record(
                obj, "Normal", "NodeLeft", "Leave", f"Node {name} left", related=_node_ref(name)
            )
        old = {x.type: x for x in before}
        # Ready often repeats a sub-condition's verdict word for word; one event says it.
        recorded: set[tuple[str, str, str]] = set()
        for new in after:
            prior = old.get(new.type)
            if prior is not None and prior.status == new.status and prior.reason == new.reason:
                continue
            warn = new.status == "False" and new.type in cond.WARNING_CONDITIONS
            if new.type == "Ready" or warn:
                # Waiting for a workload is where every new CD starts: not a warning.
                healthy = new.status == "True" or new.reason == "WaitingForWorkload"
                kind = "Normal" if healthy else "Warning"
                reason = new.reason if new.status != "True" else "Ready"
                note = new.message or new.reason
                if (kind, reason, note) not in recorded:
                    recorded.add((kind, reason, note))
                    self._recorder.record(obj, kind, reason, "Reconcile", note)

    async def _prune_cliques(self, cd: ComputeDomain) -> float | None:
        """Drop clique entries whose node runs no daemon pod of this CD in that clique.

        An entry is pruned only after it stayed stale for the grace period: the pod cache may
        lag a daemon that has just written its entry.
        """
        uid = cd.metadata.uid
        memory = self._memory.setdefault(uid, _DomainMemory())
        pods = [projection.daemon_pod_from_dict(p) for p in self._caches.pods_of(uid)]
        now = self._clock.now()
        wait: float | None = None
        seen: set[tuple[str, str]] = set()
        for raw in self._caches.cliques_of(uid):
            clique = projection.clique_from_dict(raw)
            stale = projection.stale_clique_entries(clique, pods)
            due = []
            for node_name in stale:
                key = (clique.metadata.name, node_name)
                seen.add(key)
                since = memory.stale_entry_since.setdefault(key, now)
                remaining = self._settings.orphan_grace_period - (now - since)
                if remaining <= 0:
                    due.append(node_name)
                else:
                    wait = remaining if wait is None else min(wait, remaining)
            if due:
                body = dict(raw)
                body["daemons"] = [
                    d for d in raw.get("daemons") or [] if d.get("nodeName") not in due
                ]
                try:
                    written = await self._client.replace(CLIQUES, body, _meta(raw).get("namespace"))
                except ApiError as err:
                    if err.is_conflict or err.is_not_found:
                        return 0.5
                    raise
                for informer in self._caches.cliques:
                    if informer.namespace == _meta(raw).get("namespace"):
                        informer.store.observe_write(written)
                for node_name in due:
                    memory.stale_entry_since.pop((clique.metadata.name, node_name), None)
                log.info(
                    "Pruned stale clique entries",
                    extra={"clique": clique.metadata.name, "nodes": due},
                )
        for key in set(memory.stale_entry_since) - seen:
            del memory.stale_entry_since[key]
        return wait

    # ------------------------------------------------------------------ deletion

    async def _finalize(self, cd: ComputeDomain, obj: dict[str, Any]) -> Result:
        """Contract §10.1 order, each step on its own and idempotent, never hanging."""
        if c.FINALIZER not in (cd.metadata.finalizers or []):
            return Result()
        uid = cd.metadata.uid
        removed = await self.remove_children_of(uid, regarding=obj)
        await self.remove_node_labels(uid)

        pods = self._caches.pods_of(uid)
        deleted_at = _as_datetime(cd.metadata.deletion_timestamp or "")
        waited = (self._clock.wall() - deleted_at).total_seconds()
        if pods and waited < self._settings.daemon_pod_wait_timeout:
            # Keep the CD while its daemon pods stop, so the plugin can still resolve it (#380).
            await self._update_status(cd, obj, {}, deleting=True)
            return Result(requeue_after=DELETION_POLL_SECONDS)
        if pods:
            names = ", ".join(sorted(_meta(p).get("name", "?") for p in pods))
            self._recorder.record(
                obj,
                "Warning",
                "DaemonPodsStuck",
                "Delete",
                f"Daemon pods still present after {waited:.0f}s, removing the finalizer "
                f"anyway: {names}",
            )
        if removed:
            # Children are deleted but still visible in the caches; their events requeue us.
            return Result(requeue_after=DELETION_POLL_SECONDS)

        patch = _finalizer_remove_patch(obj)
        if patch is not None:
            try:
                await self._client.patch(
                    COMPUTE_DOMAINS,
                    cd.metadata.name,
                    patch,
                    cd.metadata.namespace,
                    patch_type="json",
                )
            except ApiError as err:
                if err.is_not_found:
                    pass
                elif err.is_invalid:
                    return Result(requeue=True)  # finalizers moved; re-read from the cache
                else:
                    raise
        self._recorder.record(obj, "Normal", "CleanedUp", "Delete", "Removed all children")
        self._metrics.forget_domain(cd.metadata.namespace, cd.metadata.name)
        self._memory.pop(uid, None)
        log.info("Finalized ComputeDomain", extra={"uid": uid})
        return Result()

    async def remove_children_of(self, uid: str, regarding: Mapping[str, Any] | None = None) -> int:
        """Delete every child labelled with `uid` and strip our finalizer from each.

        Returns how many children are still visible (deleted but not yet gone from the caches).
        Each child is handled on its own, so a DaemonSet removed by hand never blocks the RCTs.
        """
        remaining = 0
        targets: list[tuple[Resource, dict[str, Any]]] = [
            (r.RESOURCE_CLAIM_TEMPLATES, rct)
            for rct in self._caches.claim_templates.store.by_index(BY_CD, uid)
            if _label(rct, c.TARGET_LABEL) == c.TARGET_WORKLOAD
        ]
        targets += [
            (r.RESOURCE_CLAIM_TEMPLATES, rct)
            for rct in self._caches.claim_templates.store.by_index(BY_CD, uid)
            if _label(rct, c.TARGET_LABEL) != c.TARGET_WORKLOAD
        ]
        targets += [(r.DAEMONSETS, ds) for ds in self._caches.daemonsets_of(uid)]
        for res, child in targets:
            remaining += 1
            meta = _meta(child)
            name, namespace = meta["name"], meta.get("namespace")
            issued_delete = not meta.get("deletionTimestamp")
            try:
                if issued_delete:
                    await self._client.delete(res, name, namespace)
                patch = _finalizer_remove_patch(child)
                if patch is not None:
                    written = await self._client.patch(
                        res, name, patch, namespace, patch_type="json"
                    )
                    self._observe_child(res, written)
            except ApiError as err:
                if err.is_not_found:
                    continue
                if err.is_invalid:  # finalizer list changed under us; next pass re-reads
                    continue
                raise
            if regarding is not None and issued_delete:
                self._recorder.record(
                    regarding,
                    "Normal",
                    "Deleted",
                    "Delete",
                    f"Deleted {res.kind} {namespace}/{name}",
                    related=_ref(child, res),
                )
        return remaining

    async def remove_node_labels(self, uid: str) -> int:
        """Strip the CD label from Nodes still naming `uid`, only while it still names `uid`.

        Uses a live, label-selected LIST (the cache may lag a label the plugin just set) and a
        JSON patch guarded by a `test`, so a label that moved to another CD is left alone.
        """
        listing = await self._client.list(r.NODES, label_selector=f"{c.CD_LABEL}={uid}")
        removed = 0
        for node in listing.get("items") or []:
            name = _meta(node)["name"]
            patch = [
                {"op": "test", "path": LABEL_PATH, "value": uid},
                {"op": "remove", "path": LABEL_PATH},
            ]
            try:
                written = await self._client.patch(r.NODES, name, patch, patch_type="json")
            except ApiError as err:
                if err.is_not_found or err.is_invalid:
                    continue  # gone, or the label now belongs to someone else
                raise
            self._caches.nodes.store.observe_write(written)
            removed += 1
        return removed

    # ------------------------------------------------------------------ orphans

    async def _reconcile_orphan(self, uid: str) -> Result:
        """Remove children and node labels naming a CD UID that no CD has any more.

        Acts only after every cache synced and the UID stayed unknown for the grace period,
        then confirms with a live LIST: our cache may lag a brand-new CD.
        """
        if uid in self._caches.known_uids():
            self._orphan_seen.pop(uid, None)
            return Result()
        if not self._caches.synced:
            return Result(requeue_after=1.0)
        now = self._clock.now()
        first = self._orphan_seen.setdefault(uid, now)
        remaining = self._settings.orphan_grace_period - (now - first)
        if remaining > 0:
            return Result(requeue_after=remaining)
        live = await self._client.list(COMPUTE_DOMAINS)
        if any(_meta(item).get("uid") == uid for item in live.get("items") or []):
            self._orphan_seen.pop(uid, None)
            return Result()
        children = await self.remove_children_of(uid)
        labels = await self.remove_node_labels(uid)
        cleaned = children + labels
        if cleaned:
            self._metrics.inc_orphan_cleanup("children" if children else "nodeLabels")
            log.info(
                "Removed orphans of a deleted ComputeDomain",
                extra={"uid": uid, "children": children, "nodeLabels": labels},
            )
        if children:
            return Result(requeue_after=DELETION_POLL_SECONDS)
        self._orphan_seen.pop(uid, None)
        self._memory.pop(uid, None)
        return Result()


def _as_datetime(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _normalise_status(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in status.items() if v is not None}
    if "nodes" in out:
        out["nodes"] = sorted(out["nodes"], key=lambda n: n.get("name", ""))
    if not out.get("nodes"):
        out.pop("nodes", None)
    if "conditions" in out:
        out["conditions"] = sorted(out["conditions"], key=lambda x: x.get("type", ""))
    return out


def _status_equal(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return _normalise_status(current) == _normalise_status(wanted)
