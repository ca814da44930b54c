"""Checks of parsed values (ranges, names, files): ``(value, row) -> None``, raising
``ConfigError``; each carries the words that say what it accepts (shown in --help and the
docs)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from computedomain.config.parsers import ConfigError

if TYPE_CHECKING:
    from computedomain.config.table import Setting


@dataclass(frozen=True)
class Check:
    """A validator plus the words that say what it accepts (shown in --help and the docs)."""

    accepts: str
    test: Callable[[Any, Setting], None]

    def __call__(self, value: Any, row: Setting) -> None:
        self.test(value, row)


def _number(value: float) -> str:
    return f"{value:g}"


def at_least(minimum: float, maximum: float | None = None) -> Check:
    def check(value: Any, row: Setting) -> None:
        if value < minimum or (maximum is not None and value > maximum):
            raise ConfigError(f"{row.flag} / {row.env}: must be {accepts}, got {value}")

    accepts = (
        f">= {_number(minimum)}"
        if maximum is None
        else (f"{_number(minimum)} to {_number(maximum)}")
    )
    return Check(accepts, check)


def above(bound: float) -> Check:
    def check(value: Any, row: Setting) -> None:
        if not value > bound:
            raise ConfigError(f"{row.flag} / {row.env}: must be > {_number(bound)}, got {value}")

    return Check(f"> {_number(bound)}", check)


def seconds_at_least(minimum: float, maximum: float | None = None) -> Check:
    def check(value: Any, row: Setting) -> None:
        if value < minimum:
            raise ConfigError(
                f"{row.flag} / {row.env}: must be at least {_number(minimum)}s, got {value:g}s"
            )
        if maximum is not None and value > maximum:
            raise ConfigError(
                f"{row.flag} / {row.env}: must be at most {_number(maximum)}s, got {value:g}s"
            )

    if maximum is None:
        return Check(f"duration >= {_number(minimum)}s", check)
    return Check(f"duration {_number(minimum)}s to {_number(maximum)}s", check)


def no_white_space(what: str) -> Check:
    def check(value: Any, row: Setting) -> None:
        if any(ch.isspace() for ch in str(value)):
            raise ConfigError(f"{row.flag} / {row.env}: {value!r} contains white space")

    return Check(f"{what} without white space, or empty", check)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_names(kind: str, *, label: bool, optional: bool = False) -> Check:
    """Each name (one, a tuple of them, or None when optional) is a DNS-1123 label/subdomain."""
    pattern = _DNS_LABEL if label else _DNS_SUBDOMAIN
    rule = "DNS-1123 label" if label else "DNS-1123 subdomain"

    def check(value: Any, row: Setting) -> None:
        names = value if isinstance(value, tuple) else (() if value is None else (value,))
        if not names and not optional and not isinstance(value, tuple):
            raise ConfigError(f"{row.flag} / {row.env} must not be empty")
        for name in names:
            if len(name) > (63 if label else 253) or not pattern.match(name):
                raise ConfigError(
                    f"{row.flag} / {row.env}: {name!r} is not a valid {kind} name ({rule}: "
                    f"lower-case letters, digits and '-'{'' if label else ' or .'}, starting and "
                    "ending alphanumeric)"
                )

    return Check(f"{kind} name ({rule})", check)


def validated_by_parser(accepts: str) -> Check:
    """Names what a setting accepts when its parser already refuses everything else."""
    return Check(accepts, lambda value, row: None)


def url_path(value: Any, row: Setting) -> None:
    if not str(value).startswith("/"):
        raise ConfigError(f"{row.flag} / {row.env}: {value!r} must start with '/'")


def cert_dir_or_none(value: Any, row: Setting) -> None:
    if value is None:
        return
    missing = [f for f in ("tls.crt", "tls.key") if not os.path.isfile(os.path.join(value, f))]
    if missing:
        raise ConfigError(f"{row.flag} / {row.env}: {value} has no {' or '.join(missing)}")


def file_or_none(value: Any, row: Setting) -> None:
    if value is not None and not os.path.isfile(value):
        raise ConfigError(f"{row.flag} / {row.env}: {value} is not a file")
