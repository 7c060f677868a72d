"""structlog set-up: JSON lines when output is not a terminal, readable text when it is."""

import logging
import sys

import structlog

from pivotal.core.secrets import redact_event

_configured = False


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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _configured = True


def logger() -> structlog.typing.FilteringBoundLogger:
    if not _configured:
        from pivotal.core.settings import settings

        configure(settings().log_level)
    return structlog.get_logger("pivotal")
