"""Parsers of the settings' text, one per kind of value: ``(text, flag) -> value``, raising
``ConfigError`` that names the flag. Pure functions: the table (``table.py``) names one per row."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from computedomain.api import constants as c
from computedomain.domain.selectors import SelectorError, matches, parse_selector
from computedomain.runtime.featuregates import FeatureGateError, parse_gates

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """A flag or environment variable holds a value that cannot work."""


def _where(flag: str) -> str:
    """The prefix that names the setting a bad value came from (nothing outside the table)."""
    return f"{flag}: " if flag else ""


def parse_duration(text: str, flag: str = "") -> float:
    """Seconds from a Go-style duration ("15s", "1m30s", "250ms") or a plain number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(f"{_where(flag)}invalid duration {text!r} (use e.g. 15s, 1m30s, 250ms)")
    return total


def feature_gate_values(text: str, flag: str = "") -> dict[str, bool]:
    """Every gate "Name=true,Other=false," names (trailing comma ok), NVIDIA's included; refuses,
    as NVIDIA's binary does, a malformed pair or a name no NVIDIA component knows."""
    try:
        given = parse_gates(text)
    except FeatureGateError as err:
        raise ConfigError(f"{_where(flag)}{err}") from None
    for name in given:
        if name not in c.KNOWN_FEATURE_GATES:
            known = ", ".join(sorted(c.KNOWN_FEATURE_GATES))
            raise ConfigError(f"{_where(flag)}unrecognized feature gate: {name} (known: {known})")
    return given


def parse_feature_gates(text: str, flag: str = "") -> dict[str, bool]:
    """Our gates with their defaults, as "Name=true,Other=false," sets them; NVIDIA's other
    gates are accepted and ignored (``ignored_feature_gates``), except that ``AllAlpha`` and
    ``AllBeta`` set every gate of theirs the string leaves unnamed, as in NVIDIA's binary."""
    given = feature_gate_values(text, flag)
    gates = dict(c.DEFAULT_FEATURE_GATES)
    for toggle, stage in ((c.GATE_ALL_ALPHA, c.ALPHA_FEATURE_GATES),
                          (c.GATE_ALL_BETA, c.BETA_FEATURE_GATES)):  # fmt: skip
        if toggle in given:
            gates.update({name: given[toggle] for name in stage})
    gates.update({name: value for name, value in given.items() if name in gates})
    if gates[c.GATE_CLIQUES] and not gates[c.GATE_DNS_NAMES]:
        # NVIDIA's words; its daemons refuse to start as well.
        raise ConfigError(
            f"feature gate {c.GATE_CLIQUES} requires {c.GATE_DNS_NAMES} to also be enabled"
        )
    return gates


def ignored_feature_gates(text: str) -> dict[str, bool]:
    """The gates a valid FEATURE_GATES names that concern NVIDIA's kubelet plugin or klog, not
    this controller (``AllAlpha``/``AllBeta`` are not among them: they set ours)."""
    return {
        name: value
        for name, value in feature_gate_values(text).items()
        if name in c.NVIDIA_OTHER_FEATURE_GATES and name not in (c.GATE_ALL_ALPHA, c.GATE_ALL_BETA)
    }


def parse_bind_address(text: str) -> tuple[str, int]:
    """("0.0.0.0", 8080) from ":8080", "127.0.0.1:8080" or "8080"."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"invalid bind address {text!r} (want [host]:port, port 0-65535)")
    return host or "0.0.0.0", int(port)  # noqa: S104 - probes and metrics serve the pod network


def as_bind(text: str, flag: str) -> str | None:
    """A validated "[host]:port" string, or None when empty (endpoint disabled)."""
    if not text:
        return None
    try:
        parse_bind_address(text)
    except ConfigError as err:
        raise ConfigError(f"{_where(flag)}{err}") from None
    return text if ":" in text else f":{text}"


def as_list(text: str, flag: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def as_bool(text: str, flag: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{_where(flag)}invalid boolean {text!r}")


def as_int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not an integer") from None


def as_float(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a number") from None


def as_text(text: str, flag: str) -> str:
    return text


def as_optional(text: str, flag: str) -> str | None:
    return text or None


def or_default(default: Callable[[], str]) -> Callable[[str, str], str]:
    def parse(text: str, flag: str) -> str:
        return text or default()

    return parse


def one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(text: str, flag: str) -> str:
        if text.lower() not in choices:
            raise ConfigError(f"{flag}: want {' or '.join(choices)}, got {text!r}")
        return text.lower()

    return parse


_QUANTITY = re.compile(
    r"^\+?(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_QUANTITY_SCALE = {
    "": Decimal(1),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6),
                                        ("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}  # fmt: skip
_RESOURCES_EXAMPLE = (
    '{"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}'
)


def quantity(text: str) -> Decimal:
    """The value of a Kubernetes resource quantity ("100m", "1", "256Mi", "1e3")."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(text)
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _QUANTITY_SCALE[suffix]


def resource_requirements(env: str) -> Callable[[str, str], dict[str, dict[str, str]] | None]:
    """A parser of NVIDIA's ``CD_DAEMON_RESOURCES_JSON``: a JSON-encoded corev1
    ResourceRequirements with ``requests`` and/or ``limits`` (``claims`` is the controller's).
    Quantities may be JSON strings or numbers (Helm's ``toJson`` writes ``cpu: 1`` as 1)."""

    def parse(text: str, flag: str) -> dict[str, dict[str, str]] | None:
        where = f"{flag} / {env}"
        if not text.strip():
            return None
        try:
            value = json.loads(text)
        except ValueError as err:
            raise ConfigError(
                f"{where}: not valid JSON ({err}); want e.g. {_RESOURCES_EXAMPLE}"
            ) from None
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: want a JSON object such as {_RESOURCES_EXAMPLE}")
        unknown = sorted(set(value) - {"requests", "limits"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r} (want requests and/or limits; the "
                "daemon's claims are set by the controller)"
            )
        result: dict[str, dict[str, str]] = {}
        amounts: dict[tuple[str, str], Decimal] = {}
        for kind in ("requests", "limits"):
            section = value.get(kind)
            if section is None:
                continue
            if not isinstance(section, dict):
                raise ConfigError(f"{where}: {kind} must be an object of resource: quantity")
            for resource, raw in section.items():
                if not resource or any(ch.isspace() for ch in resource):
                    raise ConfigError(f"{where}: {kind}: {resource!r} is not a resource name")
                number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
                amount = str(raw) if number or isinstance(raw, str) else ""
                try:
                    amounts[(kind, resource)] = quantity(amount)
                except (ValueError, InvalidOperation):
                    raise ConfigError(
                        f"{where}: {kind}.{resource}: {raw!r} is not a Kubernetes quantity "
                        "(e.g. 100m, 1, 256Mi)"
                    ) from None
                result.setdefault(kind, {})[resource] = amount
        for (kind, resource), value_of in amounts.items():
            limit = amounts.get(("limits", resource))
            if kind == "requests" and limit is not None and value_of > limit:
                raise ConfigError(
                    f"{where}: requests.{resource} {result['requests'][resource]} exceeds "
                    f"limits.{resource} {result['limits'][resource]}"
                )
        return result or None

    return parse


def pod_selectors(text: str, flag: str) -> tuple[str, ...]:
    """Label selectors separated by ';' (a selector's own terms are separated by ','), none of
    which may match our own controller pods; empty: no detection."""
    selectors: list[str] = []
    for selector in filter(None, (part.strip() for part in text.split(";"))):
        try:
            parsed = parse_selector(selector)
        except SelectorError as err:
            raise ConfigError(f"{flag}: {err}") from None
        if matches(parsed, c.OWN_POD_TEMPLATE_LABELS):
            raise ConfigError(f"{flag}: {selector!r} matches this controller's own pods")
        selectors.append(",".join(term.strip() for term in selector.split(",")))
    return tuple(selectors)


def imex_mode(text: str, flag: str) -> str:
    """NVIDIA's ``imex.mode``, spelled and refused exactly as upstream (contract §18)."""
    if text not in c.IMEX_MODES:
        raise ConfigError(f'unknown imex.mode "{text}"')
    return text


def imex_isolation(text: str, flag: str) -> str:
    """NVIDIA's ``imex.isolation``: only ``domain`` works, upstream and here (contract §18)."""
    if text == c.IMEX_ISOLATION_CHANNEL:
        raise ConfigError(
            "not supported yet: per-workload IMEX channel allocation is not implemented"
        )
    if text != c.IMEX_ISOLATION_DOMAIN:
        raise ConfigError(f'unknown imex.isolation "{text}": must be "domain" or "channel"')
    return text
