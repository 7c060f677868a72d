"""Where lessons are kept: the name → backend table. `Context.lessons_backend` names a row ("auto"
picks the run's LangGraph store when it has one, else Chroma: memory/policy/registry.py).

A new backend is one module that answers the seam (memory/storage/base.py: `LessonStorage`,
`RecordStorage`, and the `Backend` names the table reads) and one row here;
tests/test_store_parity.py runs every row through the same cases. Rows name modules, so a
backend's own dependencies (Chroma's ~1.3 s import) load only when a run uses it.
"""

from importlib import import_module
from typing import cast

from pivotal.core.errors import PivotalError
from pivotal.memory.storage.base import Backend

BACKENDS: dict[str, str] = {
    "chroma": "pivotal.memory.storage.chroma",
    "langgraph": "pivotal.memory.storage.langgraph",
}


def backend(name: str) -> Backend:
    """The backend a `lessons_backend` names."""
    if name not in BACKENDS:
        raise PivotalError(f"lessons_backend must be one of auto, {', '.join(BACKENDS)} (got {name!r})")
    return cast(Backend, import_module(BACKENDS[name]))
