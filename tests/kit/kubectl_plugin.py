"""`kubectl cdom` run as a user runs it: the console script's module in a separate process, with
a kubeconfig."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any


async def cdom(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``kubectl cdom ARGS``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "computedomain.kubectl.main",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def cliques_rows(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    code, out, err = await cdom(kubeconfig, "cliques", "-o", "json")
    assert code == 0, err
    return {row["clique"]: row for row in json.loads(out)["cliques"]}


def lease_held(lease: dict[str, Any] | None) -> bool:
    """A Lease a controller holds now (what doctor's controller check reads)."""
    return bool(lease and (lease.get("spec") or {}).get("holderIdentity"))


async def doctor(kubeconfig: Path, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """``doctor -o json ARGS``: exit code (checked against the states), checks by name."""
    code, out, err = await cdom(kubeconfig, "doctor", "-o", "json", *args)
    assert code in (0, 1), err
    checks = {check["name"]: check for check in json.loads(out)["checks"]}
    assert code == (1 if any(check["state"] == "fail" for check in checks.values()) else 0)
    return code, checks
