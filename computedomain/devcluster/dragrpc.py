"""The kubelet's side of a DRA kubelet plugin's two gRPC services, over unix sockets:

- plugin registration (``pluginregistration.Registration``): the plugin serves it on its socket
  in the kubelet's registry directory; the kubelet asks ``GetInfo`` (type ``DRAPlugin``, the
  driver's name, the path of its DRA socket, the DRA API versions it serves) and answers with
  ``NotifyRegistrationStatus``;
- DRA (``k8s.io.kubelet.pkg.apis.dra.<version>.DRAPlugin``) on that socket:
  ``NodePrepareResources`` / ``NodeUnprepareResources`` for a pod's claims, answered per claim
  UID with the prepared devices' CDI device IDs or an error.

No generated code: the few message types are described here, field by field (names, numbers and
the service and method names are the wire's facts), and built at import time with protobuf's
descriptor and message factory. Dynamic messages are untyped, so only the small frozen
dataclasses below cross this module's boundary.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DRA_PLUGIN_TYPE = "DRAPlugin"
# What GetInfo lists as supported versions, and the package of each; the kubelet prefers v1.
DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
DRA_PACKAGES = {
    DRA_V1: "k8s.io.kubelet.pkg.apis.dra.v1",
    DRA_V1BETA1: "k8s.io.kubelet.pkg.apis.dra.v1beta1",
}
REGISTRATION_SERVICE = "pluginregistration.Registration"
DEFAULT_TIMEOUT = 45.0  # the kubelet's DRA call timeout

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (name, number, type, label, message type name or "", proto3 optional)
_Field = tuple[str, int, int, int, str, bool]


def _field(name: str, number: int, kind: int = _STRING, label: int = _ONE, of: str = "") -> _Field:
    return (name, number, kind, label, of, False)


def _add_message(
    file: descriptor_pb2.FileDescriptorProto,
    name: str,
    fields: Sequence[_Field],
    maps: Mapping[str, tuple[int, str]] | None = None,
) -> None:
    """A message of ``fields``; ``maps`` adds ``map<string, Message>`` fields (the wire's
    repeated ``<Name>Entry {key = 1; value = 2}``)."""
    message = file.message_type.add(name=name)
    package = file.package
    for field_name, number, kind, label, of, optional in fields:
        spec = message.field.add(name=field_name, number=number, type=kind, label=label)
        if of:
            spec.type_name = f".{package}.{of}"
        if optional:
            spec.proto3_optional = True
            spec.oneof_index = len(message.oneof_decl)
            message.oneof_decl.add(name=f"_{field_name}")
    for field_name, (number, value_type) in (maps or {}).items():
        entry_name = "".join(part.capitalize() for part in field_name.split("_")) + "Entry"
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=_STRING, label=_ONE)
        entry.field.add(
            name="value", number=2, type=_MESSAGE, label=_ONE, type_name=f".{package}.{value_type}"
        )
        message.field.add(
            name=field_name,
            number=number,
            type=_MESSAGE,
            label=_MANY,
            type_name=f".{package}.{name}.{entry_name}",
        )


def _dra_file(package: str, with_share_id: bool) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package.replace('.', '/')}/dra.proto", package=package, syntax="proto3"
    )
    claim = [_field("namespace", 1), _field("uid", 2), _field("name", 3)]
    _add_message(file, "Claim", claim)
    device = [
        _field("request_names", 1, label=_MANY),
        _field("pool_name", 2),
        _field("device_name", 3),
        _field("cdi_device_ids", 4, label=_MANY),
    ]
    if with_share_id:  # v1 only
        device.append(("share_id", 5, _STRING, _ONE, "", True))
    _add_message(file, "Device", device)
    _add_message(
        file, "NodePrepareResourcesRequest", [_field("claims", 1, _MESSAGE, _MANY, "Claim")]
    )
    _add_message(
        file,
        "NodePrepareResourceResponse",
        [_field("devices", 1, _MESSAGE, _MANY, "Device"), _field("error", 2)],
    )
    _add_message(
        file, "NodePrepareResourcesResponse", [], {"claims": (1, "NodePrepareResourceResponse")}
    )
    _add_message(
        file, "NodeUnprepareResourcesRequest", [_field("claims", 1, _MESSAGE, _MANY, "Claim")]
    )
    _add_message(file, "NodeUnprepareResourceResponse", [_field("error", 1)])
    _add_message(
        file, "NodeUnprepareResourcesResponse", [], {"claims": (1, "NodeUnprepareResourceResponse")}
    )
    return file


def _registration_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="pluginregistration/registration.proto", package="pluginregistration", syntax="proto3"
    )
    _add_message(
        file,
        "PluginInfo",
        [
            _field("type", 1),
            _field("name", 2),
            _field("endpoint", 3),
            _field("supported_versions", 4, label=_MANY),
        ],
    )
    _add_message(
        file, "RegistrationStatus", [_field("plugin_registered", 1, _BOOL), _field("error", 2)]
    )
    _add_message(file, "RegistrationStatusResponse", [])
    _add_message(file, "InfoRequest", [])
    return file


_POOL = descriptor_pool.DescriptorPool()
for _file in (
    _registration_file(),
    _dra_file(DRA_PACKAGES[DRA_V1], with_share_id=True),
    _dra_file(DRA_PACKAGES[DRA_V1BETA1], with_share_id=False),
):
    _POOL.Add(_file)


def message_class(full_name: str) -> Any:
    """The message class of a fully-qualified message name of the descriptions above."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


@dataclass(frozen=True)
class Method:
    """One unary method: its path on the wire and its request and response classes."""

    path: str
    request: Any
    response: Any


def registration_method(name: str) -> Method:
    request, response = {
        "GetInfo": ("InfoRequest", "PluginInfo"),
        "NotifyRegistrationStatus": ("RegistrationStatus", "RegistrationStatusResponse"),
    }[name]
    return Method(
        f"/{REGISTRATION_SERVICE}/{name}",
        message_class(f"pluginregistration.{request}"),
        message_class(f"pluginregistration.{response}"),
    )


def dra_method(version: str, name: str) -> Method:
    package = DRA_PACKAGES[version]
    return Method(
        f"/{package}.DRAPlugin/{name}",
        message_class(f"{package}.{name}Request"),
        message_class(f"{package}.{name}Response"),
    )


# -- the typed boundary -------------------------------------------------------------------


@dataclass(frozen=True)
class PluginInfo:
    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it to the plugin."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its devices, or the plugin's error ("" when prepared)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class RegistrationError(RuntimeError):
    pass


class DraCallError(RuntimeError):
    """A DRA call that failed as a whole or for a claim, worded as the kubelet words it."""


def _unix(path: Path) -> str:
    return f"unix://{path}"


@contextlib.asynccontextmanager
async def _channel(path: Path) -> AsyncIterator[grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(_unix(path))
    try:
        yield channel
    finally:
        await channel.close()


async def _call(channel: grpc.aio.Channel, method: Method, request: Any, seconds: float) -> Any:
    stub = channel.unary_unary(
        method.path,
        request_serializer=method.request.SerializeToString,
        response_deserializer=method.response.FromString,
    )
    return await stub(request, timeout=seconds)


async def register(
    registration_socket: Path,
    driver_name: str,
    *,
    seconds: float = 10.0,
) -> tuple[PluginInfo, str]:
    """What the kubelet's plugin watcher does with a new socket in its registry directory:
    ``GetInfo``, validate it, and ``NotifyRegistrationStatus`` the outcome. Returns the plugin's
    info and the DRA version to speak (v1 if served); raises ``RegistrationError`` if the plugin
    is not what is expected (after telling it so, as the kubelet does)."""
    get_info = registration_method("GetInfo")
    notify = registration_method("NotifyRegistrationStatus")
    async with _channel(registration_socket) as channel:
        raw = await _call(channel, get_info, get_info.request(), seconds)
        info = PluginInfo(
            type=raw.type,
            name=raw.name,
            endpoint=raw.endpoint,
            supported_versions=tuple(raw.supported_versions),
        )
        problem = ""
        version = ""
        if info.type != DRA_PLUGIN_TYPE:
            problem = f"plugin type {info.type!r} is not {DRA_PLUGIN_TYPE!r}"
        elif info.name != driver_name:
            problem = f"plugin name {info.name!r} is not {driver_name!r}"
        elif not info.endpoint or not Path(info.endpoint).is_absolute():
            problem = f"plugin endpoint {info.endpoint!r} is not an absolute socket path"
        else:
            served = [v for v in (DRA_V1, DRA_V1BETA1) if v in info.supported_versions]
            if not served:
                problem = f"none of the supported versions {list(info.supported_versions)} is known"
            else:
                version = served[0]
        status = notify.request(plugin_registered=not problem, error=problem)
        try:
            await _call(channel, notify, status, seconds)
        except grpc.aio.AioRpcError:
            if not problem:
                raise
            # The plugin answers a failed registration with an error of its own.
        if problem:
            raise RegistrationError(problem)
        return info, version


def _claims(message: Any, refs: Sequence[ClaimRef]) -> None:
    for ref in refs:
        message.claims.add(namespace=ref.namespace, uid=ref.uid, name=ref.name)


def _device(raw: Any) -> PreparedDevice:
    share_id = None
    with contextlib.suppress(ValueError):  # v1beta1 has no share_id
        share_id = raw.share_id if raw.HasField("share_id") else None
    return PreparedDevice(
        request_names=tuple(raw.request_names),
        pool_name=raw.pool_name,
        device_name=raw.device_name,
        cdi_device_ids=tuple(raw.cdi_device_ids),
        share_id=share_id,
    )


@dataclass
class DraClient:
    """The DRA service of one registered plugin."""

    endpoint: Path
    version: str = DRA_V1
    timeout: float = DEFAULT_TIMEOUT

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """``NodePrepareResources``: the answer per claim UID, as the plugin gave it."""
        method = dra_method(self.version, "NodePrepareResources")
        request = method.request()
        _claims(request, claims)
        async with _channel(self.endpoint) as channel:
            raw = await _call(channel, method, request, self.timeout)
        return {
            uid: PrepareResult(
                devices=tuple(_device(device) for device in result.devices), error=result.error
            )
            for uid, result in raw.claims.items()
        }

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """``NodeUnprepareResources``: the error per claim UID ("" when unprepared)."""
        method = dra_method(self.version, "NodeUnprepareResources")
        request = method.request()
        _claims(request, claims)
        async with _channel(self.endpoint) as channel:
            raw = await _call(channel, method, request, self.timeout)
        return {uid: result.error for uid, result in raw.claims.items()}

    async def prepare_pod(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare as the kubelet's DRA manager does for a pod: any call error, an error for a
        claim, an answer for an unknown claim or a claim left out fails the whole pod, with the
        kubelet's words (``DraCallError``)."""
        try:
            results = await self.prepare(claims)
        except grpc.aio.AioRpcError as error:
            raise DraCallError(f"NodePrepareResources failed: {_rpc_text(error)}") from error
        by_uid = {ref.uid: ref for ref in claims}
        for uid, result in results.items():
            ref = by_uid.get(uid)
            if ref is None:
                raise DraCallError(
                    f"NodePrepareResources returned result for unknown claim UID {uid}"
                )
            if result.error:
                raise DraCallError(f"NodePrepareResources failed for claim {ref}: {result.error}")
        if len(results) != len(claims):
            raise DraCallError(f"NodePrepareResources left out {len(claims) - len(results)} claims")
        return results

    async def unprepare_pod(self, claims: Sequence[ClaimRef]) -> None:
        """Unprepare as the kubelet does: any error fails (and is retried by the caller)."""
        try:
            results = await self.unprepare(claims)
        except grpc.aio.AioRpcError as error:
            raise DraCallError(f"NodeUnprepareResources failed: {_rpc_text(error)}") from error
        by_uid = {ref.uid: ref for ref in claims}
        for uid, error_text in results.items():
            ref = by_uid.get(uid)
            if ref is None:
                raise DraCallError(
                    f"NodeUnprepareResources returned result for unknown claim UID {uid}"
                )
            if error_text:
                raise DraCallError(f"NodeUnprepareResources failed for claim {ref}: {error_text}")
        if len(results) != len(claims):
            raise DraCallError(
                f"NodeUnprepareResources left out {len(claims) - len(results)} claims"
            )


def _rpc_text(error: grpc.aio.AioRpcError) -> str:
    """Go's rendering of a gRPC status error: ``rpc error: code = X desc = ...``."""
    code = "".join(part.capitalize() for part in error.code().name.split("_"))
    return f"rpc error: code = {code} desc = {error.details()}"


# -- a server of the same services (the wire's test double) -------------------------------

Handler = Callable[[Any], Any]


def generic_handler(service: str, methods: Mapping[str, tuple[Method, Handler]]) -> Any:
    """A grpc generic handler serving ``methods`` (name -> (method, async handler(request)))
    under ``service``."""

    def unary(method: Method, handler: Handler) -> Any:
        async def serve(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            return await handler(request)

        return grpc.unary_unary_rpc_method_handler(
            serve,
            request_deserializer=method.request.FromString,
            response_serializer=method.response.SerializeToString,
        )

    return grpc.method_handlers_generic_handler(
        service, {name: unary(method, handler) for name, (method, handler) in methods.items()}
    )
