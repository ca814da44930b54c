"""The credential resolver: a short-lived child process of the controller.

``python -m computedomain.runtime.resolve_credentials --kubeconfig PATH [--context NAME] |
--in-cluster`` loads credentials with kubernetes-asyncio (kubeconfig contexts, in-cluster service
account, exec plugins such as ``aws eks get-token``) and prints one JSON line (``Credentials``) or
``{"error": "..."}`` with exit status 1. The controller reads it and never imports
kubernetes-asyncio, whose ~860 generated modules cost ~40 MiB and over a second of start-up.
The child itself loads only the library's ``config`` package and the two client modules that
needs (``skip_generated_modules``): the child is on the controller's start-up path.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computedomain.runtime.credentials import Credentials

if TYPE_CHECKING:
    from kubernetes_asyncio.client import Configuration

# Packages whose ``__init__`` imports every generated API and model class (~800 modules; the
# child took 0.75 s and peaked at 75 MiB with them, 0.44 s and 41 MiB without): kubeconfig
# loading needs none of them. Each is entered in sys.modules as its bare package (its
# submodules importable, its ``__init__`` not run).
_BARE_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.models",  # api_client looks model classes up here, lazily
)


def _bare_package(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not a package")
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)


def skip_generated_modules() -> None:
    """Make kubernetes-asyncio's ``config`` package importable without its generated API and
    model modules. Only for a process of its own (this child): another importer of the library
    there would find ``kubernetes_asyncio.client`` without them.

    ``kube_config`` and ``incluster_config`` import ``Configuration`` and ``ApiClient`` from
    ``kubernetes_asyncio.client``, whose ``__init__`` loads every API and model class; the
    bare package gets those two names from their own modules instead. The kubeconfig, in-cluster
    and exec-plugin code that runs is the library's own, unchanged.
    """
    if "kubernetes_asyncio" in sys.modules:  # already imported whole
        return
    for name in _BARE_PACKAGES:
        _bare_package(name)
    from kubernetes_asyncio.client import api_client, configuration

    client = sys.modules["kubernetes_asyncio.client"]
    setattr(client, "ApiClient", api_client.ApiClient)  # noqa: B010 (a module's new name)
    setattr(client, "Configuration", configuration.Configuration)  # noqa: B010


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


def _read(path: str | None) -> str | None:
    # The library hands TLS material over as files (temporary ones for inline data, removed
    # when this process exits); the controller gets their contents.
    return Path(path).read_text() if path else None


# client-go's in-cluster namespace: the pod's POD_NAMESPACE, else its service account's.
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def in_cluster_namespace(env: Mapping[str, str], namespace_file: str) -> str | None:
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        return Path(namespace_file).read_text().strip() or None
    except OSError:
        return None


def context_namespace(context: Any) -> str | None:
    """The ``namespace`` of a kubeconfig context entry ({name, context: {...}}), if any."""
    if not isinstance(context, Mapping):
        return None
    settings = context.get("context")
    namespace = settings.get("namespace") if isinstance(settings, Mapping) else None
    return str(namespace) if namespace else None


async def _from_configuration(
    configuration: Configuration,
    expiry: datetime.datetime | None,
    token_file: str | None,
    namespace: str | None,
) -> Credentials:
    authorization = await configuration.get_api_key_with_prefix("BearerToken")
    return Credentials(
        server=str(configuration.host),
        ca_data=_read(configuration.ssl_ca_cert),
        client_cert_data=_read(configuration.cert_file),
        client_key_data=_read(configuration.key_file),
        insecure=not configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name or None,
        proxy=configuration.proxy or None,
        authorization=authorization or None,
        expires_at=expiry,
        token_file=token_file,
        namespace=namespace,
    )


async def resolve(kubeconfig: str | None, context: str | None = None) -> Credentials:
    """Credentials from ``kubeconfig`` (its ``context``, else its current one), or in-cluster
    ones when it is None.

    Raises ValueError with the one line the controller prints.
    """
    # Imported here, after main() turned the collector off and, in the child, skipped the
    # library's generated modules.
    import yaml
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import incluster_config, kube_config

    configuration = Configuration()
    if kubeconfig is None:
        try:
            # No refresh hook: the controller re-reads the token file itself, as client-go does.
            incluster_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=False
            )
        except Exception as err:  # the library raises several kinds; all mean the same here
            raise ValueError(f"in-cluster credentials: {_first_line(err)}") from err
        return await _from_configuration(
            configuration,
            None,
            incluster_config.SERVICE_TOKEN_FILENAME,
            in_cluster_namespace(os.environ, IN_CLUSTER_NAMESPACE),
        )
    try:
        loader = await kube_config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
        # Set by the library when an exec plugin answered with an expirationTimestamp.
        expiry = getattr(loader, "exec_plugin_expiry", None)
        namespace = context_namespace(loader.current_context)
        return await _from_configuration(configuration, expiry, None, namespace)
    except yaml.YAMLError as err:
        raise ValueError(f"kubeconfig {kubeconfig}: not valid YAML ({_first_line(err)})") from err
    except Exception as err:  # ConfigException, missing keys, bad certificates: one story
        if context is not None and f"name {context} in" in str(err) and "contexts" in str(err):
            raise ValueError(f"kubeconfig {kubeconfig}: no context named {context!r}") from err
        raise ValueError(f"kubeconfig {kubeconfig}: {_first_line(err)}") from err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="resolve_credentials", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kubeconfig", help="the kubeconfig file to load")
    where.add_argument("--in-cluster", action="store_true", help="the pod's service account")
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current)")
    args = parser.parse_args(argv)
    # A process that lives a second needs no cyclic GC; importing ~860 modules with it off
    # takes ~10% less CPU.
    gc.disable()
    skip_generated_modules()
    try:
        kubeconfig = None if args.in_cluster else args.kubeconfig
        credentials = asyncio.run(resolve(kubeconfig, args.context))
    except ValueError as err:
        print(json.dumps({"error": str(err)}))
        return 1
    print(credentials.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
