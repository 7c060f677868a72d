"""Keep API keys out of logs and results, whoever put them in the text (a provider error, a tool)."""

import os
import re
from typing import Any

MARK = "[redacted]"
_SECRET_NAME = re.compile(r"(API_KEY|_TOKEN|_SECRET|PASSWORD)$")
_KEY_SHAPES = re.compile(r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}|Bearer\s+[A-Za-z0-9._\-]{16,})")
MIN_SECRET_CHARS = 8
"""Shorter values (e.g. "test") would blank out ordinary words."""


def secret_values() -> list[str]:
    """Values of every variable named like a secret; read each time, so a key set later is covered."""
    return sorted(
        {value for name, value in os.environ.items() if _SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS},
        key=len,
        reverse=True,
    )


def redact(text: str, values: list[str] | None = None) -> str:
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, MARK)
    return _KEY_SHAPES.sub(MARK, text)


def redact_tree(value: Any, values: list[str] | None = None) -> Any:
    """Every string inside dicts and lists, redacted; other values unchanged."""
    values = secret_values() if values is None else values
    if isinstance(value, str):
        return redact(value, values)
    if isinstance(value, dict):
        return {key: redact_tree(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_tree(item, values) for item in value]
    return value


def redact_event(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """Structlog processor."""
    return redact_tree(event)
