"""The once-per-run guard for irreversible calls: the same irreversible call twice in one run is
refused, whatever the critic says (a model that loses track pays the customer twice).

Minimal version for the middleware branch; the guard's own branch replaces this file.
"""

from collections.abc import Iterable
from typing import Any


def repeat_reason(
    env: Any, action: str, arguments: dict[str, Any], done: Iterable[tuple[str, dict[str, Any]]]
) -> str | None:
    """Why this call may not run again in this run (`done`: its executed, uncompensated calls), or None."""
    irreversible = {spec.name for spec in env.describe_actions() if spec.irreversible}
    if action in irreversible and any(name == action and args == arguments for name, args in done):
        return f"{action} with these arguments already ran in this run and cannot be undone; do not repeat it"
    return None
