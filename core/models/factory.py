"""Model spec strings → LangChain chat models.

Provider packages are imported only when a spec names them: importing langchain-anthropic
and langchain-openai costs ~7 s, which every CLI call and test run would otherwise pay.
"""

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from pivotal.core.errors import PivotalError
from pivotal.core.settings import settings

PROVIDERS = {
    "sim": "sim[:error=0.3,seed=7,invalid=0.1,latency=0.05,legal=0.5,follow=0.8,heed=0]",
    "local": "local, local:/path/to/model.gguf",
    "openai": "openai:<model>",
    "anthropic": "anthropic:<model>",
    "openai-compatible": "openai-compatible:<model>@<base_url>",
    "langchain": "<provider>:<model> for any other provider LangChain's init_chat_model knows",
}
"""Every provider a spec can name, with the forms it accepts (for the error message)."""
NEEDS_MODEL = {"openai", "anthropic", "openai-compatible"}
ACCEPTED = tuple(PROVIDERS.values())


def parse_spec(spec: str) -> tuple[str, str]:
    """(provider, rest) with a clear error for anything we do not accept."""
    spec = (spec or "").strip()
    provider, _, rest = spec.partition(":")
    if provider in PROVIDERS and provider != "langchain" and (rest or provider not in NEEDS_MODEL):
        return provider, rest
    if provider and rest and provider.replace("_", "").isalnum():
        return "langchain", spec  # init_chat_model decides; make_model turns its errors into one line
    raise PivotalError(f"unknown model spec {spec!r}; accepted forms: {', '.join(ACCEPTED)}")


def check_specs(*specs: object) -> None:
    """Each spec string's form (`parse_spec`), where an agent is built: "gpt-4o-mini" with no provider
    would otherwise be served and fail every run. Not its key or endpoint: a deployment may set them later.
    """
    for spec in specs:
        if isinstance(spec, str) and spec.strip():
            parse_spec(spec)


@lru_cache(maxsize=64)
def make_model(spec: str, local_threads: int = 1, loop_key: int = 0) -> BaseChatModel:
    """One shared instance per spec and event loop.

    Chat models are stateless, but hosted ones hold an HTTP connection pool bound to the
    event loop that first used it; `loop_key` (a number per running loop, never reused, see
    core/models/roles.py) keeps a later `asyncio.run` from reusing a pool whose loop is closed.
    """
    provider, rest = parse_spec(spec)
    if provider == "sim":
        return _sim(rest)
    if provider == "local":
        return _local(rest, local_threads)
    if provider == "openai":
        return _openai(rest)
    if provider == "anthropic":
        return _anthropic(rest)
    if provider == "langchain":
        return _any_provider(rest)
    return _openai_compatible(rest)


def _any_provider(spec: str) -> BaseChatModel:
    """`bedrock:…`, `google_genai:…`, `ollama:…`: whatever LangChain's init_chat_model resolves for an
    installed integration (it reads the provider's own credentials from the environment).
    """
    from langchain.chat_models import init_chat_model

    limits = {"rate_limiter": _rate_limiter(settings().requests_per_second)} if settings().requests_per_second else {}
    try:
        return init_chat_model(spec, **limits)
    except ImportError as exc:  # the integration package is missing: its message names the pip command
        raise PivotalError(f"model spec {spec!r}: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # noqa: BLE001 — a provider's own error, said in one line
        if "provider" in str(exc).lower() and isinstance(exc, ValueError):
            raise PivotalError(f"unknown model spec {spec!r}; accepted forms: {', '.join(ACCEPTED)}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PivotalError(f"model spec {spec!r} could not be set up: {type(exc).__name__}: {first[:300]}; "
                           "set the provider's credentials in the environment or .env") from None  # fmt: skip


def _sim(options: str) -> BaseChatModel:
    from pivotal.core.models.sim import FOLLOW, HEED, SimChatModel

    values: dict[str, float] = {}
    for item in filter(None, options.split(",")):
        key, _, value = item.partition("=")
        if key not in ("error", "seed", "invalid", "latency", "legal", "follow", "heed"):
            raise PivotalError(
                f"unknown sim option {key!r}; use error, seed, invalid, latency, legal, follow, heed "
                "(e.g. sim:error=0.3,seed=7)"
            )
        try:
            values[key] = float(value)
        except ValueError:
            raise PivotalError(f"sim option {key} needs a number (got {value!r})") from None
    for key in ("error", "invalid", "legal", "follow", "heed"):
        if not 0.0 <= values.get(key, 0.0) <= 1.0:
            raise PivotalError(f"sim option {key} must be between 0 and 1")
    return SimChatModel(
        error=values.get("error", 0.0),
        seed=int(values.get("seed", 0)),
        invalid=values.get("invalid", 0.0),
        latency=values.get("latency", 0.0),
        legal=values.get("legal", 0.5),
        follow=values.get("follow", FOLLOW),
        heed=values.get("heed", HEED),
    )


def _local(path: str, threads: int) -> BaseChatModel:
    from pivotal.core.models.local import LocalChatModel, validate_model_file

    model_path = str(validate_model_file(Path(path).expanduser())) if path else None
    return LocalChatModel(model_path=model_path, n_threads=threads)


def _own_pool():
    """langchain-openai otherwise shares one process-wide async pool across event loops."""
    import httpx

    return httpx.AsyncClient(timeout=settings().request_timeout)


def _client_limits() -> dict[str, Any]:
    """Per-request timeout and SDK retry count for hosted providers (PIVOTAL_REQUEST_TIMEOUT/_MAX_RETRIES)."""
    config = settings()
    limits: dict[str, Any] = {"timeout": config.request_timeout, "max_retries": config.max_retries}
    if config.requests_per_second > 0:
        limits["rate_limiter"] = _rate_limiter(config.requests_per_second)
    return limits


@lru_cache(maxsize=8)
def _rate_limiter(per_second: float):
    """One limiter per rate, shared by every hosted model, so the cap holds process-wide."""
    from langchain_core.rate_limiters import InMemoryRateLimiter

    return InMemoryRateLimiter(
        requests_per_second=per_second, check_every_n_seconds=0.05, max_bucket_size=max(1.0, per_second)
    )


def _need_key(variable: str, provider: str) -> str:
    key = os.environ.get(variable, "")
    if not key:
        raise PivotalError(
            f"{provider} needs an API key: set {variable} (in the environment or .env), "
            "or run offline with the embedded model (model='local' in Python, --model local on the command line)"
        )
    return key


def _openai(model: str) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=model,
        api_key=_need_key("OPENAI_API_KEY", "openai"),
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        **_client_limits(),
        http_async_client=_own_pool(),
    )


def _anthropic(model: str) -> BaseChatModel:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(
        model=model,
        api_key=_need_key("ANTHROPIC_API_KEY", "anthropic"),
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
        **_client_limits(),
    )


def _openai_compatible(rest: str) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    model, _, base_url = rest.partition("@")
    if not model or not base_url.startswith(("http://", "https://")):
        raise PivotalError(
            f"openai-compatible spec needs <model>@<base_url>, e.g. "
            f"openai-compatible:llama3@http://127.0.0.1:11434/v1 (got {rest!r})"
        )
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=os.environ.get("PIVOTAL_OPENAI_COMPATIBLE_API_KEY") or "not-needed",
        **_client_limits(),
        http_async_client=_own_pool(),
    )
