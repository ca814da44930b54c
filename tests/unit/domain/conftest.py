"""The reconciler tests' world (``tests/kit/world.py``), as a fixture."""

import pytest

from tests.kit.world import World, make_world


@pytest.fixture
def world() -> World:
    return make_world()
