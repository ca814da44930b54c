"""The aiohttp server for `/metrics`, `/healthz` and `/readyz`, in the event loop (no threads).

Metrics and probes get separate listeners by default (`:8080`, `:8081`, kubebuilder's ports);
given the same address they share one. An empty address, or "0" as controller-runtime spells
it, turns a listener off. Port 0 binds an ephemeral port (tests read the URL bases back).
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from computedomain.observability.health import HealthChecks
from computedomain.runtime.errors import StartupError

log = logging.getLogger(__name__)

DEFAULT_METRICS_ADDRESS = ":8080"
DEFAULT_PROBE_ADDRESS = ":8081"


def parse_address(address: str) -> tuple[str | None, int] | None:
    """`host:port`, `:port` or `[v6]:port` → (host, or None for all interfaces; port) or None."""
    address = address.strip()
    if address in ("", "0"):
        return None
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"bind address {address!r} is not host:port")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"bind address {address!r}: port out of range")
    host = host.removeprefix("[").removesuffix("]")
    return (host or None, port)


class ObservabilityServer:
    """Serves metrics from `registry` and the two check sets; `start()` binds, `stop()` closes."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        healthz: HealthChecks,
        readyz: HealthChecks,
        metrics_address: str = DEFAULT_METRICS_ADDRESS,
        probe_address: str = DEFAULT_PROBE_ADDRESS,
        metrics_path: str = "/metrics",
    ) -> None:
        if not metrics_path.startswith("/"):
            raise ValueError(f"metrics path {metrics_path!r} must start with '/'")
        self._registry = registry
        self._healthz = healthz
        self._readyz = readyz
        self._metrics_bind = parse_address(metrics_address)
        self._probe_bind = parse_address(probe_address)
        self._metrics_path = metrics_path
        self._runners: list[web.AppRunner] = []
        self.metrics_url_base: str | None = None
        self.probe_url_base: str | None = None

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(self._metrics_path, make_aiohttp_handler(self._registry))
        return app

    def probe_app(self) -> web.Application:
        app = web.Application()
        self._healthz.add_routes(app, "/healthz")
        self._readyz.add_routes(app, "/readyz")
        return app

    def combined_app(self) -> web.Application:
        app = self.probe_app()
        app.router.add_get(self._metrics_path, make_aiohttp_handler(self._registry))
        return app

    async def start(self) -> None:
        if self._runners:
            raise RuntimeError("server already started")
        try:
            if self._metrics_bind is not None and self._shares_listener():
                base = await self._serve(self.combined_app(), self._metrics_bind)
                self.metrics_url_base = self.probe_url_base = base
                return
            if self._metrics_bind is not None:
                self.metrics_url_base = await self._serve(self.metrics_app(), self._metrics_bind)
            if self._probe_bind is not None:
                self.probe_url_base = await self._serve(self.probe_app(), self._probe_bind)
        except BaseException:
            await self.stop()
            raise

    def _shares_listener(self) -> bool:
        # Port 0 asks for an ephemeral port per listener, so it never means "the same one".
        bind = self._metrics_bind
        return bind is not None and bind[1] != 0 and bind == self._probe_bind

    async def stop(self) -> None:
        runners, self._runners = self._runners, []
        for runner in reversed(runners):
            await runner.cleanup()
        self.metrics_url_base = self.probe_url_base = None

    async def _serve(self, app: web.Application, bind: tuple[str | None, int]) -> str:
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        self._runners.append(runner)
        host, port = bind
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as err:
            raise StartupError(
                f"cannot listen on {host or ''}:{port}: {err.strerror or err} (check "
                "HTTP_ENDPOINT / PROBE_ADDRESS, or what else uses the port)"
            ) from err
        # Port 0 (tests) binds an ephemeral port: report what the socket really got.
        bound_host, bound_port = runner.addresses[0][:2]
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        if host is None:
            url_host = "127.0.0.1"
        log.info("Serving HTTP", extra={"address": f"{bound_host}:{bound_port}"})
        return f"http://{url_host}:{bound_port}"
