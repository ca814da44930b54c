"""Equality-based label selectors (``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, comma = and), as
the settings name NVIDIA's controller pods: parsed once at start, matched as the apiserver
matches them. Set-based forms (``in``, ``notin``) are not needed there and are refused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# A qualified name (optional DNS-subdomain prefix) and a label value, as the apiserver checks.
_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class SelectorError(ValueError):
    """The text is not an equality-based label selector."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


def _requirement(term: str) -> Requirement:
    if "!=" in term:
        key, _, value = term.partition("!=")
        op = "!="
    elif "=" in term:
        key, _, value = term.partition("==" if "==" in term else "=")
        op = "="
    elif term.startswith("!"):
        key, op, value = term[1:], "!exists", ""
    else:
        key, op, value = term, "exists", ""
    key, value = key.strip(), value.strip()
    if " " in key or not _KEY.match(key):
        raise SelectorError(f"{key!r} is not a label key (only k=v, k!=v, k and !k are taken)")
    if not _VALUE.match(value):
        raise SelectorError(f"{value!r} is not a label value")
    return Requirement(key, op, value)


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """The requirements of one selector; an empty one (it would match every pod) is refused."""
    terms = [term.strip() for term in text.split(",")]
    if not any(terms) or not all(terms):
        raise SelectorError(f"{text!r} is not a label selector (want e.g. key=value)")
    return tuple(_requirement(term) for term in terms)


def matches(selector: tuple[Requirement, ...], labels: Mapping[str, str]) -> bool:
    return all(requirement.matches(labels) for requirement in selector)
