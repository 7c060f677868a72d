"""structlog set-up: JSON lines when output is not a terminal, readable text when it is; and, for the
command line, a file for what other libraries log.
"""

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from pivotal.core.secrets import redact, redact_event

_configured = False


def _to_stderr(*_: object) -> structlog.PrintLogger:
    """The stderr of the moment, not of the first log line: a stream swapped and closed since (a test's
    capture, an app's redirect) would otherwise make every later line raise "I/O operation on closed file".
    """
    return structlog.PrintLogger(file=sys.stderr)


def configure(level: str = "WARNING") -> None:
    global _configured
    renderer = structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            redact_event,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.WARNING)),
        logger_factory=_to_stderr,
        cache_logger_on_first_use=False,
    )
    _configured = True


def logger() -> structlog.typing.FilteringBoundLogger:
    if not _configured:
        from pivotal.core.settings import settings

        configure(settings().log_level)
    return structlog.get_logger("pivotal")


class RedactingFormatter(logging.Formatter):
    """A handler's own formatter, its every line redacted once written whole: a server logs a failed
    run's exception through its own processors (its message, its traceback, a rich traceback's
    locals), none of which Pivotal's `redact_event` sees.
    """

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


def redact_handlers() -> None:
    """Every handler set up by now (the root logger's and each named logger's) writes redacted lines;
    calling it again changes nothing. For a process whose logging is set up by another (`langgraph
    dev`): a handler added later is not covered.
    """
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for handler in {h for log in loggers if isinstance(log, logging.Logger) for h in log.handlers}:
        if not isinstance(handler.formatter, RedactingFormatter):
            handler.setFormatter(RedactingFormatter(handler.formatter or logging.Formatter()))


class _LibraryLog(logging.FileHandler):
    """Opened at the first record (its folder made then), and never a traceback on the terminal when
    it cannot be written: the record is lost, the command's own line is not.
    """

    def _open(self):  # logging's own signature
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 — logging's naming
        pass


@contextmanager
def library_logs_to(path: str) -> Iterator[None]:
    """While a command runs, libraries' stdlib logging and Python warnings go to `path`, not stderr:
    without a handler Python prints every WARNING there (a Postgres outage put 16 psycopg pool lines
    before the one line that says what to do). The command line uses this; an application keeps its
    own logging set-up.
    """
    handler = _LibraryLog(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close()
