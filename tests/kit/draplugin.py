"""A test double of a DRA kubelet plugin's wire: the registration and DRA services over unix
sockets, answering from what the test sets (``prepare_errors``, ``devices``), recording every
call. For unit tests of the stand-in kubelet's gRPC client; the integration tests use NVIDIA's
plugin."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from computedomain.devcluster.dragrpc import (
    DRA_PACKAGES,
    DRA_PLUGIN_TYPE,
    DRA_V1,
    DRA_V1BETA1,
    REGISTRATION_SERVICE,
    dra_method,
    generic_handler,
    registration_method,
)


@dataclass
class FakePlugin:
    directory: Path
    driver_name: str = "compute-domain.nvidia.com"
    plugin_type: str = DRA_PLUGIN_TYPE
    versions: tuple[str, ...] = (DRA_V1, DRA_V1BETA1)
    # Per claim UID: the error to answer (absent: prepared), and the CDI IDs of its device.
    prepare_errors: dict[str, str] = field(default_factory=dict)
    unprepare_errors: dict[str, str] = field(default_factory=dict)
    cdi_ids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Answer for these UIDs only (None: for every claim asked).
    answer_only: set[str] | None = None
    calls: list[tuple[str, tuple[tuple[str, str, str], ...]]] = field(default_factory=list)
    statuses: list[tuple[bool, str]] = field(default_factory=list)
    server: grpc.aio.Server | None = None

    @property
    def registration_socket(self) -> Path:
        return self.directory / "registry" / f"{self.driver_name}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.directory / "plugins" / self.driver_name / "dra.sock"

    async def start(self) -> None:
        for path in (self.registration_socket, self.dra_socket):
            path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                generic_handler(
                    REGISTRATION_SERVICE,
                    {
                        "GetInfo": (registration_method("GetInfo"), self._get_info),
                        "NotifyRegistrationStatus": (
                            registration_method("NotifyRegistrationStatus"),
                            self._notify,
                        ),
                    },
                ),
                *(self._dra_handler(version) for version in self.versions),
            )
        )
        server.add_insecure_port(f"unix://{self.registration_socket}")
        server.add_insecure_port(f"unix://{self.dra_socket}")
        await server.start()
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(None)

    def _dra_handler(self, version: str) -> Any:
        prepare = dra_method(version, "NodePrepareResources")
        unprepare = dra_method(version, "NodeUnprepareResources")

        async def on_prepare(request: Any) -> Any:
            self.calls.append(("prepare:" + version, _refs(request)))
            response = prepare.response()
            for claim in request.claims:
                if self.answer_only is not None and claim.uid not in self.answer_only:
                    continue
                result = response.claims[claim.uid]
                if claim.uid in self.prepare_errors:
                    result.error = self.prepare_errors[claim.uid]
                    continue
                ids = self.cdi_ids.get(claim.uid, ())
                result.devices.add(
                    request_names=["channel"],
                    pool_name="node-0",
                    device_name="channel-0",
                    cdi_device_ids=list(ids),
                )
            return response

        async def on_unprepare(request: Any) -> Any:
            self.calls.append(("unprepare:" + version, _refs(request)))
            response = unprepare.response()
            for claim in request.claims:
                response.claims[claim.uid].error = self.unprepare_errors.get(claim.uid, "")
            return response

        return generic_handler(
            f"{DRA_PACKAGES[version]}.DRAPlugin",
            {
                "NodePrepareResources": (prepare, on_prepare),
                "NodeUnprepareResources": (unprepare, on_unprepare),
            },
        )

    async def _get_info(self, request: Any) -> Any:
        return registration_method("GetInfo").response(
            type=self.plugin_type,
            name=self.driver_name,
            endpoint=str(self.dra_socket),
            supported_versions=list(self.versions),
        )

    async def _notify(self, request: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        if not request.plugin_registered:
            raise RuntimeError(f"failed registration process: {request.error}")
        return registration_method("NotifyRegistrationStatus").response()


def _refs(request: Any) -> tuple[tuple[str, str, str], ...]:
    return tuple((claim.namespace, claim.uid, claim.name) for claim in request.claims)
