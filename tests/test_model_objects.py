"""An application's own chat model objects, per role, through the real SDKs against a loopback server."""

import asyncio
from collections.abc import Iterator

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.errors import PivotalError
from pivotal.graphs import aresume, arun, build_graph
from pivotal.testing.envs import finish_environment
from pivotal.testing.loopback_provider import Loopback, loopback

register_environment("objects-finish", finish_environment())
TASK = {"goal": "finish the task", "env": "objects-finish"}


@pytest.fixture
def server() -> Iterator[Loopback]:
    with loopback() as provider:
        yield provider


def openai(server: Loopback) -> ChatOpenAI:
    return ChatOpenAI(model="app-gpt", base_url=server.base_url_openai, api_key="app-key", max_retries=0)


def anthropic(server: Loopback) -> ChatAnthropic:
    return ChatAnthropic(model="app-claude", base_url=server.base_url_anthropic, api_key="app-key", max_retries=0)


async def test_model_objects_play_their_roles(server):
    context = Context(actor_model=openai(server), critic_model=anthropic(server), model="sim", memory=False,
                      max_steps=4, max_pivot_retries=0)  # fmt: skip
    result = await arun(TASK, context, checkpoint_path=":memory:")
    assert result.status == "success"
    models = {(r.body.get("model"), r.schema_name) for r in server.requests}
    assert ("app-gpt", "Proposal") in models and ("app-claude", "Verdict") in models
    assert result.usage["actor"]["calls"] >= 1 and result.usage["critic"]["calls"] >= 1


async def test_a_resume_needs_the_model_object_again_and_goes_on_with_it(server, tmp_path):
    model = openai(server)
    options = {"checkpoint_path": str(tmp_path / "cp.sqlite")}
    paused = await arun(TASK, Context(model=model, memory=False, require_approval_for=["*"]), **options)
    assert paused.status == "interrupted"
    with pytest.raises(PivotalError, match=r"model is a model object \(ChatOpenAI\(app-gpt\)\)"):
        await aresume(paused.thread_id, "approve", **options)
    with pytest.raises(PivotalError, match="require_approval_for \\[\\] contradicts"):
        await aresume(paused.thread_id, "approve", Context(model=model, memory=False), **options)
    same = Context(model=model, memory=False, require_approval_for=["*"])
    done = await aresume(paused.thread_id, "approve", same, **options)
    assert done.status == "success" and done.critic["human_approved"] == 1


async def test_the_refusal_of_a_resume_without_its_model_object_names_a_way_that_works(server, tmp_path):
    """The refusal said "resume with a Context that passes it again (model=...)"; done as told,
    `Context(model=obj)` was refused in turn for every other setting the run started with
    (`require_approval_for [] contradicts ...`). It now names the form that passes the object alone,
    `{'model': ...}`, which the resume takes with the run's own saved settings: done as told, it goes on.
    """
    model = openai(server)
    options = {"checkpoint_path": str(tmp_path / "cp.sqlite")}
    paused = await arun(TASK, Context(model=model, memory=False, require_approval_for=["*"]), **options)
    assert paused.status == "interrupted"
    with pytest.raises(PivotalError) as refused:
        await aresume(paused.thread_id, "approve", **options)
    assert len(str(refused.value).splitlines()) == 1
    assert "{'model': ...}" in str(refused.value), refused.value
    done = await aresume(paused.thread_id, "approve", {"model": model}, **options)
    assert done.status == "success" and done.critic["human_approved"] == 1


def test_studio_edits_a_model_as_a_string():
    schema = build_graph().get_context_jsonschema()
    assert schema["properties"]["model"]["type"] == "string"
    assert schema["properties"]["critic_model"]["type"] == "string"


async def test_any_provider_langchain_knows_is_a_spec_string(server, monkeypatch):
    """`azure_openai:<deployment>` goes through init_chat_model to AzureChatOpenAI and the real SDK."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "app-key")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.base_url_openai.removesuffix("/v1"))
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
    context = Context(model="azure_openai:app-deployment", memory=False, max_steps=4, max_pivot_retries=0)
    result = await arun(TASK, context, checkpoint_path=":memory:")
    assert result.status == "success" and {r.schema_name for r in server.requests} >= {"Proposal", "Verdict"}


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("bedrock:anthropic.claude-x", "requires the langchain-aws package"),
        ("nosuchprovider:x", "unknown model spec 'nosuchprovider:x'"),
    ],
)
def test_a_provider_that_cannot_be_set_up_is_one_line(spec, needle):
    from pivotal.core.models.factory import make_model

    with pytest.raises(PivotalError, match=needle) as raised:
        make_model(spec)
    assert "\n" not in str(raised.value)


async def test_an_apps_model_object_on_a_server_that_never_answers_is_ended_by_the_call_deadline(server):
    """The app's own client waits up to the SDK's 600 s default; the call deadline ends the call, in one line."""
    model = ChatOpenAI(model="app-gpt", base_url=server.base_url_openai, api_key="app-key")  # SDK defaults
    server.faults = [("timeout", 30.0)] * 3  # every request held, far past the deadline
    context = Context(model=model, critic_model="sim", memory=False, max_steps=2, max_pivot_retries=0, call_deadline=1)
    result = await asyncio.wait_for(arun(TASK, context, checkpoint_path=":memory:"), 20)
    assert result.status == "failure" and result.usage["actor"]["fallbacks"] >= 1
    assert "the model call took longer than 1 s (PIVOTAL_CALL_DEADLINE)" in result.reason
    assert "\n" not in result.reason
