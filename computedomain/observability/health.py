"""Named health checks served controller-runtime `pkg/healthz` style.

`/healthz` and `/readyz` run every check of their set: 200 `ok` when all pass, else 500 with one
`[+]name ok` / `[-]name failed: reason withheld` line per check. `?verbose` lists the checks on
success too, `?exclude=name` skips a check, and `/<set>/<name>` runs one check alone and shows
its failure reason.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

log = logging.getLogger(__name__)

# A check returns True when healthy. False or an exception means failing; the exception's text
# becomes the reason shown on the check's own sub-path.
Check = Callable[[], bool | Awaitable[bool]]


class CheckFailedError(Exception):
    """Raise from a check to fail it with a reason."""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    ok: bool
    reason: str = ""


class HasSynced(Protocol):
    @property
    def has_synced(self) -> bool: ...


def ping() -> bool:
    """Always passes: answering at all proves the event loop is alive."""
    return True


def informers_synced(informers: Iterable[HasSynced]) -> Check:
    """Ready once every informer has listed; names the ones still waiting, each with why its
    last list failed if it did (a 403 in a namespace that does not exist, a missing CRD)."""
    pending_informers = list(informers)

    def describe(informer: HasSynced) -> str:
        name = str(getattr(informer, "name", repr(informer)))
        error = getattr(informer, "last_error", None)
        return f"{name} ({error})" if error else name

    def check() -> bool:
        waiting = [describe(i) for i in pending_informers if not i.has_synced]
        if waiting:
            raise CheckFailedError(f"informers not synced: {'; '.join(waiting)}")
        return True

    return check


class Flag:
    """A check that fails once cleared, e.g. readiness flipped off at the start of shutdown."""

    def __init__(self, reason: str, *, up: bool = True) -> None:
        self._up = up
        self._reason = reason

    def set(self) -> None:
        self._up = True

    def clear(self) -> None:
        self._up = False

    @property
    def is_set(self) -> bool:
        return self._up

    def __call__(self) -> bool:
        if not self._up:
            raise CheckFailedError(self._reason)
        return True


class HealthChecks:
    """An ordered set of named checks served under one path (e.g. `/readyz`)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        if not name or "/" in name:
            raise ValueError(f"invalid check name {name!r}")
        if name in self._checks:
            raise ValueError(f"{self.kind} check {name!r} already registered")
        self._checks[name] = check

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    async def run_one(self, name: str) -> CheckOutcome:
        check = self._checks[name]
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # any failure inside a check is a failed check, not a 500 crash
            return CheckOutcome(name, ok=False, reason=str(exc) or type(exc).__name__)
        return CheckOutcome(name, ok=bool(result), reason="" if result else "check returned false")

    async def run(self, exclude: Iterable[str] = ()) -> list[CheckOutcome]:
        skipped = set(exclude)
        return [await self.run_one(name) for name in self._checks if name not in skipped]

    async def handle_all(self, request: web.Request) -> web.Response:
        excluded = request.query.getall("exclude", [])
        unknown_excludes = [name for name in excluded if name not in self._checks]
        outcomes = await self.run(excluded)
        if not self._checks:
            outcomes = [CheckOutcome("ping", ok=True)]
        lines = []
        for outcome in outcomes:
            if outcome.ok:
                lines.append(f"[+]{outcome.name} ok")
            else:
                lines.append(f"[-]{outcome.name} failed: reason withheld")
        lines.extend(f"warn: some {self.kind} checks cannot be excluded: no matches for {name!r}"
                     for name in unknown_excludes)  # fmt: skip
        failed = [o for o in outcomes if not o.ok]
        if failed:
            for outcome in failed:
                log.info(
                    "%s check failed", self.kind,
                    extra={"checker": outcome.name, "err": outcome.reason},
                )  # fmt: skip
            body = "\n".join([*lines, f"{self.kind} check failed"]) + "\n"
            return web.Response(status=500, text=body)
        if "verbose" in request.query:
            return web.Response(text="\n".join([*lines, f"{self.kind} check passed"]) + "\n")
        return web.Response(text="ok")

    async def handle_one(self, request: web.Request) -> web.Response:
        name = request.match_info["check"]
        if name not in self._checks:
            return web.Response(status=404, text=f"no such {self.kind} check: {name}\n")
        outcome = await self.run_one(name)
        if not outcome.ok:
            return web.Response(status=500, text=f"internal server error: {outcome.reason}\n")
        return web.Response(text="ok")

    def add_routes(self, app: web.Application, path: str) -> None:
        app.router.add_get(path, self.handle_all)
        app.router.add_get(path + "/", self.handle_all)
        app.router.add_get(path + "/{check}", self.handle_one)
