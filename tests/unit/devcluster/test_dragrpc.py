import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from computedomain.devcluster.dragrpc import (
    DRA_V1,
    DRA_V1BETA1,
    ClaimRef,
    DraCallError,
    DraClient,
    PreparedDevice,
    PrepareResult,
    RegistrationError,
    dra_method,
    register,
)
from tests.kit.draplugin import FakePlugin

DRIVER = "compute-domain.nvidia.com"
CHANNEL = ClaimRef("team-a", "uid-1", "pod-a-channel")
OTHER = ClaimRef("team-a", "uid-2", "pod-a-other")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short directory: a unix socket's path must stay below 108 bytes, pytest's may not."""
    directory = Path(tempfile.mkdtemp(prefix="dra-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def plugin(tmp_path: Path) -> AsyncIterator[FakePlugin]:
    fake = FakePlugin(tmp_path)
    await fake.start()
    yield fake
    await fake.stop()


def test_messages_carry_the_wire_field_numbers() -> None:
    """Field numbers are the wire: a serialized Claim is namespace=1, uid=2, name=3."""
    request = dra_method(DRA_V1, "NodePrepareResources").request()
    request.claims.add(namespace="n", uid="u", name="c")
    # claims=1 (length-delimited: 0x0a), then 0x0a 'n', 0x12 'u', 0x1a 'c'.
    assert request.SerializeToString() == b"\x0a\x09\x0a\x01n\x12\x01u\x1a\x01c"
    response = dra_method(DRA_V1, "NodePrepareResources").response()
    device = response.claims["u"].devices.add(cdi_device_ids=["k8s.x/y=z"], share_id="s")
    device.request_names.append("r")
    again = type(response).FromString(response.SerializeToString())
    assert list(again.claims["u"].devices[0].cdi_device_ids) == ["k8s.x/y=z"]
    assert again.claims["u"].devices[0].share_id == "s"


async def test_registration_validates_and_notifies(plugin: FakePlugin) -> None:
    info, version = await register(plugin.registration_socket, DRIVER)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(plugin.dra_socket)
    assert info.supported_versions == (DRA_V1, DRA_V1BETA1)
    assert version == DRA_V1
    assert plugin.statuses == [(True, "")]


async def test_registration_speaks_v1beta1_when_v1_is_not_served(tmp_path: Path) -> None:
    fake = FakePlugin(tmp_path, versions=(DRA_V1BETA1,))
    await fake.start()
    try:
        _, version = await register(fake.registration_socket, DRIVER)
        assert version == DRA_V1BETA1
        client = DraClient(fake.dra_socket, version)
        fake.cdi_ids["uid-1"] = ("k8s.compute-domain.nvidia.com/channel=uid-1-0",)
        results = await client.prepare_pod([CHANNEL])
        assert results["uid-1"].devices[0].share_id is None
        assert fake.calls[0][0] == "prepare:" + DRA_V1BETA1
    finally:
        await fake.stop()


async def test_registration_refuses_another_driver_and_says_so(tmp_path: Path) -> None:
    fake = FakePlugin(tmp_path, driver_name="gpu.nvidia.com")
    await fake.start()
    try:
        with pytest.raises(RegistrationError, match=r"plugin name 'gpu\.nvidia\.com' is not"):
            await register(fake.registration_socket, DRIVER)
        assert fake.statuses == [
            (False, f"plugin name 'gpu.nvidia.com' is not {DRIVER!r}"),
        ]
    finally:
        await fake.stop()


async def test_registration_refuses_a_plugin_of_another_type(tmp_path: Path) -> None:
    fake = FakePlugin(tmp_path, plugin_type="CSIPlugin")
    await fake.start()
    try:
        with pytest.raises(RegistrationError, match="plugin type 'CSIPlugin'"):
            await register(fake.registration_socket, DRIVER)
    finally:
        await fake.stop()


async def test_prepare_returns_devices_per_claim(plugin: FakePlugin) -> None:
    plugin.cdi_ids["uid-1"] = (
        "k8s.compute-domain.nvidia.com/channel=uid-1-channel-0",
        "k8s.compute-domain.nvidia.com/claim=uid-1",
    )
    client = DraClient(plugin.dra_socket)
    results = await client.prepare_pod([CHANNEL])
    assert results == {
        "uid-1": PrepareResult(
            devices=(
                PreparedDevice(
                    request_names=("channel",),
                    pool_name="node-0",
                    device_name="channel-0",
                    cdi_device_ids=plugin.cdi_ids["uid-1"],
                ),
            )
        )
    }
    assert plugin.calls == [("prepare:" + DRA_V1, (("team-a", "uid-1", "pod-a-channel"),))]


async def test_a_claim_error_fails_the_pod_in_the_kubelets_words(plugin: FakePlugin) -> None:
    plugin.prepare_errors["uid-2"] = "CD not ready on node"
    client = DraClient(plugin.dra_socket)
    raw = await client.prepare([CHANNEL, OTHER])
    assert raw["uid-2"].error == "CD not ready on node"
    assert raw["uid-1"].error == ""
    with pytest.raises(DraCallError) as caught:
        await client.prepare_pod([CHANNEL, OTHER])
    assert str(caught.value) == (
        "NodePrepareResources failed for claim team-a/pod-a-other: CD not ready on node"
    )


async def test_a_claim_left_out_fails_the_pod(plugin: FakePlugin) -> None:
    plugin.answer_only = {"uid-1"}
    with pytest.raises(DraCallError, match=r"^NodePrepareResources left out 1 claims$"):
        await DraClient(plugin.dra_socket).prepare_pod([CHANNEL, OTHER])


async def test_unprepare_errors_per_claim(plugin: FakePlugin) -> None:
    client = DraClient(plugin.dra_socket)
    await client.unprepare_pod([CHANNEL])
    plugin.unprepare_errors["uid-1"] = "busy"
    with pytest.raises(
        DraCallError, match="NodeUnprepareResources failed for claim team-a/pod-a-channel: busy"
    ):
        await client.unprepare_pod([CHANNEL])
    assert [call[0] for call in plugin.calls] == ["unprepare:" + DRA_V1] * 2


async def test_no_plugin_on_the_socket_is_a_call_error(tmp_path: Path) -> None:
    client = DraClient(tmp_path / "absent.sock", timeout=2.0)
    with pytest.raises(
        DraCallError, match=r"^NodePrepareResources failed: rpc error: code = Unavailable"
    ):
        await client.prepare_pod([CHANNEL])
