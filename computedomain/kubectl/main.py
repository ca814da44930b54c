"""The ``kubectl-computedomain`` console script (also ``kubectl-cdom``): kubectl finds it on the
PATH as the plugin ``kubectl computedomain`` / ``kubectl cdom``.

Exit codes: 0 done (``--fits``: the job fits; ``describe``: the domain is Ready), 1 ``--fits``:
it does not fit now, ``describe``: a broken link was named, 2 bad usage, 3 the cluster could not
be read or the domain does not exist (one line says why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.kubectl.cliques import clique_capacity, fits_message, table
from computedomain.kubectl.describe import Chain, first_broken_link, regarding, render
from computedomain.runtime.client import ApiError, KubeClient, load_client
from computedomain.runtime.errors import StartupError
from computedomain.runtime.resources import (
    DAEMONSETS,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    Resource,
)

EXIT_NO_FIT = 1
EXIT_USAGE = 2
EXIT_CLUSTER = 3
# A person waits on these: a few requests, no need for the controller's budget.
QPS, BURST = 20.0, 40


class ClusterError(RuntimeError):
    """The cluster could not be read; the message is one line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl computedomain",
        description="NVIDIA ComputeDomains at a glance (also `kubectl cdom`).",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, in-cluster credentials, ~/.kube/config)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cliques = commands.add_parser(
        "cliques",
        help="per NVLink clique: nodes, Ready, held by a domain, free; which domains hold them",
        description=(
            "One row per NVLink clique (node label nvidia.com/gpu.clique), then nodes without "
            "one: nodes in total, Ready, held by a ComputeDomain (node label "
            "resource.nvidia.com/computeDomain), free (Ready, schedulable, held by none), and "
            "the domains holding nodes there. One LIST of Nodes and one of ComputeDomains."
        ),
    )
    cliques.add_argument(
        "--fits",
        type=_positive,
        metavar="N",
        help="say whether an N-node job gets one NVLink domain now, and where (the tightest "
        "clique with N free nodes); exit 1 when it does not fit. N from 1",
    )
    cliques.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help="output format"
    )
    describe = commands.add_parser(
        "describe",
        help="a ComputeDomain's chain on one screen and its first broken link, with what to do",
        description=(
            "The domain's conditions, its children, per node its IMEX daemon and clique entry, "
            "its workload pods and the latest Events of each, then the first broken link in the "
            "order a domain comes up (controller, children, workload, node, daemon, clique, "
            "Ready), named, with what to do. Exit 0 when the domain is Ready, 1 when a link is "
            "broken."
        ),
    )
    describe.add_argument("name", help="the ComputeDomain's name")
    describe.add_argument(
        "-n", "--namespace", default="default", help="its namespace (default: default)"
    )
    return parser


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
        raise ClusterError(f"cannot list {what.plural}: {err}") from None
    items: list[dict[str, Any]] = listing.get("items") or []
    return items


async def _cliques(args: argparse.Namespace) -> int:
    client = await _client(args)
    try:
        nodes, domains = await asyncio.gather(_list(client, NODES), _list(client, COMPUTE_DOMAINS))
    finally:
        await client.close()
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
        if args.output == "json":
            print(json.dumps(document, indent=2))
        else:
            print(yaml.safe_dump(document, sort_keys=False), end="")
    return EXIT_NO_FIT if fit is not None and not fit[0] else 0


async def _describe(args: argparse.Namespace) -> int:
    client = await _client(args)
    try:
        chain = await gather_chain(client, args.namespace, args.name)
    finally:
        await client.close()
    finding = first_broken_link(chain)
    print(render(chain, finding))
    return 0 if finding is None else 1


async def gather_chain(client: KubeClient, namespace: str, name: str) -> Chain:
    """Everything of one domain, one LIST per kind (label-selected by its UID where the
    controller labels the objects; its workload pods by the claim template they use)."""
    try:
        cd = await client.get(COMPUTE_DOMAINS, name, namespace)
    except ApiError as err:
        if err.is_not_found:
            raise ClusterError(f"ComputeDomain {namespace}/{name} not found") from None
        raise ClusterError(f"cannot read ComputeDomain {namespace}/{name}: {err}") from None
    selector = f"{c.CD_LABEL}={cd['metadata']['uid']}"
    chain = Chain(cd)
    (
        chain.daemonsets,
        templates,
        chain.daemon_pods,
        chain.cliques,
        chain.nodes,
        pods,
    ) = await asyncio.gather(
        _list(client, DAEMONSETS, None, selector),
        _list(client, RESOURCE_CLAIM_TEMPLATES, None, selector),
        _list(client, PODS, None, selector),
        _list(client, CLIQUES, None, selector),
        _list(client, NODES, None, selector),
        _list(client, PODS, namespace),
    )
    chain.daemon_templates = [
        t
        for t in templates
        if (t["metadata"].get("labels") or {}).get(c.TARGET_LABEL) == c.TARGET_DAEMON
    ]
    chain.workload_template = next(
        (
            t
            for t in templates
            if t["metadata"]["namespace"] == namespace
            and t["metadata"]["name"] == chain.template_name
        ),
        None,
    )
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
    about |= {("DaemonSet", o["metadata"]["name"]) for o in chain.daemonsets}
    namespaces = {namespace, *(o["metadata"]["namespace"] for o in chain.daemonsets)}
    listed = await asyncio.gather(*(_list(client, EVENTS, ns) for ns in sorted(namespaces)))
    chain.events = [event for events in listed for event in events if regarding(event) in about]
    return chain


async def _client(args: argparse.Namespace) -> KubeClient:
    try:
        kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or None
        return await load_client(kubeconfig, QPS, BURST, field_manager="kubectl-computedomain")
    except StartupError as err:
        raise ClusterError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = _describe if args.command == "describe" else _cliques
    try:
        return asyncio.run(command(args))
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    except (OSError, TimeoutError) as err:
        print(f"error: cannot reach the cluster: {err}", file=sys.stderr)
        return EXIT_CLUSTER


if __name__ == "__main__":
    sys.exit(main())
