"""CDI as a container runtime reads it, for the stand-in kubelet: the spec files a DRA plugin
writes into the node's CDI directories (JSON or YAML: ``cdiVersion``, ``kind`` =
``vendor/class``, ``devices[]`` with ``name`` and ``containerEdits``, and the spec's own
``containerEdits``), the fully-qualified device IDs (``vendor/class=name``) a prepare answers,
and their edits merged as the runtime merges them before it creates the container:

- for each device in order, its spec's edits (once per spec) and then the device's edits;
- environment: ``NAME=value`` entries, a later one replacing an earlier one of the same name in
  place;
- device nodes: one per container path, the later replacing the earlier;
- mounts: one per container path, the later replacing the earlier, then sorted by the number of
  path components (parents mount before children);
- hooks: kept in order, by hook name.

A later CDI directory has the higher priority (``/etc/cdi`` then ``/var/run/cdi``); two specs of
one directory defining the same device make it a conflict, which does not resolve.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SPEC_SUFFIXES = (".json", ".yaml", ".yml")
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9_-]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


class CdiError(ValueError):
    pass


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    type: str = ""
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def __add__(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
        )

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, where: str) -> ContainerEdits:
        raw = raw or {}
        env = tuple(str(entry) for entry in raw.get("env") or [])
        for entry in env:
            if "=" not in entry:
                raise CdiError(f"{where}: env entry {entry!r} is not NAME=value")
        nodes = []
        for node in raw.get("deviceNodes") or []:
            if not node.get("path"):
                raise CdiError(f"{where}: a device node without a path")
            nodes.append(
                DeviceNode(
                    path=str(node["path"]),
                    host_path=str(node.get("hostPath") or ""),
                    type=str(node.get("type") or ""),
                    major=_int(node.get("major")),
                    minor=_int(node.get("minor")),
                    file_mode=_int(node.get("fileMode")),
                    permissions=str(node.get("permissions") or ""),
                    uid=_int(node.get("uid")),
                    gid=_int(node.get("gid")),
                )
            )
        mounts = []
        for mount in raw.get("mounts") or []:
            if not mount.get("hostPath") or not mount.get("containerPath"):
                raise CdiError(f"{where}: a mount needs hostPath and containerPath, got {mount}")
            mounts.append(
                Mount(
                    host_path=str(mount["hostPath"]),
                    container_path=str(mount["containerPath"]),
                    type=str(mount.get("type") or ""),
                    options=tuple(str(o) for o in mount.get("options") or []),
                )
            )
        hooks = []
        for hook in raw.get("hooks") or []:
            if not hook.get("hookName") or not hook.get("path"):
                raise CdiError(f"{where}: a hook needs hookName and path, got {hook}")
            hooks.append(
                Hook(
                    hook_name=str(hook["hookName"]),
                    path=str(hook["path"]),
                    args=tuple(str(a) for a in hook.get("args") or []),
                    env=tuple(str(e) for e in hook.get("env") or []),
                    timeout=_int(hook.get("timeout")),
                )
            )
        return cls(tuple(env), tuple(nodes), tuple(mounts), tuple(hooks))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class Spec:
    path: Path
    version: str
    kind: str
    edits: ContainerEdits
    devices: Mapping[str, ContainerEdits]

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]


def load_spec(path: Path) -> Spec:
    text = path.read_text()
    raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    where = str(path)
    if not isinstance(raw, dict):
        raise CdiError(f"{where}: not a CDI spec")
    version = str(raw.get("cdiVersion") or "")
    kind = str(raw.get("kind") or "")
    if not version:
        raise CdiError(f"{where}: no cdiVersion")
    if not _KIND.match(kind):
        raise CdiError(f"{where}: kind {kind!r} is not vendor/class")
    devices: dict[str, ContainerEdits] = {}
    for device in raw.get("devices") or []:
        name = str(device.get("name") or "")
        if not _NAME.match(name):
            raise CdiError(f"{where}: invalid device name {name!r}")
        if name in devices:
            raise CdiError(f"{where}: device {name!r} defined twice")
        devices[name] = ContainerEdits.parse(device.get("containerEdits"), f"{where}: {name}")
    if not devices:
        raise CdiError(f"{where}: no devices")
    return Spec(
        path, version, kind, ContainerEdits.parse(raw.get("containerEdits"), where), devices
    )


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """``vendor/class=name`` -> (vendor, class, name)."""
    kind, sep, name = device.partition("=")
    if not sep or not _KIND.match(kind) or not _NAME.match(name):
        raise CdiError(f"{device!r} is not a qualified CDI device name (vendor/class=name)")
    vendor, cls = kind.split("/", 1)
    return vendor, cls, name


@dataclass
class Registry:
    """The devices of the specs under ``directories`` (lowest priority first), read now."""

    directories: Sequence[Path]
    devices: dict[str, tuple[Spec, ContainerEdits]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        self.devices.clear()
        self.errors.clear()
        for directory in self.directories:
            found: dict[str, tuple[Spec, ContainerEdits]] = {}
            conflicts: set[str] = set()
            paths = sorted(directory.iterdir()) if directory.is_dir() else []
            for path in paths:
                if path.suffix not in SPEC_SUFFIXES or not path.is_file():
                    continue
                try:
                    spec = load_spec(path)
                except CdiError as error:
                    self.errors.append(str(error))
                    continue
                except (OSError, ValueError, yaml.YAMLError) as error:
                    self.errors.append(f"{path}: {error}")
                    continue
                for name, edits in spec.devices.items():
                    qualified = f"{spec.kind}={name}"
                    if qualified in found:
                        conflicts.add(qualified)
                    found[qualified] = (spec, edits)
            for qualified in conflicts:
                del found[qualified]
                self.errors.append(f"{directory}: conflicting definitions of {qualified}")
            self.devices.update(found)  # a later directory wins

    def resolve(self, device_ids: Iterable[str]) -> ContainerEdits:
        """The merged edits of ``device_ids`` as a runtime injects them; ``CdiError`` with the
        runtime's words if any does not resolve."""
        edits = ContainerEdits()
        seen_specs: set[Path] = set()
        unresolved = []
        for device in device_ids:
            parse_qualified_name(device)
            entry = self.devices.get(device)
            if entry is None:
                unresolved.append(device)
                continue
            spec, device_edits = entry
            if spec.path not in seen_specs:
                seen_specs.add(spec.path)
                edits += spec.edits
            edits += device_edits
        if unresolved:
            raise CdiError(f"unresolvable CDI devices {', '.join(unresolved)}")
        return edits


@dataclass(frozen=True)
class Injected:
    """What the container gets: its environment, device nodes and mounts, hooks to run."""

    env: Mapping[str, str]
    device_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]
    hooks: tuple[Hook, ...]


def apply(edits: ContainerEdits, env: Mapping[str, str] | None = None) -> Injected:
    """Apply ``edits`` to a container whose environment is ``env``, as the runtime's OCI spec
    generator does."""
    merged = dict(env or {})
    for entry in edits.env:
        name, _, value = entry.partition("=")
        merged[name] = value  # a dict keeps the first position: replaced in place
    nodes: dict[str, DeviceNode] = {}
    for node in edits.device_nodes:
        nodes.pop(node.path, None)
        nodes[node.path] = node
    mounts: dict[str, Mount] = {}
    for mount in edits.mounts:
        mounts.pop(mount.container_path, None)
        mounts[mount.container_path] = mount
    ordered = sorted(mounts.values(), key=lambda m: len(Path(m.container_path).parts))
    return Injected(merged, tuple(nodes.values()), tuple(ordered), edits.hooks)
