"""kubectl's --context and the namespace a command defaults to: the resolver loads the context
asked for (else the current one) with kubernetes-asyncio and reports its namespace; in a pod,
POD_NAMESPACE, else the service account's namespace file; the client defaults to ``default``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from computedomain.runtime import resolve_credentials
from computedomain.runtime.client import load_client
from computedomain.runtime.errors import StartupError


def kubeconfig(tmp_path: Path) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "lab",
        "clusters": [
            {"name": "lab", "cluster": {"server": "https://lab.example:6443"}},
            {"name": "prod", "cluster": {"server": "https://prod.example:6443"}},
        ],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [
            {"name": "lab", "context": {"cluster": "lab", "user": "me", "namespace": "team"}},
            {"name": "prod", "context": {"cluster": "prod", "user": "me"}},
        ],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_the_context_asked_for_wins_over_the_current_one(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path)
    current = await resolve_credentials.resolve(path)
    assert (current.server, current.namespace) == ("https://lab.example:6443", "team")
    prod = await resolve_credentials.resolve(path, "prod")
    assert (prod.server, prod.namespace) == ("https://prod.example:6443", None)
    assert prod.authorization == "Bearer t0ken"
    with pytest.raises(ValueError, match=r"^kubeconfig .*/config: no context named 'nope'$"):
        await resolve_credentials.resolve(path, "nope")


async def test_the_client_defaults_to_the_contexts_namespace_else_default(
    tmp_path: Path,
) -> None:
    """Through the resolver child, as the plugin loads its client."""
    path = kubeconfig(tmp_path)
    for context, namespace, server in [
        (None, "team", "lab.example:6443"),
        ("prod", "default", "prod.example:6443"),
    ]:
        client = await load_client(path, 1.0, 1, context=context)
        try:
            assert (client.namespace, client.host) == (namespace, server)
        finally:
            await client.close()
    with pytest.raises(StartupError, match="no context named 'nope'"):
        await load_client(path, 1.0, 1, context="nope")


def test_in_a_pod_the_namespace_is_pod_namespace_else_the_service_accounts(
    tmp_path: Path,
) -> None:
    namespace_file = tmp_path / "namespace"
    assert resolve_credentials.in_cluster_namespace({}, str(namespace_file)) is None
    namespace_file.write_text("driver\n")
    assert resolve_credentials.in_cluster_namespace({}, str(namespace_file)) == "driver"
    pod = {"POD_NAMESPACE": "mine"}
    assert resolve_credentials.in_cluster_namespace(pod, str(namespace_file)) == "mine"
