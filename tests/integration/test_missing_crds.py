"""Without our CRDs the controller says which are missing and how to install them, in its log
and on /readyz, and recovers by itself once they are installed (issue 9.4). A control plane of
its own: deleting CRDs on the shared one would delete every other test's ComputeDomains."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from computedomain.api import constants as c
from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.crds import CRD_DIR, apply_crds
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

CONTROLLER_SCRIPT = Path(sys.executable).with_name("computedomain-controller")
MISSING = (
    "CustomResourceDefinition computedomains.resource.nvidia.com, "
    "computedomaincliques.resource.nvidia.com not installed: install with "
    f"{c.CRD_INSTALL_COMMAND}"
)


@pytest.fixture(scope="module")
def bare_control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane.start(log=lambda line: print(f"devcluster: {line}"))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
async def controller(
    bare_control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, Path]]:
    probe_port = free_port()
    log_path = tmp_path / "controller.log"
    env = {
        **os.environ,
        "KUBECONFIG": str(bare_control_plane.kubeconfig),
        "NAMESPACE": "default",
        "LEADER_ELECTION_ENABLED": "false",
        "HTTP_ENDPOINT": "",
        "PROBE_ADDRESS": f"127.0.0.1:{probe_port}",
        "LOG_FORMAT": "text",
    }
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(CONTROLLER_SCRIPT), env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    try:
        yield process, probe_port, log_path
    finally:
        process.terminate()
        await process.wait()
        print(log_path.read_text()[-3000:])


async def readyz(port: int, check: str = "") -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}/readyz" + (f"/{check}" if check else "")
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.text()
    except aiohttp.ClientError:
        return 0, ""


async def test_missing_crds_are_named_with_the_fix_and_recovered_from(
    bare_control_plane: ControlPlane,
    controller: tuple[asyncio.subprocess.Process, int, Path],
) -> None:
    _, port, log_path = controller

    async def says_missing() -> bool:
        status, body = await readyz(port, "crds")
        return status == 500 and MISSING in body

    await eventually(says_missing, within=30, what="/readyz/crds naming the missing CRDs")
    log = log_path.read_text()
    assert MISSING in log
    assert "does not serve /apis/resource.nvidia.com/v1beta1/computedomains" in log
    assert "is its CustomResourceDefinition installed?" in log

    api = await api_client_from_kubeconfig(bare_control_plane.kubeconfig)
    try:
        await apply_crds(api, CRD_DIR)
    finally:
        await api.close()

    async def ready() -> bool:
        return (await readyz(port))[0] == 200

    await eventually(ready, within=60, what="/readyz 200 after installing the CRDs")
    assert "ComputeDomain CRDs are installed" in log_path.read_text()
