"""An application's own provider model object, with an async HTTP pool of its own per event loop.

langchain-openai and langchain-anthropic give every model the SDK's async pool from one process-wide
cache (`lru_cache`), and an httpx connection belongs to the event loop that opened it. After
`asyncio.run(app.ainvoke(...))` closed its loop, a later `app.invoke(...)` (run on the private loop,
graphs/blocking.py) or another `asyncio.run` took a kept-alive connection of the dead loop from that
pool, and the call failed with "Event loop is closed". The fix LangChain discusses upstream (a client
per event loop, langchain-ai/langchain#35783) is applied here to the models Pivotal calls: a copy of
the model whose SDK client is the same (`copy`, its key, base URL, timeout and retries kept) with a
fresh `DefaultAsyncHttpxClient`. Models built from a spec already get one per loop (factory.py).
"""

from typing import Any

from langchain_core.language_models import BaseChatModel


def rebound(model: BaseChatModel) -> BaseChatModel | None:
    """A copy of `model` on a pool of its own, or None where it needs none: not an OpenAI or
    Anthropic chat model, or one given its own `http_async_client` (the application's choice, kept).
    """
    package = type(model).__module__.partition(".")[0]
    if package == "langchain_openai":
        return _openai(model)
    if package == "langchain_anthropic":
        return _anthropic(model)
    return None


def _openai(model: Any) -> BaseChatModel | None:
    import openai

    client = getattr(model, "root_async_client", None)
    if client is None or getattr(model, "http_async_client", None) is not None:
        return None
    copy = model.model_copy()
    copy.root_async_client = client.copy(http_client=openai.DefaultAsyncHttpxClient())
    copy.async_client = copy.root_async_client.chat.completions
    return copy


def _anthropic(model: Any) -> BaseChatModel | None:
    import anthropic

    client = model._async_client  # a cached_property: the SDK client over the shared pool
    copy = model.model_copy()
    copy.__dict__["_async_client"] = client.copy(http_client=anthropic.DefaultAsyncHttpxClient())
    return copy
