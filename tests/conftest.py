"""Each test releases the stores it opened, so store-folder locks never leak between tests."""

import pytest

from memory.store import close_stores


@pytest.fixture(autouse=True)
def _release_stores():
    yield
    close_stores()
