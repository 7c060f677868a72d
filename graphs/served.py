"""`pivotal.graphs.served:app`: the HTTP app a `langgraph dev` (or platform) deployment names in its
`langgraph.json` (`"http": {"app": "pivotal.graphs.served:app"}`), so the server keeps no secret.

The server stores every run's request as the client sent it (the run's `input` and `command`, a
person's resume reason included) in its own files (`.langgraph_api/.langgraph_ops.pckl` under `langgraph
dev`), before any graph runs; Pivotal's graph blanks secrets in what it checkpoints, but never sees that
copy. This app's middleware blanks them in the request itself, where the server reads it: the run then
works the same input Pivotal would have checkpointed anyway (`pivotal.redacting`), and nothing the
server writes holds the secret. Its lifespan redacts the server's log lines, where a failed run's
exception is written whole.
"""

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pivotal.core.logs import redact_handlers
from pivotal.core.secrets import redact_tree

KEPT = re.compile(r"/runs(/wait|/stream|/batch)?/?$|/threads/[^/]+/state/?$")
"""The requests whose body the server stores as a run's (or a state edit's) record."""
FIELDS = ("input", "command", "values")


class RedactingRequests:
    """ASGI middleware: a JSON body that creates a run or edits a thread's state, its `input`,
    `command` and `values` with secrets blanked (`redact_tree`); every other request as it came.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not KEPT.search(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: hand on what came
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = _redacted(b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.app({**scope, "headers": headers}, _replay([_request(body)], then=receive), send)


def _redacted(body: bytes) -> bytes:
    try:
        payload = json.loads(body or b"null")
    except ValueError:
        return body  # not JSON: the server answers it as it would
    if isinstance(payload, list):  # /runs/batch
        return json.dumps([_fields(item) for item in payload]).encode()
    return json.dumps(_fields(payload)).encode() if isinstance(payload, dict) else body


def _fields(payload: Any) -> Any:
    if not isinstance(payload, dict):
        return payload
    return {key: redact_tree(value) if key in FIELDS else value for key, value in payload.items()}


def _request(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """The body read ahead, then the rest of the connection's messages (a disconnect) as they come."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


@asynccontextmanager
async def redacted_logs(_app: Starlette) -> AsyncIterator[None]:
    """The server's log is among what it keeps, and it writes a failed run's exception there whole
    (a tool's error quoting a key, twice with its traceback): from startup, when the server's logging
    is set up, every handler's line is redacted.
    """
    redact_handlers()
    yield


app = Starlette(middleware=[Middleware(RedactingRequests)], lifespan=redacted_logs)
"""No routes of its own: the server's routes, behind the middleware; its lifespan merged with the server's."""
