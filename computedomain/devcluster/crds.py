"""Apply CustomResourceDefinitions from ``crds/*.yaml`` and wait until they are Established."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.rest import request_json

CRD_DIR = REPO_ROOT / "crds"
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def load_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    crds: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                crds.append(document)
    return crds


async def _call(
    api_client: ApiClient, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    return await request_json(api_client, method, path, body)


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def apply_crds(
    api_client: ApiClient,
    directory: Path = CRD_DIR,
    *,
    wait_seconds: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """Create or replace every CRD in ``directory``; return their names once Established."""
    names: list[str] = []
    for crd in load_crds(directory):
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            await _call(api_client, "POST", _CRD_PATH, crd)
        except ApiException as error:
            if error.status != 409:
                raise
            current = await _call(api_client, "GET", f"{_CRD_PATH}/{name}")
            crd = {**crd, "metadata": {**crd["metadata"], **_rv(current)}}
            await _call(api_client, "PUT", f"{_CRD_PATH}/{name}", crd)
    deadline = clock() + wait_seconds
    for name in names:
        # Establishing takes well under a second; poll briefly rather than open a watch.
        while not _established(await _call(api_client, "GET", f"{_CRD_PATH}/{name}")):
            if clock() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {wait_seconds:.0f}s")
            await asyncio.sleep(0.05)
    return names


def _rv(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}
