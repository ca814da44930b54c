"""The resolver's answer and how the controller keeps its token fresh (FakeClock)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from computedomain.runtime.credentials import (
    MIN_RESOLVE_INTERVAL,
    TOKEN_FILE_PERIOD,
    Authenticator,
    Credentials,
    interpreter,
)
from computedomain.runtime.errors import StartupError
from tests.kit.clock import FakeClock, settle

WALL = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_the_answer_round_trips_and_an_error_is_the_startup_line() -> None:
    sent = Credentials(
        server="https://10.0.0.1:443",
        ca_data="-----BEGIN CERTIFICATE-----\n...",
        insecure=False,
        tls_server_name="kubernetes",
        authorization="Bearer abc",
        expires_at=WALL,
    )
    assert Credentials.from_json(sent.to_json()) == sent
    with pytest.raises(StartupError, match=r"^kubeconfig /x: exec: process returned 1\. boom$"):
        Credentials.from_json('{"error": "kubeconfig /x: exec: process returned 1. boom"}')
    with pytest.raises(StartupError, match="credential resolver: unreadable answer"):
        Credentials.from_json("Traceback (most recent call last):")
    with pytest.raises(StartupError, match="credential resolver: unreadable answer"):
        Credentials.from_json('{"server": "https://x", "surprise": 1}')


class Resolves:
    """Stands in for the resolver child: hands out token-1, token-2, ..."""

    def __init__(self, clock: FakeClock, lifetime: float | None = 900.0) -> None:
        self.clock = clock
        self.lifetime = lifetime
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None

    def credentials(self) -> Credentials:
        self.calls += 1
        expiry = None
        if self.lifetime is not None:
            expiry = self.clock.wall() + timedelta(seconds=self.lifetime)
        return Credentials(
            server="https://apiserver",
            authorization=f"Bearer token-{self.calls}",
            expires_at=expiry,
        )

    async def __call__(self) -> Credentials:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise StartupError("kubeconfig /x: exec: process returned 1")
        return self.credentials()


def make(lifetime: float | None = 900.0) -> tuple[FakeClock, Resolves, Authenticator]:
    clock = FakeClock(wall_start=WALL)
    resolves = Resolves(clock, lifetime)
    return clock, resolves, Authenticator(resolves.credentials(), resolves, clock)


async def test_an_expiring_token_is_refreshed_behind_requests_an_expired_one_before() -> None:
    clock, resolves, auth = make(lifetime=900.0)
    assert await auth.authorization() == "Bearer token-1"
    await clock.advance(599.0)  # refresh 300 s before expiry: not yet
    assert await auth.authorization() == "Bearer token-1"
    assert resolves.calls == 1
    await clock.advance(2.0)
    resolves.gate = asyncio.Event()
    # Still valid: this request does not wait for the child.
    assert await auth.authorization() == "Bearer token-1"
    resolves.gate.set()
    await settle()
    assert await auth.authorization() == "Bearer token-2"
    assert resolves.calls == 2
    # token-2 expires 900 s after it came; past that a request waits for token-3.
    await clock.advance(900.0)
    assert await auth.authorization() == "Bearer token-3"


async def test_a_short_lived_token_is_refreshed_at_half_its_lifetime() -> None:
    clock, _, auth = make(lifetime=60.0)
    await clock.advance(29.0)
    assert await auth.authorization() == "Bearer token-1"
    await clock.advance(2.0)
    await auth.authorization()
    await settle()
    assert await auth.authorization() == "Bearer token-2"


async def test_concurrent_expired_requests_share_one_resolve() -> None:
    clock, resolves, auth = make(lifetime=60.0)
    await clock.advance(61.0)
    headers = await asyncio.gather(*(auth.authorization() for _ in range(5)))
    assert headers == ["Bearer token-2"] * 5
    assert resolves.calls == 2


async def test_a_401_resolves_again_once_per_interval() -> None:
    clock, resolves, auth = make(lifetime=None)
    assert await auth.authorization() == "Bearer token-1"
    assert await auth.rejected("Bearer token-1") is True
    assert await auth.authorization() == "Bearer token-2"
    # A request that carried the old token while another refreshed: retry, no new child.
    assert await auth.rejected("Bearer token-1") is True
    # A token the apiserver keeps refusing does not fork a child per request.
    assert await auth.rejected("Bearer token-2") is False
    assert resolves.calls == 2
    await clock.advance(MIN_RESOLVE_INTERVAL)
    assert await auth.rejected("Bearer token-2") is True
    assert resolves.calls == 3


async def test_a_failed_refresh_keeps_the_token_and_waits_before_the_next() -> None:
    clock, resolves, auth = make(lifetime=60.0)
    resolves.fail = True
    await clock.advance(61.0)
    assert await auth.authorization() == "Bearer token-1"
    assert await auth.authorization() == "Bearer token-1"
    assert resolves.calls == 1  # the failure counted no credentials; one attempt only
    resolves.fail = False
    await clock.advance(MIN_RESOLVE_INTERVAL)
    assert await auth.authorization() == "Bearer token-2"


async def test_an_in_cluster_token_file_is_re_read_every_minute(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    clock = FakeClock(wall_start=WALL)

    async def never() -> Credentials:
        raise AssertionError("in-cluster tokens are re-read, not resolved")

    credentials = Credentials(server="https://10.0.0.1", token_file=str(token))
    auth = Authenticator(credentials, never, clock)
    assert await auth.authorization() == "Bearer first"
    token.write_text("second\n")  # kubelet rotated it
    await clock.advance(TOKEN_FILE_PERIOD - 1)
    assert await auth.authorization() == "Bearer first"
    await clock.advance(1)
    assert await auth.authorization() == "Bearer second"
    token.unlink()
    await clock.advance(TOKEN_FILE_PERIOD)
    assert await auth.authorization() == "Bearer second"  # kept while the file is missing


def test_the_controller_process_does_not_import_kubernetes_asyncio() -> None:
    # What `python -m computedomain` imports on its way to the first reconcile.
    code = (
        "import sys\n"
        "import computedomain.cli, computedomain.app, computedomain.runtime.client\n"
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio'))[:5])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_resolver_runs_on_this_environments_python_even_when_argv0_is_a_script(
    tmp_path: Path,
) -> None:
    """A launcher that names the process after its console script makes ``sys.executable``
    that script; running it with ``-m`` would start the controller, not the resolver."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python3"
    python.write_text("")
    script = str(tmp_path / "bin" / "computedomain-controller")

    assert interpreter(script, str(tmp_path)) == str(python)
    assert interpreter("/usr/bin/python3.11", str(tmp_path)) == "/usr/bin/python3.11"


def test_the_resolver_child_loads_no_generated_api_or_model_module(tmp_path: Path) -> None:
    # The child is on the controller's start-up path: with the library's generated modules it
    # took 0.75 s and peaked at 75 MiB, without them 0.44 s and 41 MiB.
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t0ken}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    probe = (
        "import sys\n"
        "from computedomain.runtime import resolve_credentials\n"
        f"code = resolve_credentials.main(['--kubeconfig', {str(config)!r}])\n"
        "prefixes = ('kubernetes_asyncio.client.models.', 'kubernetes_asyncio.client.api.')\n"
        "print(code, sorted(m for m in sys.modules if m.startswith(prefixes))[:3])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    answer, loaded = done.stdout.strip().splitlines()
    assert Credentials.from_json(answer).authorization == "Bearer t0ken"
    assert loaded == "0 []", loaded
