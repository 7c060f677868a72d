"""Pytest fixtures an application's tests use: `pytest_plugins = ["pivotal.testing.fixtures"]` in its
conftest. Apart from `pivotal.testing.recorded`, so that module serves scripts and other runners
without pytest installed.
"""

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pivotal.testing.recorded import MODE_VARIABLE, Recording, recorded


def cassette_path(node: Any) -> Path:
    """`<test folder>/cassettes/<test module>/<test name>.yaml`, the test's parameters kept readable."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", node.name).strip("-")
    return Path(node.path).parent / "cassettes" / Path(node.path).stem / f"{name}.yaml"


@pytest.fixture
def recorded_run(request: pytest.FixtureRequest) -> Iterator[Recording]:
    """The whole test inside `recorded(...)`, on its own cassette (`cassette_path`).

    The mode: `PIVOTAL_RECORD_MODE`, else pytest-recording's `--record-mode` where that plugin is
    installed, else "none" (replay only), so CI never reaches a provider by accident.
    """
    mode = os.environ.get(MODE_VARIABLE) or _option(request.config, "record_mode") or "none"
    with recorded(cassette_path(request.node), mode) as recording:
        yield recording


def _option(config: pytest.Config, name: str) -> str | None:
    try:
        return config.getoption(name)
    except ValueError:
        return None
