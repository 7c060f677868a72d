"""A provider model object used from two event loops: `asyncio.run(app.ainvoke(...))`, then `app.invoke(...)`.

The SDKs' async HTTP pool is bound to the loop that opened its connections; langchain-openai and
langchain-anthropic share one such pool per process. Once `asyncio.run` closed its loop, the sync call
(run on Pivotal's private loop, graphs/blocking.py) reused a connection of the dead loop and the critic's
first review failed: "the critic gave no valid verdict". Counts come from the desk's own ledger.
"""

import asyncio
import re
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from pivotal import PivotalCritic, create_pivotal_agent
from pivotal.testing.promise_desk import ClerkChatModel, clerk_responder, desk_tools, ledger_kinds

GOAL = "Please refund order A1 in full and email the customer."
ROUNDS = 2
"""Pairs of runs (async, then sync) per test: without the fix the first sync run's first review failed,
every time; a second pair shows a later `asyncio.run` does not meet the first one's dead loop either."""
NO_VERDICT = re.compile(r"the critic gave no valid verdict[^'\"]*")


def critic_model(kind: str, server: Any, desk_model: ChatOpenAI):
    if kind == "openai":
        return desk_model
    return ChatAnthropic(model="clerk", base_url=server.base_url_anthropic, api_key="local", max_retries=0)


def turn() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"messages": [HumanMessage(GOAL)]}, {"configurable": {"thread_id": uuid.uuid4().hex}}


async def run_async(app: Any) -> list[str]:
    return NO_VERDICT.findall(str([update async for update in app.astream(*turn(), stream_mode="updates")]))


def run_sync(app: Any) -> list[str]:
    """The critic's refusals in the run's updates (the graph face keeps no rejected critique in its result)."""
    return NO_VERDICT.findall(str(list(app.stream(*turn(), stream_mode="updates"))))


FACES = ["middleware", pytest.param("pivotal_agent", marks=pytest.mark.slow)]


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_sync_run_after_asyncio_run_gets_a_verdict_from_the_same_critic_object(desk, face, kind):
    server, model, ledger = desk
    server.responder = clerk_responder()
    critic = critic_model(kind, server, model)
    tools = desk_tools(ledger)
    if face == "middleware":
        app = create_agent(ClerkChatModel(), tools, middleware=[PivotalCritic(critic, irreversible=["refund"])])
    else:
        app = create_pivotal_agent(model, tools, critic_model=critic, irreversible=["refund"], memory=False)
    for round_ in range(ROUNDS):
        assert asyncio.run(run_async(app)) == [], f"round {round_}, asyncio.run"
        assert run_sync(app) == [], f"round {round_}, invoke after asyncio.run"
        assert ledger_kinds(ledger).count("refund") == 2 * (round_ + 1), ledger_kinds(ledger)


def test_only_a_model_on_the_shared_pool_is_copied_and_the_copy_keeps_its_settings():
    """The app's own `http_async_client` is its choice and is kept; other models need no copy."""
    import httpx

    from pivotal.core.models.pools import rebound

    shared = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0, timeout=7)
    copy = rebound(shared)
    assert copy is not None and copy is not shared
    assert copy.root_async_client._client is not shared.root_async_client._client
    assert (
        str(copy.root_async_client.base_url),
        copy.root_async_client.timeout,
        copy.root_async_client.max_retries,
    ) == ("http://127.0.0.1:9/v1/", 7, 0)
    own = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", http_async_client=httpx.AsyncClient())
    assert rebound(own) is None
    assert rebound(ClerkChatModel()) is None


def test_a_connection_error_names_the_error_under_it():
    """The Anthropic SDK says only "Connection error."; the refusal names what broke beneath it."""
    import anthropic
    import httpx

    from pivotal.core.models.structured import failure

    request = httpx.Request("POST", "http://127.0.0.1:5/v1/messages")
    error = anthropic.APIConnectionError(request=request)
    error.__cause__ = RuntimeError("Event loop is closed")
    said = failure(error)
    kind = type(error).__name__
    assert said == f"no connection to 127.0.0.1:5: {kind}: Connection error. (RuntimeError: Event loop is closed)"
