"""`pivotal.graphs.served:app`'s middleware: the run requests a LangGraph server stores reach it with
secrets blanked, every other request as it came; and its lifespan: the server's log lines are written
redacted (the server itself: tests/test_promises_http.py).
"""

import io
import json
import logging

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from pivotal.core.logs import RedactingFormatter
from pivotal.graphs.served import RedactingRequests, app

KEY = "sk-proj-" + "Abc123" * 8


async def echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse({"body": body.decode(), "length": request.headers.get("content-length")})


def client() -> TestClient:
    routes = [Route("/{path:path}", echo, methods=["GET", "POST", "PATCH"])]
    return TestClient(RedactingRequests(Starlette(routes=routes)))


def test_a_run_request_reaches_the_server_with_its_secrets_blanked():
    sent = {
        "assistant_id": "desk",
        "input": {"messages": [{"role": "user", "content": f"my key is {KEY}"}]},
        "command": {"resume": {"type": "reject", "message": f"not with {KEY}"}},
        "metadata": {"kept": "as sent"},
    }
    for path in ("/threads/t-1/runs", "/threads/t-1/runs/wait", "/threads/t-1/runs/stream", "/runs/wait"):
        got = client().post(path, json=sent).json()
        assert KEY not in got["body"] and int(got["length"]) == len(got["body"].encode())
        received = json.loads(got["body"])
        assert received["metadata"] == sent["metadata"] and received["assistant_id"] == "desk"
        assert "redacted" in received["input"]["messages"][0]["content"]
    batch = client().post("/runs/batch", json=[sent, sent]).json()
    assert KEY not in batch["body"]
    edit = client().post("/threads/t-1/state", json={"values": {"note": KEY}}).json()
    assert KEY not in edit["body"]


def test_other_requests_pass_as_they_came():
    sent = {"metadata": {"note": KEY}}
    assert KEY in client().post("/threads", json=sent).json()["body"]  # no run: nothing stored as a run
    assert KEY in client().patch("/threads/t-1/runs", json={"input": KEY}).json()["body"]
    assert client().post("/threads/t-1/runs", content=b"not json {").json()["body"] == "not json {"


def test_the_app_has_no_routes_of_its_own():
    assert app.routes == [] and [m.cls for m in app.user_middleware] == [RedactingRequests]


def test_from_startup_the_servers_log_lines_are_redacted_tracebacks_included():
    """`langgraph dev` sets its logging up before it loads the app; the app's lifespan then wraps every
    handler's formatter, so a failed run's exception is logged with its key blanked, in its traceback too.
    """
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("pivotal-test-served")
    log.addHandler(handler)
    try:
        for _ in range(2):
            with TestClient(app):  # startup and shutdown: the lifespan runs
                pass
        try:
            raise RuntimeError(f"order service refused api_key={KEY}")
        except RuntimeError:
            log.exception("Run encountered an error in graph: %s", KEY)
    finally:
        log.removeHandler(handler)
    written = stream.getvalue()
    assert "Traceback" in written and "[redacted]" in written and KEY not in written
    assert isinstance(handler.formatter, RedactingFormatter)
    assert not isinstance(handler.formatter.inner, RedactingFormatter)  # wrapped once
