"""The AdmissionReview endpoint (v1, Pod CREATE), aiohttp over TLS in the controller's loop.

Two paths, one per opt-in, so no admission reads the pod's Namespace: the configuration's
webhook whose ``namespaceSelector`` matches namespaces labelled for placement calls
``NAMESPACE_PATH``; the one matching the other namespaces calls ``DOMAIN_PATH``, where only pods
of CDs annotated for placement are placed.

Every answer allows the pod: placed (a JSONPatch; for a pod of a workload with a CD of its own,
also wired to that CD's channel claim) or unchanged. Anything that goes wrong while
deciding admits the pod unchanged and is logged: the configuration's ``failurePolicy: Ignore``
does the same when this server cannot be reached, so placement never blocks a pod.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from computedomain.admission.affinity import clique_patch
from computedomain.admission.placer import Placement
from computedomain.observability.server import parse_address
from computedomain.runtime.errors import StartupError

log = logging.getLogger(__name__)

NAMESPACE_PATH = "/place/namespace"
DOMAIN_PATH = "/place/domain"
# Answer before the apiserver's timeoutSeconds (manifests: 5 s) gives up on us.
DECISION_BUDGET = 4.0

Place = Callable[[str, dict[str, Any], bool], Awaitable[Placement | None]]
# (outcome, seconds) of each answer (DomainMetrics.observe_admission).
Observe = Callable[[str, float], None]


def review_response(uid: str, patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class WebhookServer:
    def __init__(
        self,
        place: Place,
        address: str,
        ssl_context: ssl.SSLContext | None,
        budget: float = DECISION_BUDGET,
        observe: Observe = lambda outcome, seconds: None,
    ) -> None:
        bind = parse_address(address)
        if bind is None:
            raise ValueError("the webhook needs an address to listen on")
        self._bind = bind
        self._place = place
        self._ssl = ssl_context
        self._budget = budget
        self._observe = observe
        self._runner: web.AppRunner | None = None
        self.url_base: str | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(NAMESPACE_PATH, self._namespace_opted_in)
        app.router.add_post(DOMAIN_PATH, self._domain_opted_in)
        return app

    async def start(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                               shutdown_timeout=2.0)  # fmt: skip
        await runner.setup()
        self._runner = runner
        host, port = self._bind
        try:
            await web.TCPSite(runner, host, port, ssl_context=self._ssl).start()
        except OSError as err:
            await self.stop()
            raise StartupError(
                f"cannot listen on {host or ''}:{port} for the placement webhook: "
                f"{err.strerror or err} (check PLACEMENT_WEBHOOK_ADDRESS)"
            ) from err
        # Port 0 (tests) binds an ephemeral port: report what the socket really got.
        bound_host, bound_port = runner.addresses[0][:2]
        url_host = "127.0.0.1" if host is None else bound_host
        url_host = f"[{url_host}]" if ":" in url_host else url_host
        self.url_base = f"{'https' if self._ssl else 'http'}://{url_host}:{bound_port}"
        log.info("Serving the placement webhook", extra={"address": f"{bound_host}:{bound_port}"})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _namespace_opted_in(self, request: web.Request) -> web.Response:
        return await self._review(request, namespace_opted_in=True)

    async def _domain_opted_in(self, request: web.Request) -> web.Response:
        return await self._review(request, namespace_opted_in=False)

    async def _review(self, request: web.Request, namespace_opted_in: bool) -> web.Response:
        try:
            body = await request.json()
            review = body["request"]
            uid = str(review["uid"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"message": "not an AdmissionReview"}, status=400)
        return web.json_response(
            review_response(uid, await self._patch(review, namespace_opted_in))
        )

    async def _patch(
        self, review: dict[str, Any], namespace_opted_in: bool
    ) -> list[dict[str, Any]] | None:
        started = time.monotonic()
        outcome, patch = await self._decide(review, namespace_opted_in)
        self._observe(outcome, time.monotonic() - started)
        return patch

    async def _decide(
        self, review: dict[str, Any], namespace_opted_in: bool
    ) -> tuple[str, list[dict[str, Any]] | None]:
        pod = review.get("object") or {}
        if review.get("operation") != "CREATE" or (review.get("kind") or {}).get("kind") != "Pod":
            return "skipped", None
        if review.get("dryRun"):
            # A dry run must have no side effect (the configuration's sideEffects:
            # NoneOnDryRun), and admission's are a CD created and a decision recorded.
            return "skipped", None
        namespace = str(review.get("namespace") or "")
        try:
            async with asyncio.timeout(self._budget):
                placement = await self._place(namespace, pod, namespace_opted_in)
        except Exception:
            # Admitted unchanged: a webhook that fails must not block pods.
            log.exception("Placement failed; the pod is admitted without a clique")
            return "failed", None
        if placement is None:
            return "skipped", None
        wiring = list(placement.wiring)
        if placement.clique is None:
            return "unplaced", wiring or None
        return "placed", wiring + clique_patch(pod, placement.clique)
