"""Structured logging on stdlib `logging`: JSON lines or logfmt-style text, klog-like verbosity.

Fields bound for the current task (e.g. one reconcile) live in the `log_context` contextvar;
`bind(...)` adds some for a `with` block. `reconcileID` and `controller` come from the runtime
controller runner's contextvars (`computedomain.runtime.controller.reconcile_id`,
`controller_name`), so reconcilers need not bind them themselves.

Verbosity follows klog: V(0) is what matters, higher numbers are chattier. `v(n)` maps V(n) to a
stdlib level just below INFO, and `configure_logging(verbosity=n)` lets through V(0)..V(n).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TextIO

from computedomain.runtime import controller as runtime_controller

LogFormat = Literal["json", "text"]

log_context: ContextVar[Mapping[str, Any]] = ContextVar(
    "computedomain_log_context", default=MappingProxyType({})
)

_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_CONTEXT_ATTRIBUTE = "_computedomain_context"


def v(level: int) -> int:
    """The stdlib level for klog's V(level): V(0) is INFO, V(1..9) sit between INFO and DEBUG."""
    return logging.INFO - max(0, min(level, 9))


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add fields to every record logged in this context (and tasks started from it)."""
    token = log_context.set({**log_context.get(), **fields})
    try:
        yield
    finally:
        log_context.reset(token)


def reconcile_fields(
    controller: str,
    namespace: str,
    name: str,
    *,
    group: str = "resource.nvidia.com",
    kind: str = "ComputeDomain",
) -> dict[str, Any]:
    """The fields controller-runtime binds for a reconcile; reconcileID is added automatically."""
    return {
        "controller": controller,
        "controllerGroup": group,
        "controllerKind": kind,
        kind: {"name": name, "namespace": namespace},
        "namespace": namespace,
        "name": name,
    }


class ContextFilter(logging.Filter):
    """Snapshots the bound fields onto each record in the emitting task's context."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = dict(log_context.get())
        # Set by the runtime's controller runner around each reconcile ("" outside one).
        controller = runtime_controller.controller_name.get()
        if controller:
            fields.setdefault("controller", controller)
        reconcile_id = runtime_controller.reconcile_id.get()
        if reconcile_id:
            fields["reconcileID"] = reconcile_id
        setattr(record, _CONTEXT_ATTRIBUTE, fields)
        return True


def _level_fields(levelno: int) -> dict[str, Any]:
    if levelno >= logging.ERROR:
        return {"level": "error"}
    if levelno >= logging.WARNING:
        return {"level": "warning"}
    if levelno > logging.DEBUG:
        return {"level": "info", "v": max(0, logging.INFO - levelno)}
    return {"level": "debug"}


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Everything but ts/level/msg: logger, bound context, `extra=` fields, the error."""
    fields: dict[str, Any] = {"logger": record.name}
    fields.update(getattr(record, _CONTEXT_ATTRIBUTE, {}))
    for key, value in vars(record).items():
        if key not in _RECORD_ATTRIBUTES and key != _CONTEXT_ATTRIBUTE:
            fields[key] = value
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        fields.setdefault("err", str(exc) or type(exc).__name__)
    if isinstance(fields.get("err"), BaseException):
        exc = fields["err"]
        fields["err"] = str(exc) or type(exc).__name__
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    when = datetime.fromtimestamp(record.created, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _stacktrace(record: logging.LogRecord) -> str | None:
    if not record.exc_info or record.exc_info[1] is None:
        return None
    return "".join(traceback.format_exception(*record.exc_info)).rstrip()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, (v), msg, logger, bound and extra fields, err."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {"ts": _timestamp(record), **_level_fields(record.levelno)}
        document["msg"] = record.getMessage()
        document.update(_record_fields(record))
        stacktrace = _stacktrace(record)
        if stacktrace is not None:
            document["stacktrace"] = stacktrace
        return json.dumps(document, default=str, ensure_ascii=False)


def _text_value(value: Any) -> str:
    if isinstance(value, Mapping) and set(value) == {"name", "namespace"}:
        # klog's KObj rendering: "namespace/name".
        text = f"{value['namespace']}/{value['name']}" if value["namespace"] else str(value["name"])
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False)
    if text == "" or any(ch in text for ch in ' "=\\\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class TextFormatter(logging.Formatter):
    """logfmt-style `key=value` pairs for people; the stack trace follows on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        pairs: dict[str, Any] = {"ts": _timestamp(record), **_level_fields(record.levelno)}
        pairs["msg"] = record.getMessage()
        pairs.update(_record_fields(record))
        line = " ".join(f"{key}={_text_value(value)}" for key, value in pairs.items())
        stacktrace = _stacktrace(record)
        return line if stacktrace is None else f"{line}\n{stacktrace}"


_HANDLER_MARK = "_computedomain_handler"


def configure_logging(
    *,
    log_format: LogFormat = "json",
    verbosity: int = 0,
    stream: TextIO | None = None,
    logger: logging.Logger | None = None,
) -> logging.Handler:
    """Install our handler on `logger` (the root by default), replacing one installed earlier."""
    if log_format not in ("json", "text"):
        raise ValueError(f"unknown log format {log_format!r} (json or text)")
    if verbosity < 0:
        raise ValueError(f"verbosity must be >= 0, got {verbosity}")
    target = logger if logger is not None else logging.getLogger()
    for existing in list(target.handlers):
        if getattr(existing, _HANDLER_MARK, False):
            target.removeHandler(existing)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    target.addHandler(handler)
    target.setLevel(v(verbosity) if verbosity < 10 else logging.DEBUG)
    return handler
