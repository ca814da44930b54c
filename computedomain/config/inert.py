"""NVIDIA's controller flags that have nothing to set here (pprof, klog's logging options):
accepted, their values checked as NVIDIA checks them, and logged once at start when set."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import InvalidOperation
from typing import Any

from computedomain.config.parsers import ConfigError, as_bool, as_text, parse_duration, quantity


@dataclass(frozen=True)
class InertFlag:
    """A flag of NVIDIA's compute-domain-controller that has no counterpart here: accepted (its
    value checked as NVIDIA checks it) so NVIDIA's Deployment runs unchanged, and logged once
    at start when set."""

    flag: str
    env: str
    parse: Callable[[str, str], Any]
    accepts: str
    help: str
    boolean: bool = False

    @property
    def option(self) -> str:
        return "nvidia_" + self.flag.lstrip("-").replace("-", "_")


_VMODULE_ITEM = re.compile(r"^[^=,]+=\d+$")


def _vmodule(text: str, flag: str) -> str:
    for item in filter(None, text.split(",")):
        if not _VMODULE_ITEM.match(item):
            raise ConfigError(f"{flag}: {item!r} does not have the pattern=N format")
    return text


def _size(text: str, flag: str) -> str:
    try:
        quantity(text.strip())
    except (ValueError, InvalidOperation):
        raise ConfigError(f"{flag}: {text!r} is not a size (e.g. 512, 1K, 2Ki, 3M)") from None
    return text


_KLOG_ONE_STREAM = "this controller writes every log line at once to one stream (stderr)"

# NVIDIA's v0.4.x compute-domain-controller flags (its main.go and pkg/flags: urfave/cli over
# component-base's logging options) that have nothing to set here. Every other flag of NVIDIA's
# binary is a row of SETTINGS (same flag, same environment variable) or an alias of one.
# fmt: off
INERT_FLAGS: Sequence[InertFlag] = (
    InertFlag("--pprof-path", "PPROF_PATH", as_text, "any",
              "NVIDIA's HTTP path for Go's pprof profiles on --http-endpoint; a Python process "
              "has none to serve, so it is ignored (NVIDIA's chart sets it empty)"),
    InertFlag("--vmodule", "VMODULE", _vmodule, "pattern=N,...",
              "klog's per-source-file verbosity; ignored: --log-verbosity / -v applies to all"),
    InertFlag("--log-flush-frequency", "LOG_FLUSH_FREQUENCY", parse_duration, "duration",
              f"klog's longest time between log flushes; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-json-info-buffer-size", "LOG_JSON_INFO_BUFFER_SIZE", _size, "size",
              f"[Alpha] klog's buffer for info lines in JSON format; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-json-split-stream", "LOG_JSON_SPLIT_STREAM", as_bool, "true or false",
              f"[Alpha] klog's info lines to stdout, errors to stderr (JSON); ignored: "
              f"{_KLOG_ONE_STREAM}", boolean=True),
    InertFlag("--log-text-info-buffer-size", "LOG_TEXT_INFO_BUFFER_SIZE", _size, "size",
              f"[Alpha] klog's buffer for info lines in text format; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-text-split-stream", "LOG_TEXT_SPLIT_STREAM", as_bool, "true or false",
              f"[Alpha] klog's info lines to stdout, errors to stderr (text); ignored: "
              f"{_KLOG_ONE_STREAM}", boolean=True),
)
# fmt: on
