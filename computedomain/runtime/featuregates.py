"""Feature gates as Kubernetes components spell them: ``Name=bool`` pairs separated by commas
(a trailing comma allowed), each bool as Go's ``strconv.ParseBool`` reads it (``1 t T TRUE
true True``, ``0 f F FALSE false False``; any case of true/false too).

One parser for every reader: strict (a malformed pair raises) for our own flags and for what a
daemon would refuse to start with, lenient (a malformed pair is skipped) when reading what
another writer put into an object. Which names are known is the caller's business.
"""

from __future__ import annotations

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FeatureGateError(ValueError):
    """A pair is not ``Name=bool``; the message says which and how."""


def parse_bool(text: str) -> bool | None:
    """Go's ParseBool (and any case of true/false); None when it is neither."""
    if text in _GO_TRUE or text.lower() == "true":
        return True
    if text in _GO_FALSE or text.lower() == "false":
        return False
    return None


def parse_gates(text: str | None, *, strict: bool = True) -> dict[str, bool]:
    """Every gate ``text`` names, with its value, in order."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, raw = item.partition("=")
        name = name.strip()
        value = parse_bool(raw.strip())
        if sep and name and value is not None:
            gates[name] = value
        elif not strict:
            continue
        elif not sep:
            raise FeatureGateError(f"missing bool value for {name} (want {name}=true)")
        else:
            raise FeatureGateError(f"invalid feature gate {item!r} (want Name=true or Name=false)")
    return gates
