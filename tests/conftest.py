"""Fixtures shared by the whole test-suite."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh, seeded generator per test, so tests do not depend on their order."""
    return np.random.default_rng(12345)
