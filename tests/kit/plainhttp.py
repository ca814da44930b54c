"""A Connection with no credentials to a local HTTP server (aiohttp's TestServer), for the
client's unit tests."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp


@dataclass
class PlainConnection:
    base_url: str
    session: aiohttp.ClientSession
    server_hostname: str | None = None
    proxy: str | None = None

    async def authorization(self) -> str | None:
        return None

    async def rejected(self, sent: str | None) -> bool:
        return False

    async def close(self) -> None:
        await self.session.close()
