"""Raw-JSON requests over a kubernetes_asyncio ApiClient, for the harness and its tests.

The controller has its own client (``computedomain.runtime.client``); the harness keeps this
tiny helper so that it tests the control plane without depending on the code under test.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


async def request_json(
    api_client: ApiClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Send ``body`` as JSON and return the decoded response; non-2xx raises ApiException."""
    result: dict[str, Any] | None = await api_client.call_api(
        path,
        method,
        query_params=list((query or {}).items()),
        header_params=dict(_HEADERS),
        body=body,
        response_types_map={200: "object", 201: "object", 202: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return result or {}
