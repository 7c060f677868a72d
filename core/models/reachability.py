"""Fail before a run starts when a configured model endpoint cannot be reached.

Without this, an unreachable base URL surfaces only after the SDK's retries, as fallbacks
in the middle of a run. A TCP connect is enough to tell "nothing listens there" apart.
"""

import os
import socket
from typing import get_args
from urllib.parse import urlsplit

from pivotal.core.context import Context, Role
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import make_model, parse_spec

BASE_URL_VARIABLES = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


def base_url_of(spec: str) -> str | None:
    """The endpoint a spec talks to, when it is one the user configured (not a provider default)."""
    provider, rest = parse_spec(spec)
    if provider == "openai-compatible":
        return rest.partition("@")[2]
    variable = BASE_URL_VARIABLES.get(provider)
    return (os.environ.get(variable) or None) if variable else None


def check_reachable(spec: str, timeout: float = 3.0) -> None:
    url = base_url_of(spec)
    if not url:
        return
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PivotalError(
            f"cannot reach the model endpoint {url} for {spec.partition('@')[0]} ({reason}); "
            "start the server or fix the base URL"
        ) from None


def check_models(context: Context) -> None:
    """Every model spec the run can call is valid, buildable (keys present) and reachable: the lesson
    roles run after the actions, so a bad spec there must be found before them.
    """
    roles = get_args(Role) if context.memory else ("actor", "critic", "reflector")
    models = [context.model_for(role) for role in roles] + [context.fallback_model]
    for spec in sorted({model for model in models if isinstance(model, str) and model}):
        parse_spec(spec)  # an application's model objects are its own to configure: nothing to check
        make_model(spec, context.local_threads)
        check_reachable(spec)
