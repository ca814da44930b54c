"""kubernetes_asyncio clients for a control plane: admin, and ServiceAccount bearer tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

TOKEN_SECONDS = 3600


async def api_client_from_kubeconfig(kubeconfig: Path) -> ApiClient:
    """An ApiClient for the current context of ``kubeconfig`` (caller closes it)."""
    configuration = Configuration()
    await config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
    )
    # Fleet creation keeps tens of requests in flight; the default pool would queue them.
    configuration.connection_pool_maxsize = 128
    return ApiClient(configuration)


async def request_service_account_token(
    admin: ApiClient,
    namespace: str,
    name: str,
    seconds: int = TOKEN_SECONDS,
    *,
    pod: tuple[str, str] | None = None,
) -> str:
    """A bound token from the TokenRequest API (needs the apiserver's SA signing key). With
    ``pod`` (name, uid) the token is bound to that pod, as a kubelet's projected token is: the
    apiserver then names the pod in every request's user info (the audit log's
    ``authentication.kubernetes.io/pod-name``), and stops accepting it once the pod is gone."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod[0], "uid": pod[1]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    response: dict[str, Any] = await admin.call_api(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        "POST",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        response_types_map={201: "object", 200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return str(response["status"]["token"])


def bearer_api_client(server: str, ca_file: Path | None, token: str) -> ApiClient:
    """An ApiClient that authenticates only with ``token`` (no client certificate)."""
    configuration = Configuration(host=server)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    if ca_file is not None:
        configuration.ssl_ca_cert = str(ca_file)
    return ApiClient(configuration)


async def service_account_api_client(
    admin: ApiClient, server: str, ca_file: Path | None, namespace: str, name: str
) -> ApiClient:
    token = await request_service_account_token(admin, namespace, name)
    return bearer_api_client(server, ca_file, token)


def token_kubeconfig(
    path: Path, server: str, ca_file: Path | None, token: str, namespace: str | None = None
) -> Path:
    """A kubeconfig that authenticates only with ``token`` (e.g. a ServiceAccount's), readable
    by its owner alone; ``namespace`` is its context's default namespace."""
    cluster: dict[str, Any] = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    context: dict[str, Any] = {"cluster": "local", "user": "token"}
    if namespace is not None:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": context}],
        "current-context": "token",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def cluster_admin_binding(name: str, service_account: str, namespace: str) -> dict[str, Any]:
    """A ClusterRoleBinding giving a ServiceAccount cluster-admin: for stand-ins and for
    identities whose only purpose is to tell writers apart in the audit log."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
