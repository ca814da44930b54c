"""Typed settings for the controller, read from flags with environment-variable fallbacks.

One concern per module:

- ``table.py``: ``SETTINGS``, one ``Setting`` row per flag (flag, environment variable,
  default, parser, check, help, destination), and ``Settings``, what the rows fill in;
- ``parsers.py``: ``(text, flag) -> value`` for each kind of value, and ``ConfigError``;
- ``checks.py``: ranges and validators of parsed values (``at_least``, ``seconds_at_least`` ...);
- ``inert.py``: ``INERT_FLAGS``, NVIDIA's flags accepted without effect (pprof, klog's);
- ``command_line.py``: the argparse parser (``--help``), Go-style ``-flag`` spellings and
  ``parse_settings``;
- ``markdown.py``: the tables docs/operations.md carries.

The names callers use are importable from ``computedomain.config`` itself.
"""

from computedomain.config.command_line import (
    build_parser,
    go_style,
    parse_settings,
    settings_from_namespace,
)
from computedomain.config.inert import INERT_FLAGS, InertFlag
from computedomain.config.markdown import inert_flags_markdown, settings_markdown
from computedomain.config.parsers import (
    ConfigError,
    feature_gate_values,
    ignored_feature_gates,
    parse_bind_address,
    parse_duration,
    parse_feature_gates,
    quantity,
)
from computedomain.config.table import SETTINGS, Setting, Settings, environ

__all__ = [
    "INERT_FLAGS",
    "SETTINGS",
    "ConfigError",
    "InertFlag",
    "Setting",
    "Settings",
    "build_parser",
    "environ",
    "feature_gate_values",
    "go_style",
    "ignored_feature_gates",
    "inert_flags_markdown",
    "parse_bind_address",
    "parse_duration",
    "parse_feature_gates",
    "parse_settings",
    "quantity",
    "settings_from_namespace",
    "settings_markdown",
]
