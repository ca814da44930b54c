"""Check that a pydantic model and a CRD's structural OpenAPI schema describe the same object.

The CRD YAML under ``crds/`` is kept by hand (it carries CEL, list-map markers and printer
columns that pydantic cannot express); :func:`schema_mismatches` proves it agrees with the
models on field names, types, enums, defaults and required-ness.
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

# Models whose inner structure the CRD leaves open (``type: object`` without properties).
_OPAQUE_MODELS = frozenset({"ObjectMeta"})
_TYPE_META = frozenset({"apiVersion", "kind", "metadata"})


def _strip_optional(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _unwrap_annotated(annotation: Any) -> Any:
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _openapi_type(annotation: Any) -> str:
    annotation = _unwrap_annotated(_strip_optional(_unwrap_annotated(annotation)))
    origin = get_origin(annotation)
    if origin is Literal:
        kinds = {type(v) for v in get_args(annotation)}
        return "string" if kinds == {str} else "integer" if kinds == {int} else "unknown"
    if origin in (list, tuple):
        return "array"
    if origin is dict or annotation is dict:
        return "object"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "object"
        if issubclass(annotation, bool):
            return "boolean"
        if issubclass(annotation, int):
            return "integer"
        if issubclass(annotation, (str, datetime)):
            return "string"
    return "unknown"


def _model_default(info: FieldInfo) -> Any:
    """The default a field serialises to, or PydanticUndefined when the field is required."""
    if info.default is not PydanticUndefined:
        return info.default
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return PydanticUndefined


def schema_mismatches(model: type[BaseModel], schema: dict[str, Any], path: str = "") -> list[str]:
    """Every disagreement between ``model`` and the OpenAPI ``schema``, as readable lines."""
    problems: list[str] = []
    if schema.get("type") != "object":
        return [f"{path or '<root>'}: schema type {schema.get('type')!r}, model is an object"]
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    by_alias = {(info.alias or name): (name, info) for name, info in model.model_fields.items()}

    for wire_name in sorted(set(properties) - set(by_alias)):
        problems.append(f"{path}.{wire_name}: in the CRD but not in {model.__name__}")
    for wire_name in sorted(set(by_alias) - set(properties)):
        problems.append(f"{path}.{wire_name}: in {model.__name__} but not in the CRD")

    for wire_name in sorted(set(properties) & set(by_alias)):
        field_path = f"{path}.{wire_name}"
        prop = properties[wire_name]
        _, info = by_alias[wire_name]
        if not path and wire_name in _TYPE_META:
            # apiVersion/kind/metadata: the model fills them in, the CRD only types them.
            if prop.get("type") != _openapi_type(info.annotation):
                problems.append(f"{field_path}: CRD type {prop.get('type')!r}")
            continue
        problems += _field_mismatches(info, prop, wire_name in required, field_path)
    return problems


def _field_mismatches(
    info: FieldInfo, prop: dict[str, Any], required: bool, path: str
) -> list[str]:
    problems: list[str] = []
    annotation = _unwrap_annotated(_strip_optional(_unwrap_annotated(info.annotation)))
    expected = _openapi_type(annotation)
    if prop.get("type") != expected:
        problems.append(f"{path}: CRD type {prop.get('type')!r}, model type {expected!r}")
        return problems

    if get_origin(annotation) is Literal:
        enum = prop.get("enum")
        if enum is None or set(enum) != set(get_args(annotation)):
            problems.append(f"{path}: CRD enum {enum}, model {sorted(get_args(annotation))}")
    elif "enum" in prop:
        problems.append(f"{path}: CRD has enum {prop['enum']}, model field is not a Literal")

    default = _model_default(info)
    if "default" in prop and default != prop["default"]:
        problems.append(f"{path}: CRD default {prop['default']!r}, model default {default!r}")
    if default is PydanticUndefined and not required:
        problems.append(f"{path}: required in the model, optional in the CRD")
    # A CRD-required field must always be serialised: required in the model or a non-None default.
    if required and default is None:
        problems.append(f"{path}: required in the CRD, but the model may omit it")

    if "minimum" in prop:
        bound = _lower_bound(info)
        if bound is not None and bound != prop["minimum"]:
            problems.append(f"{path}: CRD minimum {prop['minimum']}, model ge={bound}")

    nested_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    if nested_model and annotation.__name__ not in _OPAQUE_MODELS:
        problems += schema_mismatches(annotation, prop, path)
    if expected == "array":
        (item,) = get_args(annotation) or (Any,)
        item = _unwrap_annotated(_strip_optional(item))
        items = prop.get("items", {})
        if isinstance(item, type) and issubclass(item, BaseModel):
            problems += schema_mismatches(item, items, f"{path}[]")
        elif items.get("type") != _openapi_type(item):
            problems.append(f"{path}[]: CRD item type {items.get('type')!r}")
    return problems


def _lower_bound(info: FieldInfo) -> int | None:
    for meta in info.metadata:
        ge = getattr(meta, "ge", None)
        if isinstance(ge, int):
            return ge
    return None


def crd_version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    """The openAPIV3Schema of one version of a CRD dict."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"version {version} not in CRD {crd['metadata']['name']}")
