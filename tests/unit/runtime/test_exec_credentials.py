"""An EKS-style kubeconfig (an exec plugin, as `aws eks get-token`) end to end: the real
resolver child runs a stub plugin through kubernetes-asyncio, and a small HTTP server checks the
Authorization header the controller's client sends."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web

from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient, connect
from computedomain.runtime.credentials import MIN_RESOLVE_INTERVAL, ResolverRun
from computedomain.runtime.errors import StartupError
from tests.kit.clock import FakeClock

LIFETIME = 900  # seconds, as an EKS token

PLUGIN = """
import json, sys
LIFETIME = @LIFETIME@
from datetime import UTC, datetime, timedelta
from pathlib import Path

if len(sys.argv) > 2:
    print("no AWS credentials found", file=sys.stderr)
    sys.exit(1)
runs = Path(sys.argv[1])
count = int(runs.read_text() or 0) + 1 if runs.exists() else 1
runs.write_text(str(count))
# The test's fake wall clock, so that expiry is LIFETIME from the controller's "now".
wall = runs.with_name("wall")
now = datetime.fromisoformat(wall.read_text()) if wall.exists() else datetime.now(UTC)
expiry = now + timedelta(seconds=LIFETIME)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {"token": f"exec-token-{count}",
               "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
""".replace("@LIFETIME@", str(LIFETIME))


class Apiserver:
    """Accepts only the token of the plugin's latest run (the count it keeps in a file)."""

    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.seen: list[str | None] = []
        self.url = ""

    def current(self) -> str:
        return f"Bearer exec-token-{self.runs.read_text()}"

    async def handle(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization")
        self.seen.append(header)
        if header != self.current():
            status = {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "no"}
            return web.json_response(status, status=401)
        return web.json_response({"kind": "Namespace", "metadata": {"name": "default"}})


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[Apiserver]:
    server = Apiserver(tmp_path / "runs")
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


def kubeconfig(tmp_path: Path, server: str, *plugin_args: str) -> str:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    exec_config = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [str(plugin), str(tmp_path / "runs"), *plugin_args],
        "interactiveMode": "Never",
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "eks", "cluster": {"server": server}}],
        "users": [{"name": "iam", "user": {"exec": exec_config}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "iam"}}],
        "current-context": "eks",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))  # JSON is YAML
    return str(path)


async def test_the_exec_plugin_token_is_sent_and_renewed(
    tmp_path: Path, apiserver: Apiserver
) -> None:
    path = kubeconfig(tmp_path, apiserver.url)
    clock = FakeClock(wall_start=datetime(2026, 12, 3, 12, 0, tzinfo=UTC))

    async def advance(seconds: float) -> None:
        await clock.advance(seconds)
        (tmp_path / "wall").write_text(clock.wall().isoformat())

    await advance(0)
    client = KubeClient(await connect(ResolverRun(path), path, clock))
    try:
        await client.get(r.NAMESPACES, "default")
        assert apiserver.seen == ["Bearer exec-token-1"]
        # Past its expirationTimestamp the next request waits for the plugin's next token.
        await advance(LIFETIME)
        await client.get(r.NAMESPACES, "default")
        assert apiserver.seen[-1] == "Bearer exec-token-2"
        # Revoked before it expired: the 401 runs the plugin again, the request is retried.
        (tmp_path / "runs").write_text("5")
        await advance(MIN_RESOLVE_INTERVAL)
        await client.get(r.NAMESPACES, "default")
        assert apiserver.seen[-2:] == ["Bearer exec-token-2", "Bearer exec-token-6"]
        # Refused again at once: no new plugin run, the 401 reaches the caller.
        (tmp_path / "runs").write_text("9")
        with pytest.raises(ApiError) as refused:
            await client.get(r.NAMESPACES, "default")
        assert refused.value.status == 401
        assert (tmp_path / "runs").read_text() == "9"
    finally:
        await client.close()


async def test_a_failing_exec_plugin_is_one_startup_line(
    tmp_path: Path, apiserver: Apiserver
) -> None:
    path = kubeconfig(tmp_path, apiserver.url, "--fail")
    with pytest.raises(StartupError) as failed:
        await ResolverRun(path).result()
    assert str(failed.value) == (
        f"kubeconfig {path}: exec: process returned 1. no AWS credentials found"
    )


async def test_in_cluster_credentials_name_the_token_file_to_re_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child's in-cluster path, in this process, with the pod's files put elsewhere.
    from kubernetes_asyncio.config import incluster_config

    from computedomain.runtime import resolve_credentials

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")  # as kubelet writes it: no newline
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    answer = await resolve_credentials.resolve(None)
    assert answer.server == "https://10.96.0.1:443"
    assert answer.authorization == "Bearer sa-token"
    assert answer.token_file == str(token)
    assert answer.ca_data == ca.read_text()
    assert answer.expires_at is None
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(ValueError, match=r"^in-cluster credentials: Service host/port is not set"):
        await resolve_credentials.resolve(None)
