"""Recorded runs (pivotal/testing/recorded.py): a run's model calls recorded once against a provider
and replayed offline. The provider here is the loopback server (pivotal/testing/loopback_provider.py)
behind a real `ChatOpenAI` actor and reflector and a real `ChatAnthropic` critic; each replay runs
with that server stopped and this process's sockets blocked (pytest-socket), so a call that left
the process would fail the run.
"""

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pytest_socket import disable_socket, enable_socket
from vcr.request import Request

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.errors import PivotalError
from pivotal.graphs import arun
from pivotal.testing.loopback_provider import Loopback, generic_responder, loopback
from pivotal.testing.recorded import (
    RecordingMismatch,
    _scrubbed_request,
    _scrubbed_response,
    first_difference,
    recorded,
)

pytest_plugins = ["pivotal.testing.fixtures"]
pytestmark = pytest.mark.filterwarnings("ignore::pivotal.core.environments.base.RewindWarning")

ADVICE = "submit 42, the number the question asks for"
GOAL = "submit the answer to the question"
COMMITTED = (
    Path(__file__).parent / "cassettes" / "test_recorded" / "test_an_apps_test_replays_its_committed_recording.yaml"
)
"""The app-style test's own recording, which the other replay tests read too."""
NOWHERE = ("http://127.0.0.1:9/v1", "http://127.0.0.1:9")
"""Where the models point on replay: no server (and no socket allowed)."""
OPENAI_KEY, ANTHROPIC_KEY = "sk-app-openai-0123456789abcdef", "sk-ant-app-anthropic-0123456789abcdef"


@tool
def submit(answer: str) -> str:
    """Submit the final answer."""
    return f"received {answer}"


def _answered_42(task: Any, calls: list[dict[str, Any]]) -> bool | None:
    """Done at the first submit; a success only when it said 42."""
    submitted = [call for call in calls if call["tool"] == "submit"]
    return submitted[-1]["arguments"].get("answer") == "42" if submitted else None


register_environment("recorded-submit", lambda: ToolEnvironment([submit], _answered_42, intro="Submit the answer."))


def provider(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
    """A model that answers 41 until a reflection tells it 42: every run makes an actor, critic and
    reflector call, and retries once.
    """
    if schema_name == "Proposal":
        answer = "42" if ADVICE in json.dumps(messages) else "41"
        return {"action": "submit", "arguments": {"answer": answer}, "thought": "the question's number"}
    if schema_name == "Reflection":
        reply = generic_responder(schema_name, schema, messages)
        return {**reply, "pivotal_step": 0, "no_return_step": 0, "diagnosis": "it submitted 41", "advice": ADVICE}
    return generic_responder(schema_name, schema, messages)


def context(openai_url: str, anthropic_url: str) -> Context:
    """The app's own model objects per role; no SDK retry, so a miss fails at once."""
    gpt = ChatOpenAI(model="app-gpt", base_url=openai_url, api_key=OPENAI_KEY, max_retries=0)
    claude = ChatAnthropic(model="app-claude", base_url=anthropic_url, api_key=ANTHROPIC_KEY, max_retries=0)
    return Context(actor_model=gpt, critic_model=claude, reflector_model=gpt, model="sim", memory=False,
                   max_steps=4, max_pivot_retries=1)  # fmt: skip


async def run_task(urls: tuple[str, str], goal: str = GOAL, blocked: bool = False) -> Any:
    """One run; `blocked`: with no socket but Unix ones (asyncio's own wake-up pipe) open to it. The
    models are made first: ChatOpenAI probes the socket options it may set with a socket of its own.
    """
    models = context(*urls)
    with offline() if blocked else nullcontext():
        return await arun({"goal": goal, "env": "recorded-submit"}, models, checkpoint_path=":memory:")


@contextmanager
def offline() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    try:
        yield
    finally:
        enable_socket()


def steps(result: Any) -> list[tuple[Any, ...]]:
    return [(step["action"], step["arguments"], step["observation"], step["success"]) for step in result.trajectory]


def urls(server: Loopback) -> tuple[str, str]:
    return server.base_url_openai, server.base_url_anthropic


@pytest.fixture
def recording(tmp_path: Path) -> tuple[Path, tuple[str, str], Any]:
    """One run recorded against the loopback server, which is stopped before the test replays it:
    (cassette, the server's now dead addresses, the recorded run's result).
    """
    cassette = tmp_path / "run.yaml"
    with loopback() as server:
        server.responder = provider
        with recorded(cassette, "once"):
            result = asyncio.run(run_task(urls(server)))
        calls, dead, port = [r.schema_name for r in server.requests], urls(server), server._server.server_address[1]
        sent = server.requests
    assert calls == ["Proposal", "Verdict", "Reflection", "Proposal", "Verdict"]
    assert {r.headers.get("authorization") or r.headers.get("x-api-key") for r in sent} >= {f"Bearer {OPENAI_KEY}"}
    with pytest.raises(OSError):  # stopped: nothing listens there now
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return cassette, dead, result


# --- replay ---------------------------------------------------------------------------------


@pytest.mark.slow  # records a live run first: ~1.5-2.5 s
async def test_a_recorded_run_replays_offline_with_the_server_stopped(recording):
    cassette, dead, live = recording

    with recorded(cassette, "none") as replay:
        cpu, wall = time.process_time(), time.perf_counter()
        result = await run_task(dead, blocked=True)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall

    assert replay.replaying and replay.replayed == 5 and replay.misses == []
    assert result.status == live.status == "success" and result.retries["count"] == 1
    assert steps(result) == steps(live) and result.llm_calls == live.llm_calls == 5
    tokens = {role: (u["calls"], u["input_tokens"], u["output_tokens"]) for role, u in result.usage.items()}
    assert tokens == {role: (u["calls"], u["input_tokens"], u["output_tokens"]) for role, u in live.usage.items()}
    assert cpu < 2, f"the replay took {cpu:.2f} s of CPU ({wall:.2f} s wall)"  # CPU: a busy machine does not fail it


async def test_a_changed_prompt_fails_loudly_naming_what_changed():
    cassette = COMMITTED

    with pytest.raises(RecordingMismatch) as raised, recorded(cassette, "none"):
        result = await run_task(NOWHERE, goal=GOAL.replace("question", "riddle"), blocked=True)
        assert result.status == "success", result.reason  # the actor got no answer: this fails first

    message = str(raised.value)
    assert "\n" not in message and f"not in the recording {cassette}" in message
    assert "POST /v1/chat/completions: body.messages[1].content at character" in message
    assert "the riddle" in message and "PIVOTAL_RECORD_MODE=all" in message


async def test_a_run_that_asks_for_fewer_calls_than_recorded_fails(tmp_path):
    twice = yaml.safe_load(COMMITTED.read_text())
    twice["interactions"] *= 2  # the same run recorded twice: ten calls, the run asks for five
    (tmp_path / "twice.yaml").write_text(yaml.safe_dump(twice))

    with pytest.raises(RecordingMismatch, match=r"asked for 5 of the 10 model calls recorded in .*twice\.yaml"):
        with recorded(tmp_path / "twice.yaml", "none"):
            assert (await run_task(NOWHERE, blocked=True)).status == "success"


def test_replay_only_without_a_recording_says_how_to_record(tmp_path):
    with pytest.raises(RecordingMismatch, match="no recording at .*missing.yaml: record it once .*=once"):
        with recorded(tmp_path / "missing.yaml", "none"):
            pass
    with pytest.raises(PivotalError, match="record mode 'sometimes' is not one of none, once, all, rewrite"):
        with recorded(tmp_path / "x.yaml", "sometimes"):
            pass


def test_a_cassette_holds_no_key_or_header():
    """Both SDKs send their keys (authorization, x-api-key: the `recording` fixture checks they do);
    the cassette kept no header but content-type.
    """
    text = COMMITTED.read_text()
    assert OPENAI_KEY not in text and ANTHROPIC_KEY not in text
    for header in ("authorization", "x-api-key", "anthropic-version", "x-stainless", "request-id", "content-length"):
        assert header not in text.lower()
    assert "content-type" in text.lower()


def test_a_secret_in_a_body_or_url_is_blanked_on_both_sides(monkeypatch):
    """Pivotal keeps secrets out of its prompts already; a cassette blanks any that still pass (a key in
    a query string, a provider echoing one) as pivotal.core.secrets does everywhere else, on what is
    recorded and on what is looked up alike, so the blanked call still matches itself.
    """
    monkeypatch.setenv("APP_SERVICE_TOKEN", "tok-9f8e7d6c5b4a39281706")
    body = json.dumps({"messages": [{"content": "token tok-9f8e7d6c5b4a39281706"}]}).encode()
    request = Request("POST", "https://example.test/v1/chat?key=AIza" + "x" * 35, body, {"X-Api-Key": "k" * 20})
    response = {"status": {"code": 200, "message": "OK"}, "headers": {"Set-Cookie": ["s=1"], "Content-Type": ["json"]},
                "body": {"string": b'{"echo": "tok-9f8e7d6c5b4a39281706"}'}}  # fmt: skip

    kept, answer = _scrubbed_request(request), _scrubbed_response(response)

    assert dict(kept.headers) == {} and "AIza" not in kept.uri and b"tok-9f8e" not in kept.body
    assert b"[redacted]" in kept.body and b"tok-9f8e" in request.body  # the call sent is left as it was
    assert answer["headers"] == {"Content-Type": ["json"]} and answer["body"]["string"] == b'{"echo": "[redacted]"}'
    assert first_difference(json.loads(_scrubbed_request(request).body), json.loads(kept.body)) is None


# --- an app's test, on a committed recording ----------------------------------------------------


async def test_an_apps_test_replays_its_committed_recording(recorded_run):
    """As an app's test would: the `recorded_run` fixture, a cassette committed beside the test
    (tests/cassettes/test_recorded/), no provider and no socket. The loopback server stands in for
    the provider only to record (after a prompt change: PIVOTAL_RECORD_MODE=all).
    """
    if recorded_run.replaying:
        result = await run_task(NOWHERE, blocked=True)
    else:
        with loopback() as server:
            server.responder = provider
            result = await run_task(urls(server))

    assert result.status == "success" and [s["arguments"]["answer"] for s in result.trajectory] == ["41", "42"]
    roles = [(body["model"], body.get("tool_choice", {}).get("name") or "Proposal") for body in recorded_run.bodies]
    assert [model for model, _ in roles] == ["app-gpt", "app-claude", "app-gpt", "app-gpt", "app-claude"]


# --- the first difference ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}, None),
        ({"a": [1, 2]}, {"a": [1, 3]}, "body.a[1]: recorded 2, now 3"),
        ({"a": [1, 2]}, {"a": [1]}, "body.a: 2 items recorded, 1 now"),
        ({"a": 1}, {"b": 1}, "body.a: recorded 1, now absent"),
        (
            {"m": "same text, then one"},
            {"m": "same text, then two"},
            'body.m at character 16: recorded "same text, then one", now "same text, then two"',
        ),
        (
            {"m": "x" * 30 + "one"},
            {"m": "x" * 30 + "two"},
            f'body.m at character 30: recorded …"{"x" * 20}one", now …"{"x" * 20}two"',
        ),
    ],
)
def test_the_first_difference_is_named_by_its_path(old, new, expected):
    assert first_difference(old, new) == expected
