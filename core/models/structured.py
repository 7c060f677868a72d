"""Every structured LLM call in the graph: bounded re-asks, then the role's safe fallback.

A malformed reply or a provider that stays down after its SDK's own retries must never
raise out of a node: the run ends with a recorded outcome instead.
"""

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable
from langgraph.constants import TAG_NOSTREAM
from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)


@dataclass
class Answer(Generic[T]):
    value: T
    fallback: bool = False
    error: str = ""
    usage: dict[str, float] = field(default_factory=dict)
    timed_out: bool = False
    """The provider never answered in time (the call deadline, or the SDK's own timeout after its retries)."""
    said: str = ""
    """The start of the last reply that could not be read, quoted (`error` says why it could not)."""


async def ask(
    model: BaseChatModel,
    schema: type[T],
    messages: list[BaseMessage],
    *,
    role: str,
    fallback: T,
    retries: int,
    metadata: dict[str, Any],
    backup: BaseChatModel | None = None,
    deadline: float | None = None,
    stream: bool = False,
) -> Answer[T]:
    """Ask for `schema`; re-ask up to `retries` times with the parser's complaint; else `fallback`.

    `backup` is a second model LangChain switches to when the first raises (provider down
    after its SDK's own retries); a malformed reply is re-asked, not handed to the backup.
    `deadline` bounds each call in all: an SDK's timeout is per read, so a server that trickles
    a byte at a time, or never answers, would otherwise hold the task for as long as it likes.
    `stream`: the reply's chunks reach `stream_mode="messages"`; off, the call is tagged `nostream`
    (LangGraph's own convention), so a chat UI sees only the answer, never a role's JSON.
    """
    runnable = _structured(model if stream else _quiet(model), schema)
    if backup is not None:
        runnable = runnable.with_fallbacks([_structured(backup if stream else _quiet(backup), schema)])
    tags = [f"pivotal:{role}", *([] if stream else [TAG_NOSTREAM])]
    config = {"metadata": {**metadata, "pivotal_role": role}, "run_name": RUN_NAMES.get(role, role), "tags": tags}
    usage = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "seconds": 0.0, "fallbacks": 0}
    conversation, error, timed_out, said = list(messages), "", False, ""
    for _ in range(retries + 1):
        started = time.perf_counter()
        try:
            async with asyncio.timeout(deadline):
                reply = await runnable.ainvoke(conversation, config=config)
        except TimeoutError:
            _count(usage, None, started)
            error, timed_out, said = f"the model call took longer than {deadline:g} s (PIVOTAL_CALL_DEADLINE)", True, ""
            break
        except Exception as exc:  # noqa: BLE001 — provider down after its own retries: fall back
            _count(usage, None, started)
            error, timed_out, said = failure(exc), _is_timeout(exc), ""
            break
        _count(usage, reply.get("raw"), started)
        if reply.get("parsed") is not None and not reply.get("parsing_error"):
            return Answer(reply["parsed"], usage=usage)
        error, said = _one_line(reply.get("parsing_error") or "no structured reply"), _excerpt(reply.get("raw"))
        conversation = [
            *messages,
            HumanMessage(
                f"Your previous reply was not valid ({error}). Reply again with only the "
                f"{schema.__name__} fields, as valid JSON matching the schema."
            ),
        ]
    usage["fallbacks"] = 1
    return Answer(fallback, fallback=True, error=error, usage=usage, timed_out=timed_out, said=said)


RUN_NAMES = {
    "actor": "proposal",
    "critic": "review",
    "reflector": "reflection",
    "distiller": "lesson_drafts",
    "gate": "lesson_verdict",
}
"""What each role's call is called in a trace (LangSmith, `astream_events`): what it produces. Not the
node's name: LangGraph takes a run named like its node for the node itself, and would stream the
call's reply as the node's message."""


def failure(exc: BaseException) -> str:
    """What failed in a model call, in one line a person can act on: the HTTP status and the server
    that answered it, a timeout or a refused connection and the server's address, else the error.
    """
    where = _address(exc)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return f"HTTP {status} from {where or 'the provider'}: {_one_line(exc)}"
    if _is_timeout(exc):
        return f"timed out waiting for {where or 'the provider'}: {_one_line(exc)}"
    if where and any("Connection" in kind.__name__ for kind in type(exc).__mro__):
        return f"no connection to {where}: {_one_line(exc)}{_under(exc)}"
    return _one_line(exc)


def _under(exc: BaseException) -> str:
    """The innermost error under an SDK's bare "Connection error.": what broke (a refused port, a pooled
    connection of an event loop that is closed), in brackets; "" when there is none.
    """
    root, seen = exc, {id(exc)}
    while (below := root.__cause__ or root.__context__) is not None and id(below) not in seen:
        root = below
        seen.add(id(root))
    return "" if root is exc else f" ({_one_line(root)})"


def _address(exc: BaseException) -> str:
    """host:port of the request that failed (the SDKs' errors carry their httpx request), or ""."""
    for holder in (exc, getattr(exc, "response", None)):
        try:
            url = getattr(getattr(holder, "request", None), "url", None)
        except RuntimeError:  # httpx: a response built without its request
            url = None
        if url is not None and getattr(url, "host", None):
            return f"{url.host}:{url.port}" if url.port else str(url.host)
    return ""


def _excerpt(raw: object) -> str:
    """The start of what the model sent back, quoted: its text, else its (unparsable) call's arguments."""
    calls = [*(getattr(raw, "tool_calls", None) or []), *(getattr(raw, "invalid_tool_calls", None) or [])]
    text = getattr(raw, "text", "") or (str(calls[0].get("args") or "") if calls else "")
    said = " ".join(str(text).split())
    return repr(said[:80] + ("…" if len(said) > 80 else "")) if said else "an empty reply"


def _is_timeout(exc: BaseException) -> bool:
    """The SDKs' own timeout errors (openai's and anthropic's `APITimeoutError`, httpx's), known by name."""
    return any("Timeout" in kind.__name__ for kind in type(exc).__mro__)


def _structured(model: BaseChatModel, schema: type[BaseModel]):
    """Cached per model and schema: `with_structured_output` converts the schema each time (~1 ms)."""
    key = (id(model), schema)
    if key not in _runnables:
        if len(_runnables) > 4096:
            _runnables.clear()
        runnable = model.with_structured_output(schema, include_raw=True, **_method(model))
        _runnables[key] = (model, _schema_converted(runnable))
    return _runnables[key][1]


def _schema_converted(runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """`runnable` with the schema LangChain shows a trace (`ls_structured_output_format`) made into
    JSON schema once, here: LangChain converts a pydantic class again on every call (0.3-0.5 ms of
    CPU each, ~8% of a `sim` step), a JSON schema it hands back unchanged, so a trace reads the same.
    The binding is the one `with_structured_output` just made; its kwargs are changed in place.
    """
    from langchain_core.utils.function_calling import convert_to_json_schema

    found, seen = [runnable], set()
    while found:
        part = found.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        kwargs = getattr(part, "kwargs", None)
        shown = kwargs.get("ls_structured_output_format") if isinstance(kwargs, dict) else None
        if isinstance(kwargs, dict) and isinstance(shown, dict) and not isinstance(shown.get("schema"), dict | None):
            try:
                kwargs["ls_structured_output_format"] = {**shown, "schema": convert_to_json_schema(shown["schema"])}
            except Exception:  # noqa: BLE001 — LangChain's own per-call conversion stays (it drops what it cannot convert)
                pass
        found.extend(getattr(part, "steps", None) or [])  # a sequence
        found.extend((getattr(part, "steps__", None) or {}).values())  # a parallel map (include_raw)
        found.extend(x for x in (getattr(part, "bound", None), getattr(part, "first", None)) if x is not None)
    return runnable


_runnables: dict[tuple[int, type[BaseModel]], tuple[BaseChatModel, Any]] = {}
"""The model is kept in the value so its id cannot be reused by another model while cached."""


def _quiet(model: BaseChatModel) -> BaseChatModel:
    """The model asked for one whole reply, cached per model: a call tagged `nostream` is only hidden
    from `stream_mode="messages"`, LangChain still asks the provider for a stream whenever a stream
    handler is attached, and a provider or proxy that cannot stream would fail every role's call.
    """
    if not isinstance(model, BaseChatModel) or model.disable_streaming is True:
        return model
    if id(model) not in _quiet_copies:
        if len(_quiet_copies) > 4096:
            _quiet_copies.clear()
        _quiet_copies[id(model)] = (model, model.model_copy(update={"disable_streaming": True}))
    return _quiet_copies[id(model)][1]


_quiet_copies: dict[int, tuple[BaseChatModel, BaseChatModel]] = {}
"""The model is kept beside its copy so its id cannot be reused by another model while cached."""


def _method(model: BaseChatModel) -> dict[str, str]:
    """Tool calling for OpenAI too: its default strict json_schema refuses free-form `arguments`
    objects, and it parses inside the SDK, so a malformed reply would raise instead of being re-asked.
    """
    return {"method": "function_calling"} if type(model).__module__.startswith("langchain_openai") else {}


def _count(usage: dict[str, float], raw: object, started: float) -> None:
    usage["calls"] += 1
    usage["seconds"] += time.perf_counter() - started
    tokens = getattr(raw, "usage_metadata", None) or {}
    usage["input_tokens"] += tokens.get("input_tokens", 0)
    usage["output_tokens"] += tokens.get("output_tokens", 0)


def _one_line(error: object) -> str:
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())[:300]
