"""Pydantic models of resource.nvidia.com/v1beta1 as NVIDIA's components read and write them.

Field names are snake_case in Python and camelCase on the wire. Objects read from the
apiserver keep unknown fields (``extra="allow"``) so a read-modify-write never drops what a
newer component added; the opaque DRA configs are strict because NVIDIA's plugin decodes them
strictly (an unknown field there is a permanent prepare error).

Dump with :meth:`KubeModel.to_dict`: aliases, ``None`` left out, and nothing else dropped,
so ``index: 0`` is always written (Go has no ``omitempty`` on it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from computedomain.api import constants as c

NodeStatus = Literal["Ready", "NotReady"]
AllocationMode = Literal["All", "Single"]
ConditionStatus = Literal["True", "False", "Unknown"]


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, the way metav1.Time serialises."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# A metav1.Time: parsed from any RFC 3339 string, written back as metav1 writes it.
Timestamp = Annotated[datetime, PlainSerializer(format_time, return_type=str, when_used="json")]


class KubeModel(BaseModel):
    """Base of every wire model: camelCase aliases, construction by field name, lenient reads."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with wire names; ``None`` fields are omitted, zeros and empties kept."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


def _is_empty(value: str) -> bool:
    return value == ""


# Identity strings read as "" when unset (objects from the apiserver always carry them) and
# are left out of dumps while empty, so a body built in code never sends `uid: ""`.
_IdentityStr = Annotated[str, Field(default="", exclude_if=_is_empty)]


class ObjectMeta(KubeModel):
    name: _IdentityStr
    generate_name: _IdentityStr
    namespace: _IdentityStr
    uid: _IdentityStr
    generation: int | None = None
    resource_version: _IdentityStr
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = None
    creation_timestamp: str | None = None
    owner_references: list[OwnerReference] | None = None


# --- ComputeDomain -------------------------------------------------------------------------


class ResourceClaimTemplateRef(KubeModel):
    name: str


class ComputeDomainChannelSpec(KubeModel):
    resource_claim_template: ResourceClaimTemplateRef
    allocation_mode: AllocationMode = c.ALLOCATION_SINGLE


class ComputeDomainSpec(KubeModel):
    num_nodes: int = Field(default=0, ge=0)
    channel: ComputeDomainChannelSpec


class ComputeDomainNode(KubeModel):
    """One entry of ``status.nodes`` (list-map keyed by ``name``)."""

    name: str
    ip_address: str
    clique_id: str = Field(alias="cliqueID")
    # Non-fabric entries carry NON_FABRIC_INDEX; Go decodes a missing index as 0.
    index: int = 0
    status: NodeStatus = c.STATUS_NOT_READY


class Condition(KubeModel):
    """metav1.Condition."""

    type: str
    status: ConditionStatus
    observed_generation: int | None = None
    last_transition_time: Timestamp
    reason: str
    message: str = ""


class ComputeDomainStatus(KubeModel):
    # Upstream fields.
    status: NodeStatus = c.STATUS_NOT_READY
    nodes: list[ComputeDomainNode] = Field(default_factory=list)
    # Our additive fields. Legacy daemons' status writes erase them; absence means nothing.
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    node_count: int | None = None
    ready_node_count: int | None = None
    clique_count: int | None = None


class ComputeDomain(KubeModel):
    api_version: str = c.API_VERSION
    kind: str = c.CD_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    # The CRD requires nothing at the root: a CD without spec passes the schema.
    spec: ComputeDomainSpec | None = None
    status: ComputeDomainStatus | None = None

    @property
    def uid(self) -> str:
        return self.metadata.uid

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def num_nodes(self) -> int:
        return self.spec.num_nodes if self.spec is not None else 0

    @property
    def deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None


# --- ComputeDomainClique -------------------------------------------------------------------


class ComputeDomainDaemonInfo(KubeModel):
    """One entry of a clique's ``daemons`` (list-map keyed by ``nodeName``)."""

    node_name: str
    ip_address: str
    clique_id: str = Field(alias="cliqueID")
    index: int = 0
    status: NodeStatus = c.STATUS_NOT_READY


class ComputeDomainClique(KubeModel):
    api_version: str = c.API_VERSION
    kind: str = c.CLIQUE_KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    daemons: list[ComputeDomainDaemonInfo] = Field(default_factory=list)


# --- Opaque DRA configs (strict) -----------------------------------------------------------


class _OpaqueConfig(KubeModel):
    model_config = ConfigDict(extra="forbid")

    api_version: Literal["resource.nvidia.com/v1beta1"] = "resource.nvidia.com/v1beta1"
    domain_id: str = Field(alias="domainID", min_length=1)


class ComputeDomainChannelConfig(_OpaqueConfig):
    kind: Literal["ComputeDomainChannelConfig"] = c.CHANNEL_CONFIG_KIND
    allocation_mode: str | None = None


class ComputeDomainDaemonConfig(_OpaqueConfig):
    kind: Literal["ComputeDomainDaemonConfig"] = c.DAEMON_CONFIG_KIND
