"""A fault-injecting HTTPS proxy between a client under test and the real apiserver.

It serves TLS with the apiserver's own serving certificate (so a copy of the client's kubeconfig
with only ``server`` changed still verifies) and forwards every request upstream with the
kubeconfig's client certificate, passing any ``Authorization`` header through. Watches are
streamed chunk by chunk. Every fault is seeded and can be switched at run time by assigning
``proxy.faults``:

- latency: a delay before forwarding, on a share of requests;
- throttle: 429 with ``Retry-After`` on a share of writes, never forwarded (as API Priority and
  Fairness answers);
- error: 500 or 503 on a share of requests, half of them answered without forwarding and half
  after the apiserver acted (the client cannot tell: a retried create meets AlreadyExists);
- reset: the connection reset (TCP RST) after part of the response body was sent;
- watch cut: every watch ends after a random time, cleanly (chunked end) or by reset;
- watch lag: the events of chosen watches (by path) reach the client a fixed time late, in
  order, as from a lagging watch cache; a cut drops what is still held back (the client resumes
  from the last resourceVersion it saw and gets those events again, late again). LISTs and GETs
  are not delayed, so a live read sees what the lagging cache does not yet.

``exchanges`` records each request (time, method, path, the status sent and the fault), so a
test can count, for example, how soon a client came back after a 429.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_FORWARDED_HEADERS = ("Accept", "Content-Type", "Authorization")


@dataclass(frozen=True)
class Faults:
    """What the proxy does to the traffic; all shares are probabilities per request."""

    latency_share: float = 0.0
    latency: tuple[float, float] = (0.05, 1.5)
    throttle_share: float = 0.0  # of writes
    retry_after: int = 1
    error_share: float = 0.0
    reset_share: float = 0.0
    # Every watch ends after a uniform time in this range (seconds); None: watches run freely.
    watch_cut: tuple[float, float] | None = None
    watch_cut_reset_share: float = 0.5
    # Events of watches whose path contains one of these strings arrive this many seconds late.
    watch_lag: float = 0.0
    watch_lag_paths: tuple[str, ...] = ()

    @classmethod
    def none(cls) -> Faults:
        return cls()

    @classmethod
    def hostile(cls, watch_cut: tuple[float, float] = (5.0, 30.0)) -> Faults:
        """The mix of the issue-18 experiment (latency, 429, 5xx, resets, watch cuts)."""
        return cls(
            latency_share=0.25,
            throttle_share=0.10,
            error_share=0.05,
            reset_share=0.03,
            watch_cut=watch_cut,
        )


@dataclass(frozen=True)
class Exchange:
    arrived: float  # time.monotonic() when the request arrived
    answered: float  # ... when its fate was decided (the status about to be sent)
    method: str
    path: str  # without the query
    body: str  # a digest of the request body: a retry sends the same bytes again
    watch: bool
    status: int  # what the client was sent (0: reset before any status)
    # "", "latency", "throttle", "error-before", "error-after", "reset", "cut-clean" or "cut-reset"
    fault: str

    @property
    def verb(self) -> str:
        """GET, LIST, WATCH, POST, PATCH, PUT or DELETE: a GET of a collection is a LIST."""
        if self.watch:
            return "WATCH"
        resource, name, _ = api_path_parts(self.path)
        if self.method == "GET" and not name and resource != self.path:  # not discovery
            return "LIST"
        return self.method

    @property
    def resource(self) -> str:
        """The resource the path names, with any subresource (``computedomains/status``)."""
        resource, _, subresource = api_path_parts(self.path)
        return f"{resource}/{subresource}" if subresource else resource


def api_path_parts(path: str) -> tuple[str, str, str]:
    """(resource, name, subresource) of an API path such as ``/api/v1/namespaces/ns/pods/p/log``
    or ``/apis/group/v1/nodes``; name and subresource empty where the path has none."""
    parts = [part for part in path.split("/") if part]
    # /api/v1/... or /apis/group/version/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource, not the Namespace itself
    padded = [*rest, "", "", ""]
    return padded[0] or path, padded[1], "/".join(rest[2:])  # discovery: the path itself


@dataclass
class FaultProxy:
    upstream: str
    upstream_tls: ssl.SSLContext
    serving_tls: ssl.SSLContext
    faults: Faults = field(default_factory=Faults)
    seed: int = 0
    port: int = 0
    exchanges: list[Exchange] = field(default_factory=list)
    _rng: random.Random = field(init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)
    _kubeconfig: dict[str, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @classmethod
    def for_kubeconfig(
        cls, kubeconfig: Path, serving_cert: Path, serving_key: Path, seed: int = 0
    ) -> FaultProxy:
        """A proxy to the cluster of ``kubeconfig`` (its CA and client certificate), serving
        with the apiserver's certificate and key."""
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        upstream_tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        if user.get("client-certificate"):
            upstream_tls.load_cert_chain(user["client-certificate"], user["client-key"])
        serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving_tls.load_cert_chain(str(serving_cert), str(serving_key))
        proxy = cls(cluster["server"].rstrip("/"), upstream_tls, serving_tls, seed=seed)
        proxy._kubeconfig = config
        return proxy

    def kubeconfig(self, path: Path) -> Path:
        """Write a copy of the upstream kubeconfig whose server is this proxy."""
        config = json.loads(json.dumps(self._kubeconfig))
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path.write_text(yaml.safe_dump(config))
        return path

    # -- life cycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # Bodies arrive decompressed and leave plain (no Content-Encoding is forwarded).
            connector=aiohttp.TCPConnector(ssl=self.upstream_tls, limit=200),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.serving_tls)
        await site.start()
        sockets = self._runner.addresses
        self.port = int(sockets[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- what happened ------------------------------------------------------------------------

    def retry_gaps(self, fault: str = "throttle") -> list[float]:
        """For each request answered with ``fault``, the seconds from that answer until the
        client sent the same request (method, path and body) again; never retried: left out."""
        gaps: list[float] = []
        for index, first in enumerate(self.exchanges):
            if first.fault != fault:
                continue
            again = next(
                (
                    later
                    for later in self.exchanges[index + 1 :]
                    if (later.method, later.path, later.body)
                    == (first.method, first.path, first.body)
                    and later.arrived >= first.answered
                ),
                None,
            )
            if again is not None:
                gaps.append(again.arrived - first.answered)
        return gaps

    # -- forwarding ---------------------------------------------------------------------------

    def _chance(self, share: float) -> bool:
        return share > 0 and self._rng.random() < share

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._forward(request)
        except (aiohttp.ClientError, OSError) as error:
            # The apiserver went away (a restart) or broke the stream: the client sees its
            # connection reset, as it would without the proxy.
            watch = request.query.get("watch") in ("true", "1")
            at, fault = time.monotonic(), f"upstream-{type(error).__name__}"
            self.exchanges.append(
                Exchange(at, at, request.method, request.path, "", watch, 0, fault)
            )
            _reset(request)
            return web.Response(status=502)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        faults = self.faults
        arrived = time.monotonic()
        watch = request.query.get("watch") in ("true", "1")
        method = request.method
        body = await request.read()
        digest = hashlib.sha256(body).hexdigest()[:16]

        def record(status: int, fault: str) -> None:
            self.exchanges.append(
                Exchange(
                    arrived, time.monotonic(), method, request.path, digest, watch, status, fault
                )
            )

        fault = ""
        if self._chance(faults.latency_share):
            fault = "latency"
            await asyncio.sleep(self._rng.uniform(*faults.latency))
        if method in WRITE_METHODS and self._chance(faults.throttle_share):
            record(429, "throttle")
            return _status_response(
                429, "TooManyRequests", "throttled by the fault proxy", faults.retry_after
            )
        error = self._chance(faults.error_share)
        code = self._rng.choice((500, 503))
        if error and self._rng.random() < 0.5:
            record(code, "error-before")
            return _status_response(code, "InternalError", "injected before forwarding")
        headers = {h: request.headers[h] for h in _FORWARDED_HEADERS if h in request.headers}
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=None if watch else 60, sock_connect=10)
        async with self._session.request(
            method,
            self.upstream + request.path_qs,
            data=body or None,
            headers=headers,
            timeout=timeout,
        ) as upstream:
            if error:
                if not watch:  # a watch's body never ends: its request was accepted
                    await upstream.read()
                record(code, "error-after")
                return _status_response(code, "InternalError", "injected after the apiserver acted")
            if watch and upstream.status == 200:
                return await self._stream_watch(request, upstream, record, faults)
            payload = await upstream.read()
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            response.content_length = len(payload)
            if "Retry-After" in upstream.headers:
                response.headers["Retry-After"] = upstream.headers["Retry-After"]
            await response.prepare(request)
            if len(payload) > 1 and self._chance(faults.reset_share):
                await response.write(payload[: len(payload) // 2])
                record(upstream.status, "reset")
                _reset(request)
                return response
            await response.write(payload)
            await response.write_eof()
            record(upstream.status, fault)
            return response

    async def _stream_watch(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        record: Callable[[int, str], None],
        faults: Faults,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status)
        response.content_type = upstream.content_type
        response.enable_chunked_encoding()
        await response.prepare(request)
        cut_after = self._rng.uniform(*faults.watch_cut) if faults.watch_cut else None
        by_reset = self._chance(faults.watch_cut_reset_share)
        lag = faults.watch_lag if any(p in request.path for p in faults.watch_lag_paths) else 0
        try:
            async with asyncio.timeout(cut_after):
                if lag > 0:
                    await _relay_late(upstream, response, lag)
                else:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
        except TimeoutError:
            if by_reset:
                record(200, "cut-reset")
                _reset(request)
                return response
            record(200, "cut-clean")
            await response.write_eof()
            return response
        record(200, "")
        await response.write_eof()
        return response


async def _relay_late(
    upstream: aiohttp.ClientResponse, response: web.StreamResponse, lag: float
) -> None:
    """Copy a watch body chunk by chunk, each ``lag`` seconds after it arrived, in order."""
    held: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

    async def read() -> None:
        async for chunk in upstream.content.iter_any():
            held.put_nowait((time.monotonic() + lag, chunk))
        held.put_nowait((time.monotonic() + lag, None))

    reader = asyncio.create_task(read())
    try:
        while True:
            due, chunk = await held.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if chunk is None:
                break
            await response.write(chunk)
        await reader
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, OSError):
            await reader


def _status_response(
    code: int, reason: str, message: str, retry_after: int | None = None
) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.json_response(body, status=code, headers=headers)


def _reset(request: web.Request) -> None:
    """Abort the client's connection with a TCP RST (SO_LINGER 0), mid-response."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


@contextlib.asynccontextmanager
async def fault_proxy(
    kubeconfig: Path, pki_dir: Path, *, seed: int = 0
) -> AsyncIterator[FaultProxy]:
    """A started proxy to the cluster of ``kubeconfig``, whose PKI (the apiserver's serving
    certificate) is in ``pki_dir``, with no fault until ``proxy.faults`` says; stopped on exit."""
    proxy = FaultProxy.for_kubeconfig(
        kubeconfig, pki_dir / "apiserver.crt", pki_dir / "apiserver.key", seed=seed
    )
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
