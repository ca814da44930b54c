"""Event names stay valid DNS subdomains whatever the regarding object's name."""

from __future__ import annotations

import re

import pytest

from computedomain.runtime.events import event_name

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LONGEST = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # 253, a legal object name


@pytest.mark.parametrize("name", ["cd", LONGEST, "x" * 236 + "-" + "y" * 16, "a" * 235 + ".b"])
def test_event_names_are_valid_subdomains(name: str) -> None:
    event = event_name(name, 0x18EDB7A1679E6B00)
    assert len(event) <= 253
    assert SUBDOMAIN.match(event), event
    assert event.endswith(".18edb7a1679e6b00")


def test_short_names_are_kept_whole() -> None:
    assert event_name("training", 0xABC) == "training.abc"
