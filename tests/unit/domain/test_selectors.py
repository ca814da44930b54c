"""Equality-based label selectors, matched as the apiserver matches them."""

from __future__ import annotations

import pytest

from computedomain.domain.selectors import SelectorError, matches, parse_selector

LABELS = {"app.kubernetes.io/name": "dra-driver-nvidia-gpu", "x-component": "controller"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("x-component=controller", True),
        ("x-component==controller", True),
        ("x-component=kubelet-plugin", False),
        ("x-component!=kubelet-plugin", True),
        ("x-component!=controller", False),
        ("x-component", True),
        ("!x-component", False),
        ("y-component", False),
        ("!y-component", True),
        ("y-component!=controller", True),  # absent label: != holds, as in the apiserver
        ("app.kubernetes.io/name=dra-driver-nvidia-gpu, x-component=controller", True),
        ("app.kubernetes.io/name=dra-driver-nvidia-gpu,x-component=other", False),
    ],
)
def test_matches(selector: str, expected: bool) -> None:
    assert matches(parse_selector(selector), LABELS) is expected


@pytest.mark.parametrize(
    "selector", ["", " , ", "a=b,", "x in (a,b)", "Bad Key=v", "k=has space", "k=-bad"]
)
def test_refused(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)
