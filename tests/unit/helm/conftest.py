from pathlib import Path

import pytest

from tests.unit.helm.support import helm_or_skip


@pytest.fixture(scope="session")
def helm() -> Path:
    return helm_or_skip()
