"""The ``kubectl-computedomain`` console script (also ``kubectl-cdom``): kubectl finds it on the
PATH as the plugin ``kubectl computedomain`` / ``kubectl cdom``.

Exit codes: 0 done (``--fits``: the job fits), 1 ``--fits``: it does not fit now, 2 bad usage,
3 the cluster could not be read (one line says why).
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

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.kubectl.cliques import clique_capacity, fits_message, table
from computedomain.runtime.client import ApiError, KubeClient, load_client
from computedomain.runtime.errors import StartupError
from computedomain.runtime.resources import NODES

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
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


async def _list(client: KubeClient, what: Any) -> list[dict[str, Any]]:
    try:
        listing = await client.list(what)
    except ApiError as err:
        if err.is_not_found and what is COMPUTE_DOMAINS:
            print(
                "warning: the ComputeDomain CRD is not installed; no node is shown as held",
                file=sys.stderr,
            )
            return []
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


async def _client(args: argparse.Namespace) -> KubeClient:
    try:
        kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG") or None
        return await load_client(kubeconfig, QPS, BURST, field_manager="kubectl-computedomain")
    except StartupError as err:
        raise ClusterError(str(err)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_cliques(args))
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CLUSTER
    except (OSError, TimeoutError) as err:
        print(f"error: cannot reach the cluster: {err}", file=sys.stderr)
        return EXIT_CLUSTER


if __name__ == "__main__":
    sys.exit(main())
