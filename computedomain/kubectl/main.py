"""The ``kubectl-computedomain`` console script (also ``kubectl-cdom``): kubectl finds it on the
PATH as the plugin ``kubectl computedomain`` / ``kubectl cdom``.

Global flags follow kubectl's: ``--kubeconfig``, ``--context``, ``--as``/``--as-group``/``--as-uid``
(impersonation headers on every request) and ``--version``; a namespaced command defaults to the
context's namespace (else the pod's in-cluster, else ``default``).

Exit codes: 0 done (``--fits``: the job fits; ``describe``: the domain is Ready in a clique of its
own; ``doctor``: no check failed), 1 ``--fits``: it does not fit now, ``describe``: a broken link
was named, ``doctor``: a check failed, 2 bad usage, 3 the cluster could not be read or the domain
does not exist (one line says why; a refusal, 403, too: ``cliques`` when Nodes cannot be listed,
``describe`` when the domain or its namespace's pods and ResourceClaimTemplates cannot be read).
``describe`` as a user who may read only the domain's namespace still answers 0 or 1 from what it
read, and names in one line what it skipped as forbidden (Nodes, the IMEX daemons, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import aiohttp
import yaml

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.capacity import clique_capacity
from computedomain.domain.childkinds import CHILDREN, ChildKind, Scope
from computedomain.domain.crdschema import CD_CRD_NAME, CLIQUE_CRD_NAME
from computedomain.kubectl import doctor, shipped
from computedomain.kubectl.cliques import fits_message, table
from computedomain.kubectl.describe import (
    Chain,
    Obj,
    channel_domain_ids,
    first_broken_link,
    first_unready_daemon,
    regarding,
    render,
)
from computedomain.runtime.client import ApiError, Impersonation, KubeClient, load_client
from computedomain.runtime.errors import StartupError
from computedomain.runtime.resources import (
    CUSTOM_RESOURCE_DEFINITIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    EVENTS,
    LEASES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    SERVICE_ACCOUNTS,
    SUBJECT_ACCESS_REVIEWS,
    Resource,
)

EXIT_NO_FIT = 1
EXIT_USAGE = 2
EXIT_CLUSTER = 3
OWN_PODS = ",".join(f"{key}={value}" for key, value in c.OWN_POD_LABELS.items())
# A person waits on these: a few requests, no need for the controller's budget.
QPS, BURST = 20.0, 40
# A daemon's log comes from its node's kubelet: not worth a slow describe when it cannot answer.
LOG_WITHIN = 5.0


class ClusterError(RuntimeError):
    """The cluster could not be read; the message is one line."""


class ForbiddenError(ClusterError):
    """A read the user's RBAC refuses (403): a command may skip it and say so."""


class Unseen:
    """What a command skipped because RBAC refused it, in the order it was asked for (reads
    run concurrently: refusals arrive in any order, the line names them in a fixed one)."""

    def __init__(self) -> None:
        self._asked: list[str] = []
        self._refused: set[str] = set()

    @property
    def names(self) -> list[str]:
        return [name for name in dict.fromkeys(self._asked) if name in self._refused]

    def read(self, name: str, reading: Awaitable[list[Obj]]) -> Awaitable[list[Obj]]:
        """``reading``'s items, or none when it is forbidden (then ``name`` is named)."""
        self._asked.append(name)
        return self._read(name, reading)

    async def _read(self, name: str, reading: Awaitable[list[Obj]]) -> list[Obj]:
        try:
            return await reading
        except ForbiddenError:
            self._refused.add(name)
            return []


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl computedomain",
        description="NVIDIA ComputeDomains at a glance (also `kubectl cdom`). The global flags "
        "go before the command, as kubectl's: `kubectl cdom --context prod describe job`.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kubectl-cdom {distribution_version()}",
        help="print the plugin's version and exit",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, in-cluster credentials, ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        help="the kubeconfig context to use (default: its current-context); its namespace is "
        "the default of -n",
    )
    parser.add_argument(
        "--as",
        dest="as_user",
        metavar="USER",
        help="act as this user, e.g. system:serviceaccount:NAMESPACE:NAME (Impersonate-User "
        "header on every request; you need RBAC's impersonate verb on that user)",
    )
    parser.add_argument(
        "--as-group",
        dest="as_groups",
        metavar="GROUP",
        action="append",
        default=[],
        help="with --as: act as a member of this group too (repeat for more)",
    )
    parser.add_argument(
        "--as-uid",
        metavar="UID",
        help="with --as: act with this user UID too (Impersonate-Uid header; you need RBAC's "
        "impersonate verb on uids)",
    )
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        help="one of these (`kubectl cdom COMMAND --help` explains its flags):",
    )
    cliques = commands.add_parser(
        "cliques",
        help="per NVLink clique: nodes, Ready, held by a domain, free; which domains hold them",
        description=(
            "One row per NVLink clique (node label nvidia.com/gpu.clique), then <label "
            "missing>: nodes whose label is gone for now while the daemon of the domain holding "
            "them reports a clique (NVIDIA's kubelet plugin removes the label while it "
            "restarts), then <none>: nodes without one. Per row: nodes in total, Ready, held by "
            "a ComputeDomain (node label resource.nvidia.com/computeDomain), free (Ready, "
            "schedulable, held by none), and the domains holding nodes there. One LIST of Nodes "
            "and one of ComputeDomains, both cluster-wide: it needs list on nodes (a "
            "ClusterRole); without list on computedomains in all namespaces it reads those of "
            "the context's namespace and shows the other holders by UID."
        ),
    )
    cliques.add_argument(
        "--fits",
        type=_positive,
        metavar="N",
        help="say whether an N-node job gets one NVLink domain now, and where (the tightest "
        "clique with N free nodes); exit 1 when it does not fit. N from 1",
    )
    _output_flag(cliques)
    describe = commands.add_parser(
        "describe",
        help="a ComputeDomain's chain on one screen and its first broken link, with what to do",
        description=(
            "The domain's conditions, its children, per node its IMEX daemon and clique entry, "
            "its workload pods and the latest Events of each, then the first broken link in the "
            "order a domain comes up (controller, children, workload, node, daemon, clique, "
            "Ready; then whether it is one NVLink clique of its own), named, with what to do. "
            "Exit 0 when the domain is Ready in a clique of its own, 1 when a link is broken. "
            "Reads in the domain's namespace what lives there (the domain, its workload pods and "
            "template, Events); Nodes, the IMEX daemons and their DaemonSets, cliques, "
            "controller pods and other namespaces' claims cluster-wide: what RBAC forbids is "
            "skipped and named in one line, and the verdict comes from what was read."
        ),
    )
    describe.add_argument("name", help="the ComputeDomain's name")
    describe.add_argument(
        "-n",
        "--namespace",
        help="its namespace (default: the context's namespace, else the pod's when run "
        "in-cluster, else default)",
    )
    checkup = commands.add_parser(
        "doctor",
        help="check the install end to end: one line per check, with the fix",
        description=(
            "Checks, in the order to fix them: the CRDs (present, serving v1beta1, with our "
            "status fields), the DRA API (resource.k8s.io/v1) and NVIDIA's two DeviceClasses, "
            "NVIDIA's kubelet plugin Ready on every Ready node with nvidia.com/gpu.clique, our "
            "controller leading (its Lease renewed in time) and the Lease's holder one of our "
            "running pods, this plugin's version against our controller's image, every verb "
            "our controller uses reviewed for its pod's ServiceAccount (SubjectAccessReviews), "
            "no NVIDIA controller running in any namespace (by its pods' labels, and by "
            "Deployments running compute-domain-controller), the IMEX daemons' image equal to "
            "the kubelet plugin's, the daemon ServiceAccount and its permissions, GPU nodes "
            "without a clique label. Each fix is a command that needs no checkout (our CRDs: "
            "`kubectl cdom crds`). Exit 0 when no check failed (warnings allowed), 1 when one "
            "did. The driver namespace and the Lease are read from our controller's pod unless "
            "given."
        ),
    )
    checkup.add_argument(
        "--driver-namespace",
        help="where the IMEX DaemonSets and the daemon ServiceAccount live (default: our "
        "controller pod's NAMESPACE, else the kubelet plugin's namespace)",
    )
    _output_flag(checkup)
    checkup.add_argument(
        "--lease",
        metavar="NAMESPACE/NAME",
        type=_lease_ref,
        help="the Lease our controller leads on (default: from its pod, else "
        f"<driver namespace>/{doctor.DEFAULT_LEASE_NAME})",
    )
    commands.add_parser(
        "crds",
        help="print the CRDs this plugin ships (pipe to kubectl apply --server-side -f -)",
        description=(
            "Our ComputeDomain and ComputeDomainClique CRDs (this release's), as one YAML "
            f"stream: `{shipped.CRDS_COMMAND} | kubectl apply --server-side -f -` installs them, "
            "with --force-conflicts upgrades NVIDIA's. Reads no cluster."
        ),
    )
    return parser


def _output_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml"],
        default="table",
        help="output format (default: table)",
    )


def _print_document(document: dict[str, Any], output: str) -> None:
    if output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")


def _lease_ref(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


async def _list(
    client: KubeClient,
    what: Resource,
    namespace: str | None = None,
    selector: str | None = None,
) -> list[dict[str, Any]]:
    try:
        listing = await client.list(what, namespace, selector)
    except ApiError as err:
        if err.is_not_found and what is COMPUTE_DOMAINS:
            print(
                "warning: the ComputeDomain CRD is not installed; no node is shown as held",
                file=sys.stderr,
            )
            return []
        if err.is_not_found and what is CLIQUES:
            return []  # an older CRD set: the daemons write status.nodes instead
        where = f" in namespace {namespace}" if namespace else ""
        if err.is_forbidden:
            raise ForbiddenError(f"cannot list {what.plural}{where}: {err}") from None
        raise ClusterError(f"cannot list {what.plural}{where}: {err}") from None
    items: list[dict[str, Any]] = listing.get("items") or []
    return items


async def _cliques(args: argparse.Namespace) -> int:
    client = await _client(args)
    try:
        nodes, (domains, hidden) = await asyncio.gather(_nodes(client), _domains(client))
    finally:
        await client.close()
    if hidden:
        print(f"not shown (forbidden): {hidden}", file=sys.stderr)
    rows = clique_capacity(nodes, domains)
    fit: tuple[bool, str] | None = fits_message(rows, args.fits) if args.fits else None
    if args.output == "table":
        print(table(rows))
        if fit is not None:
            print(fit[1])
    else:
        document: dict[str, Any] = {"cliques": [row.as_dict() for row in rows]}
        if fit is not None:
            document["fits"] = {"nodes": args.fits, "fits": fit[0], "message": fit[1]}
        _print_document(document, args.output)
    return EXIT_NO_FIT if fit is not None and not fit[0] else 0


async def _nodes(client: KubeClient) -> list[Obj]:
    try:
        return await _list(client, NODES)
    except ForbiddenError as err:
        raise ClusterError(
            f"{err}: cliques reads every Node; a ClusterRole with list on nodes and "
            "computedomains.resource.nvidia.com, bound to you by a ClusterRoleBinding, grants it"
        ) from None


async def _domains(client: KubeClient) -> tuple[list[Obj], str]:
    """Every ComputeDomain, else (list forbidden cluster-wide) those of the context's
    namespace, and what is not shown then: the nodes other domains hold show their UID."""
    try:
        return await _list(client, COMPUTE_DOMAINS), ""
    except ForbiddenError:
        pass
    unseen = Unseen()
    domains = await unseen.read("", _list(client, COMPUTE_DOMAINS, client.namespace))
    outside = "" if unseen.names else f" outside namespace {client.namespace}"
    return domains, f"the names of ComputeDomains{outside} (shown by UID)"


async def _describe(args: argparse.Namespace) -> int:
    client = await _client(args)
    try:
        chain = await gather_chain(client, args.namespace or client.namespace, args.name)
    finally:
        await client.close()
    finding = first_broken_link(chain)
    print(render(chain, finding))
    return 0 if finding is None else 1


async def gather_chain(client: KubeClient, namespace: str, name: str) -> Chain:
    """Everything of one domain, one LIST per kind (label-selected by its UID where the
    controller labels the objects; its workload pods by the claim template they use).

    What lives in the domain's namespace is read there, and must be readable: the domain, its
    workload pods and template. The rest is cluster-wide (its IMEX daemons and their
    DaemonSets and templates, Nodes, cliques, other namespaces' claims, controller pods) or
    Events: what RBAC forbids is skipped and named in ``chain.not_shown``, so a user who may
    read only their namespace still gets the chain and verdict as far as it goes."""
    try:
        cd = await client.get(COMPUTE_DOMAINS, name, namespace)
    except ApiError as err:
        if err.is_not_found:
            raise ClusterError(f"ComputeDomain {namespace}/{name} not found") from None
        raise ClusterError(f"cannot read ComputeDomain {namespace}/{name}: {err}") from None
    uid = cd["metadata"]["uid"]
    selector = f"{c.CD_LABEL}={uid}"
    chain = Chain(cd)
    unseen = Unseen()
    # Started now, run beside the reads below (it names its refusals after theirs: it starts
    # only when they are all asked).
    controller_pods = asyncio.ensure_future(_controller_pods(client, unseen))
    children = _read_children(client, unseen, cd)
    (
        *found,
        chain.daemon_pods,
        chain.cliques,
        chain.nodes,
        claims,
        pods,
    ) = await asyncio.gather(
        *children.values(),
        unseen.read("IMEX daemon pods", _list(client, PODS, None, selector)),
        unseen.read("ComputeDomainCliques", _list(client, CLIQUES, None, selector)),
        unseen.read("nodes", _list(client, NODES, None, selector)),
        unseen.read("ResourceClaims of other namespaces", _list(client, RESOURCE_CLAIMS)),
        _list(client, PODS, namespace),
    )
    chain.children = dict(zip(children, found, strict=True))
    our_pods, chain.nvidia_controller_pods = await controller_pods
    ours = doctor.our_pod(our_pods)
    seen = [o["metadata"]["namespace"] for o in chain.daemonsets + chain.nvidia_controller_pods]
    chain.own_lease = doctor.our_lease(ours, doctor.driver_namespace(ours, *seen))
    chain.foreign_claims = [
        claim
        for claim in claims
        if claim["metadata"]["namespace"] != namespace and uid in channel_domain_ids(claim)
    ]
    chain.workload_pods = [
        pod
        for pod in pods
        if any(
            claim.get("resourceClaimTemplateName") == chain.template_name
            for claim in (pod.get("spec") or {}).get("resourceClaims") or []
        )
    ]
    about = {("ComputeDomain", name)}
    about |= {("Pod", o["metadata"]["name"]) for o in chain.workload_pods + chain.daemon_pods}
    every_child = [
        (child.resource.kind, obj) for child in CHILDREN for obj in chain.children[child.kind]
    ]
    about |= {(kind, obj["metadata"]["name"]) for kind, obj in every_child}
    namespaces = {namespace, *(obj["metadata"]["namespace"] for _, obj in every_child)}
    listed, chain.daemon_log = await asyncio.gather(
        asyncio.gather(
            *(
                unseen.read(f"Events in {ns}", _list(client, EVENTS, ns))
                for ns in sorted(namespaces)
            )
        ),
        _daemon_log(client, first_unready_daemon(chain)),
    )
    chain.events = [event for events in listed for event in events if regarding(event) in about]
    chain.not_shown = unseen.names
    return chain


def _read_children(
    client: KubeClient, unseen: Unseen, cd: Obj
) -> dict[ChildKind, Awaitable[list[Obj]]]:
    """One LIST per child kind, selected by the domain's UID (and the kind's target label).
    A kind beside the domain is read in its namespace, which must be readable, and is the one
    at its own name; one beside the daemons is read across namespaces (the driver namespace is
    not known here), skipped and named when RBAC forbids it."""
    selector = f"{c.CD_LABEL}={cd['metadata']['uid']}"
    reads: dict[ChildKind, Awaitable[list[Obj]]] = {}
    for child in CHILDREN:
        if child.scope is Scope.CD_NAMESPACE:
            namespace, name = child.locate(cd, "")
            reads[child.kind] = _named(name, _list(client, child.resource, namespace, selector))
        else:
            target = f",{c.TARGET_LABEL}={child.target}" if child.target else ""
            listing = _list(client, child.resource, None, selector + target)
            reads[child.kind] = unseen.read(f"IMEX {child.display}s", listing)
    return reads


async def _named(name: str, reading: Awaitable[list[Obj]]) -> list[Obj]:
    return [obj for obj in await reading if obj["metadata"]["name"] == name]


async def _daemon_log(client: KubeClient, daemon: dict[str, Any] | None) -> str:
    """The last lines of a daemon's container (its previous run's after a restart), or ""
    when the kubelet cannot say (no kubelet serves the node, no permission, no log yet)."""
    if daemon is None:
        return ""
    statuses = (daemon.get("status") or {}).get("containerStatuses") or []
    restarted = any(s.get("restartCount") for s in statuses)
    meta = daemon["metadata"]
    try:
        return await asyncio.wait_for(
            client.pod_log(meta["namespace"], meta["name"], c.DAEMON_CONTAINER, previous=restarted),
            LOG_WITHIN,
        )
    except (ApiError, TimeoutError, aiohttp.ClientError, OSError):
        return ""


async def _controller_pods(
    client: KubeClient, unseen: Unseen | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our controller's pods and NVIDIA's (one LIST per selector of its chart), all namespaces;
    with ``unseen``, a refused LIST is none found, and named there."""

    def read(selector: str) -> Awaitable[list[Obj]]:
        reading = _list(client, PODS, None, selector)
        return reading if unseen is None else unseen.read("controller pods", reading)

    ours, *nvidia = await asyncio.gather(
        read(OWN_PODS), *(read(selector) for selector in c.NVIDIA_CONTROLLER_SELECTORS)
    )
    return ours, [pod for found in nvidia for pod in found]


async def _doctor(args: argparse.Namespace) -> int:
    client = await _client(args)
    try:
        install = await gather_install(client, args.driver_namespace, args.lease)
    finally:
        await client.close()
    checks = doctor.diagnose(install)
    if args.output == "table":
        print(doctor.render(checks))
    else:
        _print_document({"checks": [asdict(check) for check in checks]}, args.output)
    return 1 if any(check.state == "fail" for check in checks) else 0


async def _crds(_: argparse.Namespace) -> int:
    print(shipped.crds(), end="")
    return 0


async def _get(client: KubeClient, what: Resource, name: str, namespace: str | None = None) -> Any:
    """One object, or None when it does not exist."""
    try:
        return await client.get(what, name, namespace)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise ClusterError(f"cannot read {what.plural} {name}: {err}") from None


async def _device_classes(client: KubeClient) -> list[str] | None:
    """DeviceClass names; None when resource.k8s.io/v1 is not served."""
    try:
        listing = await client.list(DEVICE_CLASSES, metadata_only=True)
    except ApiError as err:
        if err.is_not_found:
            return None
        raise ClusterError(f"cannot list deviceclasses: {err}") from None
    return [item["metadata"]["name"] for item in listing.get("items") or []]


async def _review(
    client: KubeClient, namespace: str, account: str, wanted: Sequence[doctor.Permission]
) -> dict[doctor.Permission, bool]:
    """Whether ServiceAccount ``namespace/account`` may do each of ``wanted``
    (SubjectAccessReviews, as the apiserver would authorize its token)."""
    user = f"system:serviceaccount:{namespace}:{account}"
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]

    async def allowed(permission: doctor.Permission) -> bool:
        plural, _, subresource = permission.resource.partition("/")
        attributes = {"verb": permission.verb, "group": permission.group, "resource": plural}
        for key, value in (
            ("subresource", subresource),
            ("namespace", permission.namespace),
            ("name", permission.name),
        ):
            if value:
                attributes[key] = value
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
        }
        try:
            review = await client.create(SUBJECT_ACCESS_REVIEWS, body)
        except ApiError as err:
            raise ClusterError(
                f"cannot check the permissions of ServiceAccount {namespace}/{account} (create "
                f"subjectaccessreviews): {err}"
            ) from None
        return bool((review.get("status") or {}).get("allowed"))

    answers = await asyncio.gather(*(allowed(permission) for permission in wanted))
    return dict(zip(wanted, answers, strict=True))


async def _denied(client: KubeClient, namespace: str) -> list[str]:
    """What NVIDIA's IMEX daemon does that its ServiceAccount may not."""
    wanted = [
        doctor.Permission(verb, group, resource, namespace)
        for verb, group, resource in doctor.DAEMON_PERMISSIONS
    ]
    answers = await _review(client, namespace, c.DAEMON_SERVICE_ACCOUNT, wanted)
    return [f"{p.verb} {p.resource}" for p in wanted if not answers[p]]


async def _controller_allowed(
    client: KubeClient, account: tuple[str, str] | None, driver_namespace: str, lease_namespace: str
) -> dict[doctor.Permission, bool]:
    """What our controller's ServiceAccount may do of what it uses; {} with no pod of ours."""
    if account is None:
        return {}
    wanted = doctor.controller_reviews(driver_namespace, lease_namespace)
    return await _review(client, *account, wanted)


async def _nvidia_controller_deployments(client: KubeClient) -> list[dict[str, Any]]:
    """Deployments in any namespace that run NVIDIA's controller command (its pods may carry
    labels no selector of ours knows)."""
    return [d for d in await _list(client, DEPLOYMENTS) if doctor.runs_nvidia_controller(d)]


async def gather_install(
    client: KubeClient, driver_namespace: str | None, lease_ref: tuple[str, str] | None
) -> doctor.Install:
    """What ``doctor`` checks: one request per kind, in two rounds (the second needs the driver
    namespace and Lease, read from our controller's pod unless given)."""
    (
        cd_crd,
        clique_crd,
        device_classes,
        nvidia_daemonsets,
        nodes,
        (our_pods, nvidia_pods),
        nvidia_deployments,
    ) = await asyncio.gather(
        _get(client, CUSTOM_RESOURCE_DEFINITIONS, CD_CRD_NAME),
        _get(client, CUSTOM_RESOURCE_DEFINITIONS, CLIQUE_CRD_NAME),
        _device_classes(client),
        _list(client, DAEMONSETS, None, c.NVIDIA_CHART_DAEMONSETS_SELECTOR),
        _list(client, NODES),
        _controller_pods(client),
        _nvidia_controller_deployments(client),
    )
    ours = doctor.our_pod(our_pods)
    install = doctor.Install(
        now=datetime.now(UTC),
        driver_namespace="",
        lease_ref=("", ""),
        crds={CD_CRD_NAME: cd_crd, CLIQUE_CRD_NAME: clique_crd},
        dra_served=device_classes is not None,
        device_classes=device_classes or [],
        nvidia_daemonsets=nvidia_daemonsets,
        nodes=nodes,
        our_pods=our_pods,
        nvidia_controller_pods=nvidia_pods,
        daemon_image=doctor.pod_env(ours, "IMAGE_NAME") or "",
        controller_account=doctor.service_account(ours),
        plugin_version=distribution_version(),
        nvidia_controller_deployments=nvidia_deployments,
    )
    plugin = doctor.plugin_daemonset(install)
    install.driver_namespace = driver_namespace or doctor.driver_namespace(
        ours, plugin[0]["metadata"]["namespace"] if plugin else ""
    )
    install.lease_ref = lease_ref or doctor.our_lease(ours, install.driver_namespace)
    plugin_selector = ""
    if plugin is not None:
        match = ((plugin[0].get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        plugin_selector = ",".join(f"{key}={value}" for key, value in match.items())

    async def plugin_pods() -> list[dict[str, Any]]:
        if plugin is None or not plugin_selector:
            return []
        return await _list(client, PODS, plugin[0]["metadata"]["namespace"], plugin_selector)

    (
        install.plugin_pods,
        install.lease,
        install.daemon_daemonsets,
        install.daemon_service_account,
        install.daemon_denied,
        install.controller_allowed,
    ) = await asyncio.gather(
        plugin_pods(),
        _get(client, LEASES, install.lease_ref[1], install.lease_ref[0]),
        _list(client, DAEMONSETS, install.driver_namespace, c.CD_LABEL),
        _get(client, SERVICE_ACCOUNTS, c.DAEMON_SERVICE_ACCOUNT, install.driver_namespace),
        _denied(client, install.driver_namespace),
        _controller_allowed(
            client, install.controller_account, install.driver_namespace, install.lease_ref[0]
        ),
    )
    return install


def impersonation(args: argparse.Namespace) -> Impersonation | None:
    """``--as``/``--as-group``/``--as-uid`` as the client sends them (None: act as the
    kubeconfig's user)."""
    if args.as_user is None:
        return None
    return Impersonation(args.as_user, tuple(args.as_groups), args.as_uid)


async def _client(args: argparse.Namespace) -> KubeClient:
    try:
        kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or None
        return await load_client(
            kubeconfig,
            QPS,
            BURST,
            field_manager="kubectl-computedomain",
            context=args.context,
            impersonate=impersonation(args),
        )
    except StartupError as err:
        raise ClusterError(str(err)) from None


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.as_user is None and (args.as_groups or args.as_uid is not None):
        # kubectl refuses it too: a group or UID is impersonated only along with a user.
        parser.error(f"{'--as-group' if args.as_groups else '--as-uid'} needs --as")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    command = {"describe": _describe, "doctor": _doctor, "crds": _crds}.get(args.command, _cliques)
    try:
        return asyncio.run(command(args))
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    except ApiError as err:  # a request no command turned into words: still one line
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    except (OSError, TimeoutError, aiohttp.ClientError) as err:
        print(f"error: cannot reach the cluster: {err}", file=sys.stderr)
        return EXIT_CLUSTER


if __name__ == "__main__":
    sys.exit(main())
