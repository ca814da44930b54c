"""The one feature-gate parser: strict for flags, lenient for what another writer wrote."""

import pytest

from computedomain.runtime.featuregates import FeatureGateError, parse_bool, parse_gates


def test_go_booleans() -> None:
    assert [parse_bool(t) for t in ("1", "t", "T", "TRUE", "true", "True", "tRuE")] == [True] * 7
    assert [parse_bool(t) for t in ("0", "f", "F", "FALSE", "false", "False")] == [False] * 6
    assert parse_bool("yes") is None


def test_pairs_in_order_with_a_trailing_comma() -> None:
    assert parse_gates(" A=true, B=0,") == {"A": True, "B": False}
    assert parse_gates(None) == {}


@pytest.mark.parametrize("text", ["A", "A=yes", "=true"])
def test_strict_refuses_and_lenient_skips_a_malformed_pair(text: str) -> None:
    with pytest.raises(FeatureGateError):
        parse_gates(f"B=true,{text}")
    assert parse_gates(f"B=true,{text}", strict=False) == {"B": True}
