"""A small async Kubernetes client speaking raw JSON.

The controller process connects through ``credentials.CredentialConnection`` (credentials
resolved by kubernetes-asyncio in a child process, so this process never imports it). Tests and
tools may pass a kubernetes-asyncio ``ApiClient`` instead (``from_api_client``). Everything above
the connection is ours: we check every status ourselves, always pass an explicit timeout (an
unbounded default hangs on half-open connections, kubernetes-asyncio #259), set patch content
types explicitly (#68), and stream watch lines ourselves.
"""

from __future__ import annotations

import asyncio.sslproto
import copy
import itertools
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlsplit

import aiohttp
from prometheus_client import CollectorRegistry

from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.credentials import (
    Authenticator,
    Credentials,
    ResolverRun,
    resolve,
    ssl_context,
)
from computedomain.runtime.errors import FENCED_REASON
from computedomain.runtime.errors import ApiError as ApiError  # re-exported: callers import it here
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.ratelimit import TokenBucket
from computedomain.runtime.resources import PODS, Resource

if TYPE_CHECKING:  # only tests and tools hand us one; the controller never imports the library
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)

PatchType = Literal["merge", "json", "apply", "strategic"]
PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
    "strategic": "application/strategic-merge-patch+json",
}

DEFAULT_FIELD_MANAGER = "computedomain-controller"
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_WATCH_INACTIVITY_TIMEOUT = 70.0
# Requests refused with a Retry-After are sent again this many times (client-go's default),
# when the server asks for at most this many seconds.
DEFAULT_MAX_RETRIES = 10
DEFAULT_MAX_RETRY_WAIT = 10.0
_WATCH_CHUNK_LIMIT = 64 * 1024 * 1024
# Metadata only (PartialObjectMetadata, as client-go's metadata client asks): the server sends
# each object's metadata and nothing else; a server that cannot falls back to whole objects.
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# A Table (what kubectl get prints), each row with its object's metadata: the server's own
# summary of what the metadata leaves out (a Node's "Ready,SchedulingDisabled"), in few bytes.
TABLE_LIST_ACCEPT = "application/json;as=Table;g=meta.k8s.io;v=v1"
_JSON = "application/json"


def _accept(metadata_only: bool, media: str) -> str:
    return f"{media},{_JSON}" if metadata_only else _JSON


def table_items(table: dict[str, Any]) -> list[dict[str, Any]]:
    """A Table's rows as objects: each row's object (metadata) with its cells by column name."""
    names = [column.get("name", "") for column in table.get("columnDefinitions") or []]
    return [
        {
            **(row.get("object") or {}),
            "columns": dict(zip(names, row.get("cells") or [], strict=False)),
        }
        for row in table.pop("rows", None) or []
    ]


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _decode(raw: bytes) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


class Connection(Protocol):
    """An HTTP session to one apiserver and the Authorization header to send with it."""

    base_url: str
    session: aiohttp.ClientSession
    server_hostname: str | None  # the kubeconfig's tls-server-name
    proxy: str | None

    async def authorization(self) -> str | None: ...

    async def rejected(self, sent: str | None) -> bool:
        """A 401 answered ``sent``: True if the request should be sent once more."""
        ...

    async def close(self) -> None: ...


class ApiClientConnection:
    """A kubernetes-asyncio ``ApiClient`` as a Connection (tests, the simulator, tools)."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self.base_url = api_client.configuration.host or ""
        self.session: aiohttp.ClientSession = api_client.rest_client.pool_manager
        self.server_hostname: str | None = api_client.rest_client.server_hostname
        self.proxy: str | None = api_client.rest_client.proxy

    async def authorization(self) -> str | None:
        headers: dict[str, str] = {}
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        return headers.get("authorization")

    async def rejected(self, sent: str | None) -> bool:
        return False  # the ApiClient refreshes (or not) by itself

    async def close(self) -> None:
        await self.api_client.close()


# asyncio gives every TLS connection a read buffer of SSLProtocol.max_size (256 KiB), zeroed,
# so resident for the connection's life: each watch holds a connection, and with the pooled
# request connections they held ~4 MiB of the controller's ~58 MiB. TLS records carry at most
# 16 KiB, so 64 KiB still takes four a read; a large LIST costs a few more loop turns.
TLS_READ_BUFFER = 64 * 1024


def shrink_tls_read_buffers() -> None:
    """Give this process's TLS connections TLS_READ_BUFFER-sized read buffers from now on."""
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class CredentialConnection:
    """The controller's own session, built from credentials resolved in a child process."""

    def __init__(self, credentials: Credentials, authenticator: Authenticator) -> None:
        self.base_url = credentials.server.rstrip("/")
        self.namespace = credentials.namespace
        self.server_hostname = credentials.tls_server_name
        self.proxy = credentials.proxy
        self.authenticator = authenticator
        tls: ssl.SSLContext | bool = (
            ssl_context(credentials) if self.base_url.startswith("https") else False
        )
        shrink_tls_read_buffers()
        # As kubernetes-asyncio's REST client: 100 connections, HTTPS_PROXY/NO_PROXY from the
        # environment, a read buffer for watch events of large objects.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=100, ssl=tls),
            trust_env=True,
            read_bufsize=2**21,
        )

    async def authorization(self) -> str | None:
        return await self.authenticator.authorization()

    async def rejected(self, sent: str | None) -> bool:
        return await self.authenticator.rejected(sent)

    async def close(self) -> None:
        await self.authenticator.close()
        await self.session.close()


async def connect(
    first: ResolverRun,
    kubeconfig: str | None,
    clock: Clock | None = None,
    context: str | None = None,
) -> CredentialConnection:
    """Wait for ``first`` (started early) and build the connection; refreshes fork anew."""
    credentials = await first.result()
    authenticator = Authenticator(credentials, lambda: resolve(kubeconfig, context), clock)
    return CredentialConnection(credentials, authenticator)


@dataclass(frozen=True)
class Impersonation:
    """Who every request acts as (kubectl's --as, --as-group and --as-uid): the apiserver
    authorizes the request as this user, if the caller may impersonate them."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str | None = None

    def headers(self) -> list[tuple[str, str]]:
        # One Impersonate-Group header per group, as client-go sends them.
        headers = [("Impersonate-User", self.user)]
        headers += [("Impersonate-Group", g) for g in self.groups]
        return headers + ([("Impersonate-Uid", self.uid)] if self.uid is not None else [])


class KubeClient:
    def __init__(
        self,
        connection: Connection,
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        metrics: RuntimeMetrics | None = None,
        rate_limiter: TokenBucket | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        impersonate: Impersonation | None = None,
        namespace: str = "default",
    ) -> None:
        self.connection = connection
        self.impersonate = impersonate
        # What a namespaced command defaults to: the kubeconfig context's namespace (kubectl's).
        self.namespace = namespace
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.field_manager = field_manager
        self.metrics = metrics or RuntimeMetrics(CollectorRegistry())
        self.rate_limiter = rate_limiter
        self.request_timeout = request_timeout
        self.clock = clock or SystemClock()
        self.host = urlsplit(connection.base_url).netloc or connection.base_url
        # Checked right before every write is sent; False refuses it (a leader that cannot
        # prove it still holds its lease must write nothing). None: no fence.
        self.write_fence: Callable[[], bool] | None = None
        # A client made by `with_rate_limiter` follows the fence of the one it came from.
        self._fence_of: KubeClient | None = None
        # Checked after the fence: a reason refuses the write (`with_write_guard`).
        self._write_guard: Callable[[], str] | None = None

    def unfenced(self) -> KubeClient:
        """The same connection without the write fence (for the leader election itself)."""
        clone = copy.copy(self)
        clone.write_fence = None
        clone._fence_of = None
        return clone

    def with_rate_limiter(self, rate_limiter: TokenBucket | None) -> KubeClient:
        """The same connection and write fence (also one set later) with a request budget of
        its own: the Event writer gets one, so Events never delay the writes of children."""
        clone = copy.copy(self)
        clone.rate_limiter = rate_limiter
        clone._fence_of = self._fence_of or self
        return clone

    def with_write_guard(self, guard: Callable[[], str]) -> KubeClient:
        """The same connection, budget and write fence, whose writes are also refused while
        ``guard`` returns a reason (an empty one lets them through). Reads are never refused."""
        clone = copy.copy(self)
        clone._fence_of = self._fence_of or self
        clone._write_guard = guard
        return clone

    def _fence(self) -> Callable[[], bool] | None:
        return self._fence_of.write_fence if self._fence_of is not None else self.write_fence

    @classmethod
    def from_api_client(
        cls,
        api_client: ApiClient,
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        metrics: RuntimeMetrics | None = None,
        qps: float | None = None,
        burst: int | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> KubeClient:
        limiter = TokenBucket(qps, burst or max(1, int(qps))) if qps else None
        return cls(
            ApiClientConnection(api_client),
            field_manager=field_manager,
            metrics=metrics,
            rate_limiter=limiter,
            request_timeout=request_timeout,
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        return self.connection.session

    async def close(self) -> None:
        await self.connection.close()

    # -- plumbing ---------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = _JSON,
        client_timeout: aiohttp.ClientTimeout | None = None,
        accept: str = _JSON,
    ) -> tuple[aiohttp.ClientResponse, float]:
        """Send one request; return the unread response and when it was sent. The caller
        counts it (``_observe``) once its body is read or has failed: a response cut mid-body
        is a failure, whatever its status line said.

        A 401 that brings new credentials is sent once more: the apiserver did not act on it.
        """
        # Serialise compactly ourselves: the apiserver keeps opaque RawExtension bytes (DRA
        # config parameters) verbatim, so spaced bytes would make every later metadata patch
        # of an RCT fail as a change to its immutable spec. Compact bytes match what Go
        # clients send and re-marshal.
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        for attempt in (1, 2):
            authorization = await self.connection.authorization()
            started = time.monotonic()
            try:
                response = await self._send_once(
                    method, path, query, data, content_type, accept, authorization, client_timeout
                )
            except BaseException:
                self._observe(method, "<error>", started)
                raise
            if response.status != 401 or attempt == 2:
                return response, started
            if not await self.connection.rejected(authorization):
                return response, started
            self._observe(method, "401", started)
            response.release()
        raise AssertionError("unreachable")

    def _observe(self, method: str, code: str, started: float) -> None:
        self.metrics.rest_client_requests_total.labels(
            code=code, method=method, host=self.host
        ).inc()
        self.metrics.rest_client_request_duration_seconds.labels(
            verb=method, host=self.host
        ).observe(time.monotonic() - started)

    async def _send_once(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        data: bytes | None,
        content_type: str,
        accept: str,
        authorization: str | None,
        client_timeout: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        # Pairs, not a dict: impersonating several groups repeats Impersonate-Group.
        headers = [("Accept", accept), ("Content-Type", content_type)]
        if authorization:
            headers.append(("Authorization", authorization))
        if self.impersonate is not None:
            headers += self.impersonate.headers()
        return await self.connection.session.request(
            method,
            self.connection.base_url + path,
            params=list(query or []),
            headers=headers,
            data=data,
            timeout=client_timeout or aiohttp.ClientTimeout(total=self.request_timeout),
            proxy=self.connection.proxy,
            server_hostname=self.connection.server_hostname,
        )

    async def _request(self, method: str, path: str, **options: Any) -> dict[str, Any] | None:
        """``_request_raw``'s answer decoded as JSON (None when empty or not an object)."""
        return _decode(await self._request_raw(method, path, **options))

    async def _request_raw(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = _JSON,
        accept: str = _JSON,
    ) -> bytes:
        """The body of a 2xx answer as sent; anything else raises ApiError (after the
        Retry-After retries, see ``_retry_wait``)."""
        for attempt in itertools.count(1):
            if self.rate_limiter is not None:
                await self.rate_limiter.acquire()
            fence = self._fence()
            if method != "GET" and fence is not None and not fence():
                self.metrics.rest_client_requests_total.labels(
                    code="<fenced>", method=method, host=self.host
                ).inc()
                raise ApiError(0, FENCED_REASON, f"{method} {path}: refused, leadership not proven")
            if method != "GET" and self._write_guard is not None and (why := self._write_guard()):
                self.metrics.rest_client_requests_total.labels(
                    code="<refused>", method=method, host=self.host
                ).inc()
                raise ApiError(0, "WriteRefused", f"{method} {path}: refused, {why}")
            response, started = await self._send(
                method, path, query=query, body=body, content_type=content_type, accept=accept
            )
            try:
                raw = await response.read()
            except BaseException:
                self._observe(method, "<error>", started)
                raise
            finally:
                response.release()
            self._observe(method, str(response.status), started)
            if 200 <= response.status <= 299:
                return raw
            error = ApiError.from_status(
                response.status,
                _decode(raw),
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
            )
            wait = self._retry_wait(method, error, attempt)
            if wait is None:
                raise error
            log.debug(
                "Retrying after the server's Retry-After",
                extra={"method": method, "path": path, "code": error.status, "seconds": wait},
            )
            await self.clock.sleep(wait)
        raise AssertionError("unreachable")

    def _retry_wait(self, method: str, error: ApiError, attempt: int) -> float | None:
        """How long to wait before sending a refused request again, or None: raise.

        As client-go: a 429 (never acted on; API Priority and Fairness) and, for reads, a 5xx
        that names a ``Retry-After`` are sent again after it, up to ``max_retries`` times. A
        wait longer than ``max_retry_wait`` is not spent here holding a worker: the error goes
        up with its ``retry_after``, and the work queue or informer waits at least that long.
        """
        if error.retry_after is None or attempt > self.max_retries:
            return None
        if not (error.is_too_many_requests or (error.status >= 500 and method == "GET")):
            return None
        if error.retry_after > self.max_retry_wait:
            return None
        return error.retry_after

    async def _request_object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        result = await self._request(method, path, **kwargs)
        if result is None:
            raise ApiError(0, "InvalidResponse", f"{method} {path}: empty or non-JSON body")
        return result

    def _write_query(
        self, field_manager: str | None = None, extra: list[tuple[str, str]] | None = None
    ) -> list[tuple[str, str]]:
        query = [("fieldManager", field_manager or self.field_manager)]
        return query + (extra or [])

    # -- verbs ------------------------------------------------------------------------------

    async def pod_log(
        self, namespace: str, name: str, container: str, *, previous: bool = False, tail: int = 20
    ) -> str:
        """The last ``tail`` lines a container wrote (its previous run's with ``previous``), as
        ``kubectl logs`` reads them: the apiserver asks the node's kubelet."""
        query = [("container", container), ("tailLines", str(tail))]
        if previous:
            query.append(("previous", "true"))
        path = PODS.path(namespace, name) + "/log"
        raw = await self._request_raw("GET", path, query=query, accept="text/plain")
        return raw.decode(errors="replace")

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self._request_object("GET", res.path(namespace, name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        metadata_only: bool = False,
        table: bool = False,
    ) -> dict[str, Any]:
        """One LIST (one page when ``limit`` is given: ``metadata.continue`` names the next).
        ``metadata_only``: items are PartialObjectMetadata (kind, apiVersion, metadata).
        ``table``: items are PartialObjectMetadata too, each with ``columns``, its row of the
        server's Table (column name -> printed cell), as ``kubectl get`` shows it."""
        query: list[tuple[str, str]] = [("includeObject", "Metadata")] if table else []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if limit is not None:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if table:
            accept = f"{TABLE_LIST_ACCEPT},{_JSON}"
        else:
            accept = _accept(metadata_only, METADATA_LIST_ACCEPT)
        result = await self._request_object("GET", res.path(namespace), query=query, accept=accept)
        if table and result.get("kind") == "Table":
            result["items"] = table_items(result)
        if result.get("items") is None:
            result["items"] = []
        return result

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        return await self._request_object(
            "POST", res.path(namespace), query=self._write_query(), body=body
        )

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        name = body.get("metadata", {}).get("name")
        if not name:
            raise ValueError("replace needs body.metadata.name")
        return await self._request_object(
            "PUT", res.path(namespace, name, subresource), query=self._write_query(), body=body
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        extra: list[tuple[str, str]] = []
        if force is not None:
            if patch_type != "apply":
                raise ValueError("force is only valid for apply patches")
            extra.append(("force", "true" if force else "false"))
        return await self._request_object(
            "PATCH",
            res.path(namespace, name, subresource),
            query=self._write_query(field_manager, extra),
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions_uid: str | None = None,
    ) -> dict[str, Any] | None:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions_uid:
            options["preconditions"] = {"uid": preconditions_uid}
        return await self._request("DELETE", res.path(namespace, name), body=options)

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        field_selector: str | None = None,
        inactivity_timeout: float = DEFAULT_WATCH_INACTIVITY_TIMEOUT,
        metadata_only: bool = False,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events until the server ends the watch.

        An ERROR event raises ``ApiError`` (410 when the resourceVersion is too old). A
        connection silent for ``inactivity_timeout`` raises ``asyncio.TimeoutError``.
        ``metadata_only``: each object is a PartialObjectMetadata.
        """
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("timeoutSeconds", str(int(timeout_seconds))),
        ]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.request_timeout, sock_read=inactivity_timeout
        )
        response, started = await self._send(
            "GET",
            res.path(namespace),
            query=query,
            client_timeout=stream_timeout,
            accept=_accept(metadata_only, METADATA_WATCH_ACCEPT),
        )
        # A stream is counted when it starts: how it ends is the informer's business.
        self._observe("GET", str(response.status), started)
        try:
            if not 200 <= response.status <= 299:
                raw = await response.read()
                raise ApiError.from_status(
                    response.status,
                    _decode(raw),
                    retry_after=parse_retry_after(response.headers.get("Retry-After")),
                )
            async for line in _lines(response):
                event = _decode(line)
                if event is None:
                    log.warning("Skipped undecodable watch line", extra={"path": res.path()})
                    continue
                event_type = str(event.get("type", ""))
                obj = event.get("object")
                if not isinstance(obj, dict):
                    continue
                if event_type == "ERROR":
                    raise ApiError.from_status(int(obj.get("code") or 500), obj)
                yield event_type, obj
        finally:
            response.release()


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Split the chunked body on newlines ourselves: objects can exceed aiohttp's line limit."""
    buffer = bytearray()
    async for chunk in response.content.iter_any():
        buffer.extend(chunk)
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(buffer[:end]).strip()
            del buffer[: end + 1]
            if line:
                yield line
        if len(buffer) > _WATCH_CHUNK_LIMIT:
            raise ApiError(0, "InvalidResponse", "watch line exceeds 64 MiB")
    tail = bytes(buffer).strip()
    if tail:
        yield tail


async def load_client(
    kubeconfig: str | None,
    qps: float,
    burst: int,
    *,
    field_manager: str = DEFAULT_FIELD_MANAGER,
    metrics: RuntimeMetrics | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    resolver: ResolverRun | None = None,
    context: str | None = None,
    impersonate: Impersonation | None = None,
) -> KubeClient:
    """Build a client from ``kubeconfig``, else in-cluster credentials, else ~/.kube/config.

    ``resolver`` is the credential child if the caller started it early. ``context`` picks a
    kubeconfig context other than its current one (kubectl's --context); ``impersonate`` sends
    every request as another user (kubectl's --as). The client's ``namespace`` is the context's,
    else the pod's (in-cluster), else ``default``. Unusable credentials raise StartupError with
    one line naming the file and the reason.
    """
    connection = await connect(
        resolver or ResolverRun(kubeconfig, context), kubeconfig, context=context
    )
    return KubeClient(
        connection,
        field_manager=field_manager,
        metrics=metrics,
        rate_limiter=TokenBucket(qps, burst),
        request_timeout=request_timeout,
        impersonate=impersonate,
        namespace=connection.namespace or "default",
    )
