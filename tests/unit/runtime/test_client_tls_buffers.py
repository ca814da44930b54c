"""Each TLS connection's read buffer: asyncio's 256 KiB default, zeroed and resident while the
connection lives, is cut to TLS_READ_BUFFER once the controller's connection is built."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl

import pytest

from computedomain.runtime.client import TLS_READ_BUFFER, CredentialConnection
from computedomain.runtime.credentials import Authenticator, Credentials


async def test_a_tls_connection_after_the_controllers_session_reads_into_64_kib() -> None:
    async def never() -> Credentials:
        raise AssertionError("no refresh in this test")

    credentials = Credentials(server="https://127.0.0.1:6443", authorization="Bearer t")
    with pytest.MonkeyPatch.context() as restore:  # the class attribute is process-wide
        restore.setattr(asyncio.sslproto.SSLProtocol, "max_size", 256 * 1024)
        connection = CredentialConnection(credentials, Authenticator(credentials, never))
        try:
            # What the loop builds for each connection aiohttp opens (create_connection, ssl=).
            loop = asyncio.get_running_loop()
            protocol = asyncio.sslproto.SSLProtocol(
                loop,
                asyncio.Protocol(),
                ssl.create_default_context(),
                loop.create_future(),
                server_hostname="127.0.0.1",
            )
        finally:
            await connection.close()
        # The buffer a socket read fills, allocated with the protocol and kept while it lives.
        assert len(protocol.get_buffer(-1)) == TLS_READ_BUFFER == 64 * 1024
