"""End-of-test audits against the apiserver's truth: an informer's cache against a fresh LIST,
and every ComputeDomain's status against the cliques and daemon pods it is projected from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.watching import watch_objects
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.informer import Informer


async def cache_differences(informer: Informer, kube: KubeClient) -> list[str]:
    """How ``informer``'s store differs from a LIST with its own selectors: keys missing or
    extra, and objects whose resourceVersion differs (where the informer keeps every version;
    one that drops ``unchanged`` updates may hold an older one that equals the listed one)."""
    listed = await kube.list(
        informer.resource,
        namespace=informer.namespace,
        label_selector=informer.label_selector,
        field_selector=informer.field_selector,
        metadata_only=informer.metadata_only,
        table=informer.table,
    )
    truth: dict[str, dict[str, Any]] = {}
    for item in listed["items"]:
        item.setdefault("apiVersion", informer.resource.api_version)
        item.setdefault("kind", informer.resource.kind)
        prepared = informer.transform(item) if informer.transform is not None else item
        truth[objects.object_key(prepared)] = prepared
    held = {objects.object_key(obj): obj for obj in informer.store.list()}
    problems = [f"{informer.name}: missing {key}" for key in sorted(set(truth) - set(held))]
    problems += [f"{informer.name}: extra {key}" for key in sorted(set(held) - set(truth))]
    for key in sorted(set(truth) & set(held)):
        cached, fresh = held[key], truth[key]
        if objects.resource_version(cached) == objects.resource_version(fresh):
            continue
        if informer.unchanged is not None and informer.unchanged(cached, fresh):
            continue
        problems.append(
            f"{informer.name}: {key} at rv {objects.resource_version(cached)}, "
            f"apiserver has {objects.resource_version(fresh)}"
        )
    return problems


async def caches_differences(informers: Iterable[Informer], kube: KubeClient) -> list[str]:
    """``cache_differences`` of every watching informer (a polling one is late by design)."""
    problems: list[str] = []
    for informer in informers:
        if informer.poll_interval is None:
            problems += await cache_differences(informer, kube)
    return problems


def _entries(cliques: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    return {
        d["nodeName"]: (d.get("ipAddress") or "", d.get("status") or c.STATUS_NOT_READY)
        for clique in cliques
        for d in clique.get("daemons") or []
    }


async def status_liars(kube: KubeClient, namespace: str, driver_namespace: str) -> list[str]:
    """ComputeDomains (clique protocol, fabric nodes) whose status disagrees with the
    apiserver: ``status.nodes`` must name exactly the clique entries with their address and
    state, and every Ready daemon pod on a node must have an entry (a live daemon whose entry
    was removed under it is a lie the status would keep forever)."""
    cds = (await kube.list(COMPUTE_DOMAINS, namespace))["items"]
    cliques = (await kube.list(CLIQUES, driver_namespace))["items"]
    pods = (await kube.list(r.PODS, driver_namespace, label_selector=c.CD_LABEL))["items"]
    problems: list[str] = []
    for cd in cds:
        if objects.meta(cd).get("deletionTimestamp"):
            continue
        uid, name = objects.uid(cd), objects.name(cd)
        mine = [cl for cl in cliques if (objects.labels(cl)).get(c.CD_LABEL) == uid]
        entries = _entries(mine)
        shown = {
            n["name"]: (n.get("ipAddress") or "", n.get("status") or c.STATUS_NOT_READY)
            for n in (cd.get("status") or {}).get("nodes") or []
        }
        if shown != entries:
            problems.append(f"{name}: status.nodes {shown} but the cliques hold {entries}")
        for pod in pods:
            if objects.labels(pod).get(c.CD_LABEL) != uid:
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            ready = objects.condition_true(pod, "Ready")
            if ready and node and node not in entries:
                problems.append(f"{name}: daemon {objects.name(pod)} on {node} is Ready, no entry")
    return problems


async def names_left_by_deleted_cds(
    kube: KubeClient, namespace: str, *, finalized_within: float = 300, gc_within: float = 120
) -> list[str]:
    """Once every CD in ``namespace`` is gone: what still names a CD (children, cliques, node
    labels). Cliques get ``gc_within`` seconds for the garbage collector; the rest is removed
    by the time a CD is gone."""
    await watch_objects(
        kube,
        COMPUTE_DOMAINS,
        lambda items: not items,
        namespace=namespace,
        within=finalized_within,
        what="every CD finalized",
    )
    # Cliques go last, by garbage collection after their daemon pods (their owners).
    with contextlib.suppress(TimeoutError):  # what is left is the answer
        await watch_objects(
            kube,
            CLIQUES,
            lambda items: not items,
            label_selector=c.CD_LABEL,
            within=gc_within,
            what="cliques collected",
        )
    found: list[str] = []
    for res in (r.DAEMONSETS, r.RESOURCE_CLAIM_TEMPLATES, CLIQUES, r.NODES):
        listed = await kube.list(res, label_selector=c.CD_LABEL)
        found += [f"{res.kind} {objects.object_key(item)}" for item in listed["items"]]
    return found
