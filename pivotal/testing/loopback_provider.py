"""A fake hosted provider on 127.0.0.1 that speaks the OpenAI Chat Completions and Anthropic
Messages wire formats, so the real `openai`/`anthropic` SDKs (through langchain) can be driven
end to end offline: structured-output tool calls, usage fields, retries and timeouts.

A request with `stream: true` to the OpenAI route gets the same reply as server-sent chunks, text word
by word (a real token stream for `stream_mode="messages"`); the Anthropic route does not stream.

Stdlib only. Faults are queued in `.faults` and consumed one per request before normal
replies; every request and the usage the server reported for it are kept in `.requests`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[str, dict[str, Any], list[Any]], dict[str, Any] | str]
"""(schema name, JSON schema, request messages) → the structured reply's arguments, or a text: the
model answered in words instead of calling the tool (an agent's final answer)."""
Fault = tuple[Any, ...]
"""("429", retry_after_s | None) | ("500",) | ("502",) | ("503",) | ("reset",) | ("timeout", sleep_s)
| ("truncated",) | ("invalid",) | ("empty",) | ("trickle", seconds_per_byte)"""

TRICKLE = "x-loopback-trickle"
"""Internal marker from `answer` to the handler; never sent."""
STREAM = "x-loopback-stream"
"""Internal marker: send the reply as OpenAI's server-sent chunks (`stream: true`); never sent."""
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
_ids = itertools.count(1)


@dataclass
class Recorded:
    """One request as the server saw it, and what it answered."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int = 0
    """HTTP status sent; 0 while unanswered (or when shutdown cut a stalled request short)."""
    at: float = field(default_factory=time.monotonic)
    """When the request arrived (time.monotonic), to measure the SDK's retry delays."""
    fault: str = ""
    """The fault it was given, or "responder" when the test's responder raised (answered 500)."""
    schema_name: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    """Token counts exactly as sent in the reply's `usage` (empty when no usage was sent)."""


# --- schema-valid filler --------------------------------------------------------------------


def generic_responder(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
    """Schema-valid arguments with no task knowledge: enough for a trivial task to succeed.

    Critics approve (`decision` → "approve", confidence 0.95); every other choice is the
    first enum value, so an environment with one argument-free action completes.
    """
    value = _fill(schema, schema.get("$defs") or schema.get("definitions") or {}, "")
    return value if isinstance(value, dict) else {}


def _fill(schema: dict[str, Any], defs: dict[str, Any], name: str) -> Any:
    schema = _resolve(schema, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        choices = schema["enum"]
        return "approve" if name == "decision" and "approve" in choices else choices[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties", {})
        return {key: _fill(sub, defs, key) for key, sub in properties.items()}
    if kind == "array":
        return [_fill(schema.get("items", {}), defs, name) for _ in range(schema.get("minItems", 0))]
    if kind in ("number", "integer"):
        return _number(schema, name, kind)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "ok".ljust(schema.get("minLength", 0), "k")


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Follow `$ref` and pick the first non-null branch of `anyOf`/`oneOf`/`allOf`."""
    while True:
        if "$ref" in schema:
            schema = {**defs[schema["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in schema.items() if k != "$ref"}}
            continue
        branches = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
        if branches:
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "allOf")}
            chosen = next((b for b in branches if b.get("type") != "null"), branches[0])
            schema = {**rest, **chosen}
            continue
        return schema


def _number(schema: dict[str, Any], name: str, kind: str) -> float | int:
    value = 0.95 if name == "confidence" else 0
    value = min(max(value, schema.get("minimum", value)), schema.get("maximum", value))
    return int(value) if kind == "integer" else float(value)


def invalid_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments that break the schema: required fields dropped, enums given a value outside them."""
    broken = {key: value for key, value in arguments.items() if key not in schema.get("required", [])}
    for key, sub in schema.get("properties", {}).items():
        if "enum" in _resolve(sub, schema.get("$defs", {})):
            broken[key] = "not-one-of-the-choices"
    return broken or {"unexpected": True}


# --- wire formats ---------------------------------------------------------------------------


def _tokens(payload: object) -> int:
    """A stable stand-in for a tokenizer: roughly one token per four characters."""
    return max(1, len(json.dumps(payload)) // 4)


def _openai_schema(body: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """(name, schema, mode) where mode is "tool", "json_schema" or "text"."""
    tools = [t["function"] for t in body.get("tools") or [] if t.get("type") == "function"]
    if tools:
        choice = body.get("tool_choice")
        wanted = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        tool = next((t for t in tools if t["name"] == wanted), tools[0])
        return tool["name"], tool.get("parameters") or {}, "tool"
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        spec = response_format["json_schema"]
        return spec.get("name", "response"), spec.get("schema") or {}, "json_schema"
    return "", {}, "text"


def openai_strict_problem(schema: dict[str, Any], path: tuple[str, ...] = ()) -> str | None:
    """What OpenAI answers with a 400 when `strict: true` meets a schema it will not constrain to.

    Strict mode needs `additionalProperties: false` and every property in `required` on every
    object, so a free-form `dict[str, Any]` field is refused before any token is generated.
    """
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return f"In context={path}, 'additionalProperties' is required to be supplied and to be false."
        if sorted(schema.get("required", [])) != sorted(properties):
            return (
                f"In context={path}, 'required' is required to be supplied and to be an array including every key "
                "in properties."
            )
        children: list[tuple[tuple[str, ...], Any]] = [(("properties", key), sub) for key, sub in properties.items()]
    else:
        children = [(("items",), schema["items"])] if isinstance(schema.get("items"), dict) else []
    children += [((word, str(i)), sub) for word in ("anyOf", "allOf") for i, sub in enumerate(schema.get(word, []))]
    children += [(("$defs", key), sub) for key, sub in schema.get("$defs", {}).items()]
    for step, sub in children:
        problem = openai_strict_problem(sub, path + step)
        if problem:
            return problem
    return None


def _openai_rejection(body: dict[str, Any]) -> str | None:
    """OpenAI's 400 message for a strict schema it refuses, else None."""
    name, schema, mode = _openai_schema(body)
    strict = (
        body.get("response_format", {}).get("json_schema", {}).get("strict")
        if mode == "json_schema"
        else next(
            (t["function"].get("strict") for t in body.get("tools") or [] if t.get("function", {}).get("name") == name),
            None,
        )
    )
    problem = openai_strict_problem(schema) if strict else None
    if problem is None:
        return None
    where = "response_format" if mode == "json_schema" else "function"
    return f"Invalid schema for {where} '{name}': {problem}"


def _anthropic_schema(body: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """(name, input schema, mode): the forced tool, else the first; "text" when there are none."""
    tools = [t for t in body.get("tools") or [] if "input_schema" in t]
    if not tools:
        return "", {}, "text"
    wanted = (body.get("tool_choice") or {}).get("name")
    tool = next((t for t in tools if t["name"] == wanted), tools[0])
    return tool["name"], tool["input_schema"], "tool"


def _openai_reply(body: dict[str, Any], mode: str, name: str, text: str) -> tuple[dict[str, Any], dict[str, int]]:
    """`text` is the JSON (possibly broken on purpose) the model "wrote"."""
    if mode == "tool":
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"id": f"call_{next(_ids)}", "type": "function", "function": {"name": name, "arguments": text}}
            ],
        }
        forced = isinstance(body.get("tool_choice"), dict) or body.get("tool_choice") == "required"
        finish = "stop" if forced else "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": text, "refusal": None}, "stop"
    prompt, completion = _tokens(body.get("messages")), _tokens(text)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    reply = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model", ""),
        "system_fingerprint": "fp_loopback",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }
    return reply, usage


def _anthropic_reply(
    body: dict[str, Any], mode: str, name: str, arguments: dict[str, Any] | None, text: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """A tool_use block when `arguments` is given, else one text block holding `text`."""
    if arguments is not None and mode == "tool":
        content = [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": arguments}]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": text}], ("max_tokens" if mode == "tool" else "end_turn")
    usage = {"input_tokens": _tokens([body.get("system"), body.get("messages")]), "output_tokens": _tokens(content)}
    reply = {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }
    return reply, usage


def _server_sent(reply: dict[str, Any], usage: bool) -> bytes:
    """A chat completion as OpenAI streams it: role, text word by word, each tool call whole, the finish
    reason, the usage when asked (`stream_options.include_usage`), then `[DONE]`.
    """
    choice = reply["choices"][0]
    message = choice["message"]
    head = {key: reply[key] for key in ("id", "created", "model", "system_fingerprint")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": word}) for word in re.findall(r"\S+\s*|\s+", message.get("content") or "")]
    chunks += [chunk({"tool_calls": [{"index": i, **call}]}) for i, call in enumerate(message.get("tool_calls") or [])]
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": reply["usage"]})
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def _error_body(path: str, status: int, message: str) -> dict[str, Any]:
    if path == ANTHROPIC_PATH:
        kind = {429: "rate_limit_error", 400: "invalid_request_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


# --- server ---------------------------------------------------------------------------------


class Loopback:
    """The running fake provider: point an SDK at `base_url_openai` or `base_url_anthropic`."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.faults: list[Fault] = []
        self.requests: list[Recorded] = []
        self.responder: Responder = generic_responder
        self.openai_strict_rules = True
        """Refuse strict schemas as OpenAI does (400); off only to reach past that check."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer((host, 0), _Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._server.loopback = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="loopback-provider", daemon=True
        )

    @property
    def root_url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def base_url_openai(self) -> str:
        """The OpenAI SDK appends `/chat/completions` to its base URL."""
        return f"{self.root_url}/v1"

    @property
    def base_url_anthropic(self) -> str:
        """The Anthropic SDK appends `/v1/messages` to its base URL."""
        return self.root_url

    def start(self) -> Loopback:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes any request sleeping in a "timeout" fault
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def ok(self, path: str | None = None) -> list[Recorded]:
        """Requests answered 200 in time (optionally on one path): the replies a client received.

        A "timeout" fault's late reply is left out: it is sent after the client gave up.
        """
        return [
            r for r in self.requests if r.status == 200 and r.fault != "timeout" and (path is None or r.path == path)
        ]

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self.faults.pop(0) if self.faults else None

    def _record(self, recorded: Recorded) -> None:
        with self._lock:
            self.requests.append(recorded)

    def answer(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        """(status, extra headers, JSON body) for one request; status 0: close without replying.

        Called from a server thread. OpenAI's strict-schema check comes first and consumes no
        fault, as the real API refuses such a request before any model runs.
        """
        recorded = Recorded(path, body, headers)
        self._record(recorded)
        if path not in (OPENAI_PATH, ANTHROPIC_PATH):
            recorded.status = 404
            return 404, {}, _error_body(path, 404, f"no route {path}")
        recorded.schema_name = (_anthropic_schema if path == ANTHROPIC_PATH else _openai_schema)(body)[0]
        if body.get("stream") and path == ANTHROPIC_PATH:
            recorded.status = 400
            return 400, {}, _error_body(path, 400, "the loopback provider streams only the OpenAI route")
        rejection = _openai_rejection(body) if path == OPENAI_PATH and self.openai_strict_rules else None
        if rejection:
            recorded.status = 400
            return 400, {}, _error_body(path, 400, rejection)
        fault = self._next_fault()
        recorded.fault = fault[0] if fault else ""
        status, extra, reply = self._faulted(path, fault)
        if status:
            recorded.status = status
            return status, extra, reply
        if fault and fault[0] == "reset":
            return 0, {}, {}  # the connection drops with no reply, as a reset proxy would
        if fault and fault[0] == "timeout" and self._stopping.wait(float(fault[1])):
            return 0, {}, {}  # shutting down while stalled: the client left long ago, answer nothing
        try:
            reply, recorded.usage = self._reply(path, body, recorded.fault)
        except Exception as exc:  # noqa: BLE001 — a test's scripted responder: say so, never drop the line
            recorded.status, recorded.fault = 500, "responder"
            return 500, {}, _error_body(path, 500, f"loopback responder raised {type(exc).__name__}: {exc}"[:300])
        recorded.status = 200
        extra = {TRICKLE: str(fault[1])} if fault and fault[0] == "trickle" else {}
        if body.get("stream"):
            extra[STREAM] = "1"
        return 200, extra, reply

    def _faulted(self, path: str, fault: Fault | None) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Status-level faults; (0, …) when the request should get a normal-shaped reply."""
        if fault and fault[0] == "429":
            headers = {"retry-after": str(fault[1])} if len(fault) > 1 and fault[1] is not None else {}
            return 429, headers, _error_body(path, 429, "Rate limit reached; retry later.")
        if fault and fault[0] in ("500", "502", "503"):
            status = int(fault[0])
            return status, {}, _error_body(path, status, "The server had an error while processing your request.")
        if fault and fault[0] not in ("timeout", "truncated", "invalid", "empty", "reset", "trickle"):
            raise ValueError(f"unknown fault {fault!r}")
        return 0, {}, {}

    def _reply(self, path: str, body: dict[str, Any], fault: str) -> tuple[dict[str, Any], dict[str, int]]:
        extract = _anthropic_schema if path == ANTHROPIC_PATH else _openai_schema
        name, schema, mode = extract(body)
        said = self.responder(name, schema, body.get("messages") or []) if mode != "text" else "ok"
        if isinstance(said, str):
            mode, arguments = "text", {}
        else:
            arguments = invalid_arguments(schema, said) if fault == "invalid" else said
        text = json.dumps(arguments) if mode != "text" else str(said)
        if fault == "truncated":
            text = text[: len(text) // 2]
        if fault == "empty":
            mode, text = "text", ""  # a 200 with no tool call and no text
        if path == ANTHROPIC_PATH:
            reply, usage = _anthropic_reply(body, mode, name, None if fault == "truncated" else arguments, text)
        else:
            reply, usage = _openai_reply(body, mode, name, text)
        return reply, usage


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a client that timed out or dropped a kept-alive connection: nothing to report

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_unparsed": raw.decode(errors="replace")}
        headers = {key.lower(): value for key, value in self.headers.items()}
        path = self.path.split("?", 1)[0]
        if path.startswith("/openai/deployments/") and path.endswith("/chat/completions"):
            path = OPENAI_PATH  # Azure OpenAI's deployment route speaks the same format
        status, extra, reply = self.server.loopback.answer(path, body, headers)  # type: ignore[attr-defined]
        if not status:
            self.close_connection = True
            return
        streamed = bool(extra.pop(STREAM, ""))
        data = _server_sent(reply, self._usage_wanted(body)) if streamed else json.dumps(reply).encode()
        trickle = float(extra.pop(TRICKLE, 0))
        try:
            self.send_response(status)
            self.send_header("content-type", "text/event-stream" if streamed else "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_{next(_ids)}")
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            if trickle:
                self._trickle(data, trickle)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client timed out and left

    @staticmethod
    def _usage_wanted(body: dict[str, Any]) -> bool:
        return bool((body.get("stream_options") or {}).get("include_usage"))

    def _trickle(self, data: bytes, interval: float) -> None:
        """A server that answers one byte at a time: every read arrives well within any per-read timeout."""
        stopping = self.server.loopback._stopping  # type: ignore[attr-defined]
        for index in range(len(data)):
            if stopping.wait(interval):
                return
            self.wfile.write(data[index : index + 1])
            self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — keep test output quiet
        pass


@contextmanager
def loopback() -> Iterator[Loopback]:
    """A started fake provider on an ephemeral port, stopped on exit."""
    server = Loopback().start()
    try:
        yield server
    finally:
        server.stop()
