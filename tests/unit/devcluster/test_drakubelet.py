"""The stand-in kubelet's loop against the wire's test double (tests/kit/draplugin.py) and a
fake apiserver: no container while prepare fails (Pending, ContainerCreating, Warning Events),
then the container with the CDI edits applied; unprepare when the pod is gone. The container
runs through hack/upstream/run.sh (a private mount namespace: root needed)."""

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.devcluster.drakubelet import DraKubelet, connect, driver_claims
from computedomain.runtime.clock import SystemClock
from computedomain.runtime.informer import Informer
from computedomain.runtime.resources import EVENTS, NODES, PODS, RESOURCE_CLAIMS, Resource
from computedomain.sim.context import SimContext, SimSettings
from computedomain.sim.decisions import pod_claim_refs
from tests.kit.draplugin import FakePlugin
from tests.kit.fakeapi import FakeApiServer

NS = "team-a"
NODE = "node-0"
CLAIM_UID = "c1a1-0000"
CDI_ID = f"k8s.{c.DRIVER_NAME}/claim={CLAIM_UID}-channel-0"
SPEC = f"""\
cdiVersion: 0.5.0
kind: k8s.{c.DRIVER_NAME}/claim
devices:
- name: {CLAIM_UID}-channel-0
  containerEdits:
    env: [IMEX_CHANNEL=0]
    deviceNodes:
    - {{path: /dev/nvidia-caps-imex-channels/channel0, type: c, major: 234, minor: 0}}
"""

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="run.sh needs root and unshare for the pod's mount namespace",
)


def claim(allocated: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"driver": c.DRIVER_NAME, "pool": NODE, "device": "channel-0", "request": "r"}
                ]
            }
        }
    return {
        "metadata": {"name": "pod-channel", "namespace": NS, "uid": CLAIM_UID},
        "status": status,
    }


def pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "pod", "namespace": NS, "uid": "pod-uid"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "ctr", "image": "ubuntu"}],
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "t"}],
        },
        "status": {
            "resourceClaimStatuses": [{"name": "channel", "resourceClaimName": "pod-channel"}]
        },
    }


class Api(FakeApiServer):
    """The fake apiserver, naming objects sent with only a generateName (Events)."""

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        metadata = body["metadata"]
        if "name" not in metadata:
            metadata["name"] = f"{metadata['generateName']}{len(self.objects)}"
        return await super().create(res, body, namespace)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="drak-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def plugin(short_dir: Path) -> AsyncIterator[FakePlugin]:
    fake = FakePlugin(short_dir)
    await fake.start()
    yield fake
    await fake.stop()


def context(api: FakeApiServer, clock: SystemClock) -> SimContext:
    informers = {
        name: Informer(api, res, clock=clock, name=name)  # type: ignore[arg-type]
        for name, res in (("pods", PODS), ("nodes", NODES), ("claims", RESOURCE_CLAIMS))
    }
    ctx = SimContext(api, SimSettings(), clock, informers)  # type: ignore[arg-type]
    for name, res, obj in (
        ("pods", PODS, pod()),
        ("claims", RESOURCE_CLAIMS, claim()),
        ("nodes", NODES, {"metadata": {"name": NODE}}),
    ):
        informers[name].store.upsert(api.add(res, obj))
    return ctx


def test_claims_are_named_as_the_kubelet_names_them() -> None:
    assert pod_claim_refs(pod())[0].claim_name == "pod-channel"
    assert driver_claims(pod(), {"pod-channel": claim(allocated=False)}, c.DRIVER_NAME) == (
        "claim pod-channel not allocated yet"
    )
    refs = driver_claims(pod(), {"pod-channel": claim()}, c.DRIVER_NAME)
    assert not isinstance(refs, str)
    assert [(r.namespace, r.uid, r.name) for r in refs] == [(NS, CLAIM_UID, "pod-channel")]
    assert driver_claims(pod(), {"pod-channel": claim()}, "gpu.nvidia.com") == []


@needs_root
async def test_no_container_while_prepare_fails_then_cdi_edits_are_injected(
    plugin: FakePlugin, short_dir: Path
) -> None:
    api = Api()
    ctx = context(api, SystemClock())
    cdi_root = short_dir / "cdi"
    cdi_root.mkdir()
    node = await connect(NODE, plugin.registration_socket, [cdi_root])
    kubelet = DraKubelet(ctx, {NODE: node}, short_dir / "pods", backoff=0.02, backoff_max=0.05)
    plugin.prepare_errors[CLAIM_UID] = "ComputeDomain not ready on this node"
    start = asyncio.create_task(kubelet.start(pod()))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(plugin.calls) >= 4:
            break
    # Failing, retried: no container, the pod Pending in ContainerCreating, one Warning Event
    # for the same error (the recorder folds repeats).
    assert len(plugin.calls) >= 4
    assert not start.done()
    assert kubelet.containers == {}
    stored = await api.get(PODS, "pod", NS)
    assert stored["status"]["phase"] == "Pending"
    assert stored["status"]["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ContainerCreating"}
    }
    events = [obj for key, obj in api.objects.items() if key[0] == EVENTS.plural]
    assert [(e["type"], e["reason"], e["note"]) for e in events] == [
        (
            "Warning",
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: NodePrepareResources failed for claim "
            "team-a/pod-channel: ComputeDomain not ready on this node",
        )
    ]
    # Prepared: the plugin wrote the CDI spec and answers its device.
    (cdi_root / f"k8s.{c.DRIVER_NAME}-claim_{CLAIM_UID}.yaml").write_text(SPEC)
    plugin.cdi_ids[CLAIM_UID] = (CDI_ID,)
    del plugin.prepare_errors[CLAIM_UID]
    await asyncio.wait_for(start, 30)
    container = kubelet.containers["pod-uid"]
    seen = container.observed()
    assert seen is not None
    assert seen["env"]["IMEX_CHANNEL"] == "0"
    assert seen["files"]["/dev/nvidia-caps-imex-channels/channel0"] == "c 234:0"
    assert not Path("/dev/nvidia-caps-imex-channels").exists()  # not on the host
    stored = await api.get(PODS, "pod", NS)
    assert stored["status"]["phase"] == "Running"
    # Gone: the container ends, then the claim is unprepared.
    await kubelet.stop(stored)
    assert container.process.returncode is not None
    assert plugin.calls[-1] == ("unprepare:v1.DRAPlugin", ((NS, CLAIM_UID, "pod-channel"),))
