"""release_free_heap: glibc's malloc_trim where there is one, nothing where there is none."""

from __future__ import annotations

import ctypes
import platform
from typing import Any

import pytest

from computedomain.runtime import heap


@pytest.fixture(autouse=True)
def fresh_lookup() -> Any:
    heap._malloc_trim.cache_clear()
    yield
    heap._malloc_trim.cache_clear()


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_glibc_releases() -> None:
    assert heap.release_free_heap() is True


def test_a_c_library_without_malloc_trim_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    class Musl:
        def __init__(self, name: str | None) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", Musl)
    assert heap.release_free_heap() is False
