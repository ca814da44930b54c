"""`kubectl cdom` against the real control plane and the simulated fleet, run as the console
script a user runs (a separate process, the test's kubeconfig)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.e2e_harness import EndToEnd, workload

pytestmark = pytest.mark.integration

RACKS = ["r00", "r01", "r02", "r03"]


async def cdom(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
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


async def fits(kubeconfig: Path, size: int) -> dict[str, Any]:
    code, out, err = await cdom(kubeconfig, "cliques", "--fits", str(size), "-o", "json")
    assert code in (0, 1), err
    document: dict[str, Any] = json.loads(out)
    assert document["fits"]["fits"] == (code == 0)
    return document


async def test_cliques_fits_is_right_before_and_after_a_domain_takes_nodes(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    before = await fits(kubeconfig_path, 16)
    assert before["fits"]["fits"], before["fits"]
    assert all(row["free"] == 18 for row in before["cliques"] if row["clique"] != "<none>")

    await e2e.start_controller()
    await e2e.start_simulator()
    cd = await e2e.create_cd("wide", num_nodes=12)
    uid = cd["metadata"]["uid"]
    # 3 nodes in each of the 4 racks: no clique keeps 16 free.
    await e2e.run_workload(workload("wide", 12, racks=RACKS, spread_over_racks=True))
    held = await e2e.nodes_labelled(uid, lambda names: len(names) == 12, "12 nodes held")

    after = await fits(kubeconfig_path, 16)
    assert not after["fits"]["fits"]
    assert "the most free nodes in one clique are 15" in after["fits"]["message"]
    rows = [row for row in after["cliques"] if row["clique"] != "<none>"]
    assert [row["held"] for row in rows] == [3, 3, 3, 3]
    assert [row["domains"] for row in rows] == [{f"{e2e.namespace}/wide": 3}] * 4
    assert not held & {node for row in rows for node in row["freeNodes"]}
    assert (await fits(kubeconfig_path, 15))["fits"]["fits"]

    code, out, _ = await cdom(kubeconfig_path, "cliques", "--fits", "16")
    print(out)
    assert code == 1
    assert out.splitlines()[0].split() == ["CLIQUE", "NODES", "READY", "HELD", "FREE", "DOMAINS"]
    assert f"{e2e.namespace}/wide(3)" in out
