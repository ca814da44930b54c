"""Credentials for the controller, resolved in a child process and kept fresh.

kubernetes-asyncio stays the one source of kubeconfig, in-cluster and exec-plugin semantics, but
importing it loads ~860 generated modules (~40 MiB, over a second). So a short-lived child
(``resolve_credentials``) loads the credentials with the library and prints them as JSON; the
controller builds its own aiohttp session from them (``client.CredentialConnection``), and
``Authenticator`` keeps the bearer token fresh:

- exec plugins (``aws eks get-token``): the child runs again when the token nears its
  ``expirationTimestamp``; requests keep the current token meanwhile, and wait only once it
  has expired;
- in-cluster: the projected token file is re-read every minute, as client-go does (kubelet
  rotates it);
- a 401 runs the child again (at most every ``MIN_RESOLVE_INTERVAL``) and the request is
  retried once with the new token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.errors import StartupError

log = logging.getLogger(__name__)

RESOLVER_MODULE = "computedomain.runtime.resolve_credentials"
RESOLVE_TIMEOUT = 60.0  # an exec plugin may be slow (SSO); aws eks get-token takes ~1 s
IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 (a path)
DEFAULT_KUBECONFIG = "~/.kube/config"
# Refresh before expiry by this much, or by half the token's lifetime if that is shorter.
REFRESH_MARGIN = 300.0
# Between two resolves triggered by failures or 401s: a revoked token must not fork a child
# per request.
MIN_RESOLVE_INTERVAL = 10.0
TOKEN_FILE_PERIOD = 60.0  # client-go and kubernetes-asyncio re-read a token file every minute


@dataclass(frozen=True)
class Credentials:
    """What the resolver child prints: where the apiserver is and how to authenticate."""

    server: str
    ca_data: str | None = None  # PEM
    client_cert_data: str | None = None  # PEM
    client_key_data: str | None = None  # PEM
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    authorization: str | None = None  # the whole header value: "Bearer ..." or "Basic ..."
    expires_at: datetime | None = None  # the exec plugin's expirationTimestamp
    token_file: str | None = None  # re-read periodically (in-cluster projected token)
    # The namespace a command defaults to, as kubectl picks it: the context's, else the pod's
    # (in-cluster), else None (the caller's default).
    namespace: str | None = None

    def to_json(self) -> str:
        answer: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.expires_at is not None:
            # The library's timezone type does not copy; a plain UTC time does.
            expiry = self.expires_at
            answer["expires_at"] = expiry.replace(tzinfo=expiry.tzinfo or UTC).astimezone(UTC)
            answer["expires_at"] = answer["expires_at"].isoformat()
        return json.dumps(answer)

    @classmethod
    def from_json(cls, text: str) -> Credentials:
        """Parse the child's answer; its ``error`` becomes a StartupError with that line."""
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise StartupError(f"credential resolver: unreadable answer {text.strip()[:200]!r}")
        if "error" in answer:
            raise StartupError(str(answer["error"]))
        try:
            expiry = answer.pop("expires_at", None)
            return cls(**answer, expires_at=datetime.fromisoformat(expiry) if expiry else None)
        except (TypeError, ValueError) as err:
            raise StartupError(f"credential resolver: unreadable answer ({err})") from err


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(IN_CLUSTER_TOKEN)


def _kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The file to load: the one given, else ~/.kube/config if it exists."""
    path = kubeconfig or os.path.expanduser(DEFAULT_KUBECONFIG)
    return path if kubeconfig or os.path.isfile(path) else None


def resolver_args(kubeconfig: str | None, context: str | None = None) -> list[str]:
    """The child's arguments: ``kubeconfig``, else in-cluster credentials, else ~/.kube/config.
    A ``context`` names one of a kubeconfig's contexts, so it never means in-cluster."""
    if kubeconfig is None and context is None and _in_cluster():
        return ["--in-cluster"]
    path = _kubeconfig_path(kubeconfig)
    if path is None:
        where = "" if context is None else f" (context {context!r} needs a kubeconfig)"
        raise StartupError(
            f"no credentials: KUBECONFIG is empty, this is not a pod with a service account, "
            f"and {DEFAULT_KUBECONFIG} does not exist{where}"
        )
    return ["--kubeconfig", path] + ([] if context is None else ["--context", context])


def interpreter(executable: str | None = None, prefix: str | None = None) -> str:
    """The Python that runs the resolver: this process's own interpreter.

    ``sys.executable`` is derived from argv[0], so a launcher that names the process after its
    console script (the demo does, so ``devcluster down`` finds it by name) makes it the
    script; then the interpreter of this environment (``sys.prefix``) is used instead.
    """
    executable = executable if executable is not None else sys.executable
    prefix = prefix if prefix is not None else sys.prefix
    if Path(executable).name.startswith("python"):
        return executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in (version, "python3", "python"):
        candidate = Path(prefix) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    return executable


class ResolverRun:
    """One resolver child, started at once so its imports overlap the caller's own."""

    def __init__(self, kubeconfig: str | None, context: str | None = None) -> None:
        self._error: StartupError | None = None
        self._process: subprocess.Popen[str] | None = None
        try:
            args = resolver_args(kubeconfig, context)
        except StartupError as err:
            self._error = err
            return
        self._process = subprocess.Popen(
            [interpreter(), "-m", RESOLVER_MODULE, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def result(self) -> Credentials:
        if self._error is not None:
            raise self._error
        process = self._process
        assert process is not None
        try:
            out, err = await asyncio.to_thread(process.communicate, timeout=RESOLVE_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise StartupError(
                f"credential resolver: no answer in {RESOLVE_TIMEOUT:.0f}s (an exec plugin "
                f"waiting for input?)"
            ) from None
        finally:
            if process.returncode is None:  # cancelled: do not leave the child behind
                process.kill()
        if not out.strip():
            last = (err.strip().splitlines() or [f"exit status {process.returncode}"])[-1]
            raise StartupError(f"credential resolver: {last[:300]}")
        return Credentials.from_json(out)

    def close(self) -> None:
        """Stop the child if nobody waited for its answer (start-up failed before)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.communicate()


async def resolve(kubeconfig: str | None, context: str | None = None) -> Credentials:
    return await ResolverRun(kubeconfig, context).result()


class Authenticator:
    """The Authorization header to send, refreshed as the module docstring describes.

    ``resolve`` runs the resolver again (a fresh child in production). Time comes from
    ``clock``: ``now()`` for deadlines, ``wall()`` to place an expirationTimestamp.
    """

    def __init__(
        self,
        credentials: Credentials,
        resolve: Callable[[], Awaitable[Credentials]],
        clock: Clock | None = None,
    ) -> None:
        self._resolve = resolve
        self.clock = clock or SystemClock()
        self._refreshing: asyncio.Task[None] | None = None
        self._last_attempt = float("-inf")
        self.resolves = 0  # successful re-resolves, for tests and logs
        self._install(credentials)

    def _install(self, credentials: Credentials) -> None:
        now = self.clock.now()
        self.credentials = credentials
        self._header = credentials.authorization
        self._token_read_at = now
        self._expires: float | None = None
        self._refresh_at: float | None = None
        if credentials.expires_at is not None:
            expiry = credentials.expires_at
            if expiry.tzinfo is None:
                expiry = expiry.replace(tzinfo=UTC)
            lifetime = (expiry - self.clock.wall()).total_seconds()
            self._expires = now + lifetime
            self._refresh_at = self._expires - min(REFRESH_MARGIN, max(0.0, lifetime) / 2)
        if credentials.token_file:
            self._read_token_file()

    def _read_token_file(self) -> None:
        path = self.credentials.token_file
        assert path is not None
        self._token_read_at = self.clock.now()
        try:
            token = Path(path).read_text().strip()
        except OSError as err:
            log.warning("Cannot re-read the token file; keeping the last token: %s", err)
            return
        if token:
            self._header = f"Bearer {token}"

    async def authorization(self) -> str | None:
        now = self.clock.now()
        if self.credentials.token_file and now - self._token_read_at >= TOKEN_FILE_PERIOD:
            self._read_token_file()
        if self._expires is not None and now >= self._expires:
            await self._refresh(forced=False)  # expired: this request must wait
        elif self._refresh_at is not None and now >= self._refresh_at:
            self._start_refresh(forced=False)  # still valid: refresh behind the requests
        return self._header

    async def rejected(self, sent: str | None) -> bool:
        """The apiserver answered 401 to ``sent``: True if a retry has a new header to send."""
        if sent != self._header:
            return True  # refreshed meanwhile
        await self._refresh(forced=True)
        return self._header != sent

    async def close(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing

    def _start_refresh(self, forced: bool) -> asyncio.Task[None] | None:
        if self._refreshing is None or self._refreshing.done():
            # After a failure or a recent resolve, wait before forking another child.
            if self.clock.now() - self._last_attempt < MIN_RESOLVE_INTERVAL:
                return None
            self._refreshing = asyncio.create_task(self._run_resolve(forced))
        return self._refreshing

    async def _refresh(self, forced: bool) -> None:
        task = self._start_refresh(forced)
        if task is not None:
            await asyncio.shield(task)  # one caller's cancellation must not stop it for all

    async def _run_resolve(self, forced: bool) -> None:
        self._last_attempt = self.clock.now()
        why = "rejected by the apiserver" if forced else "expiring"
        try:
            credentials = await self._resolve()
        except Exception as err:  # StartupError, or no child at all (OSError): keep the token
            log.warning("Credentials %s; refreshing them failed: %s", why, err)
            return
        self.resolves += 1
        log.info("Credentials refreshed (%s)", why)
        self._install(credentials)


def ssl_context(credentials: Credentials) -> ssl.SSLContext:
    """TLS as kubernetes-asyncio's REST client sets it up, from data instead of files."""
    # Without CA data the system's trust store is loaded.
    context = ssl.create_default_context(cadata=credentials.ca_data or None)
    if credentials.client_cert_data:
        # load_cert_chain takes only paths: a private directory, removed once loaded.
        with tempfile.TemporaryDirectory(prefix="computedomain-tls-") as directory:
            cert = Path(directory, "client.crt")
            key = Path(directory, "client.key")
            cert.write_text(credentials.client_cert_data)
            key.touch(mode=0o600)
            key.write_text(credentials.client_key_data or "")
            context.load_cert_chain(cert, key if credentials.client_key_data else None)
    if credentials.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
