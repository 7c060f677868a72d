"""Four exceptions, because callers and the CLI must tell four endings apart:

- `PivotalError`: bad configuration or input; one line that names the fix.
- `InfrastructureFault` (a `PivotalError`): storage every task shares failed; the batch stops.
- `EnvironmentFault`: environment code failed beyond what a step result can say; the task stops
  with an error that a resume retries.
- `Terminated`: SIGTERM, cleaned up as Ctrl-C is, but reported as itself.

The helpers here put other libraries' errors into one readable line.
"""

import errno
import sqlite3
from pathlib import Path

from pydantic import ValidationError


class PivotalError(ValueError):
    """Bad configuration or input: the message names the problem and the fix, in one line."""


def shown(value: object) -> str:
    """A wrong argument as its type and the start of its repr, for the one line refusing it: enough
    to find it in the caller's code, never a screenful.
    """
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def make_folder(folder: Path, refused: str, fix: str) -> Path:
    """A folder Pivotal writes to, made if missing; else one line: `refused`, the OS's reason, `fix`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PivotalError(f"{refused}: {exc.strerror}; {fix}") from None
    return folder


class EnvironmentFault(RuntimeError):
    """Environment code failed in a way no step result can describe (it hung, or raised a
    `BaseException`): the task stops with an error that a resume retries from its last checkpoint.
    """


class InfrastructureFault(PivotalError):
    """Storage the whole batch shares failed (disk full, a read-only folder, a damaged or locked
    database): no task can succeed until a person fixes it, so the batch stops instead of
    recording every remaining task as an error.
    """


_DATABASE_MODULES = ("chromadb", "aiosqlite", "psycopg", "psycopg_pool")
"""Whose exceptions mean the shared checkpoint or lesson database failed (Postgres down counts too)."""
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EDQUOT}


def infrastructure_fault(exc: BaseException | None) -> str | None:
    """What failed, in one line, when `exc` comes from the checkpoint database or the lesson store
    rather than from the task; None for a task's own fault (an environment's error is wrapped as
    `EnvironmentFault` before it gets here, so a tool's own disk error stays the task's).
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and not isinstance(exc, EnvironmentFault):
        seen.add(id(exc))
        if isinstance(exc, sqlite3.DatabaseError) or type(exc).__module__.split(".")[0] in _DATABASE_MODULES:
            return f"a database failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
            where = f" on {exc.filename}" if exc.filename else ""
            return f"storage failed{where} ({exc.strerror or exc})"
        if store_server_gone(exc):
            return f"the lesson store server failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        exc = exc.__cause__ or exc.__context__
    return None


def store_server_gone(exc: BaseException) -> bool:
    """A Chroma server (`--store-url`) that cannot be reached any more: the batch's storage failed."""
    return _transport_error(exc) and _raised_in(exc, "chromadb")


def _transport_error(exc: BaseException) -> bool:
    """A connection that failed (refused, reset, timed out): the socket's own error, or httpx's
    (the Chroma client's transport), known by name so this layer imports neither.
    """
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] in ("httpx", "httpcore") and any(
        base.__name__ == "TransportError" for base in type(exc).__mro__
    )


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether `package`'s code was on the way when `exc` was raised: a Chroma server that went away
    is the batch's storage, while the same httpx error from a model provider or a tool is not.
    """
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_globals.get("__name__", "").split(".")[0] == package:
            return True
        frame = frame.tb_next
    return False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the same clean-up runs (tasks cancelled, checkpoints
    closed), no task records it as its own error, and the CLI can still tell the two apart.
    """


def first_problem(exc: ValidationError) -> tuple[str, str, object]:
    """(field, what is wrong, the value given) of a pydantic error: what a person needs for one
    line, without pydantic's multi-line dump and documentation URL.
    """
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in error["loc"])
    message = error["msg"]
    return field, message[:1].lower() + message[1:], error.get("input")


_CRYPTIC_MODEL_ERRORS = {
    "IndexError: list index out of range": "the model server sent an empty `choices` list, no answer",
}
"""SDK errors whose words do not say what happened: langchain-openai indexes the first choice."""


def describe_model_error(error: str) -> str:
    """A model call's error as the reason a run reports; the SDK's own words stay for searching."""
    meaning = _CRYPTIC_MODEL_ERRORS.get(error)
    return f"{meaning}: check its log and that it serves this model; the SDK said {error}" if meaning else error
