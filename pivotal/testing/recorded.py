"""Recorded runs: a run's model calls recorded once against a real provider, then replayed offline
and deterministically, so an application's tests run a whole Pivotal run (actor, critic,
reflector, lessons) without a key, a network or a bill.

Built on vcrpy, the library LangSmith's pytest cache (`LANGSMITH_TEST_CACHE`) records with, and
written to its cassette format. LangSmith's cache is not used as is because it records whatever
it has not seen (`new_episodes`): a changed prompt quietly goes to the provider again, or, in CI
without a key, ends as a "Connection error." deep inside the SDK. Here a replay never records,
calls are keyed on their whole request body, and a call that is not in the recording fails the
test with the first place its body differs from the call recorded there. The host is not part of
the key, so a recording made against one address of an API replays for another.

A cassette keeps no secret: request headers are dropped but for `content-type` (so no
`authorization`, `x-api-key` or `api-key`), response headers too (no cookies, no organisation
ids), and bodies and URLs pass through `pivotal.core.secrets.redact`.

In pytest: `pytest_plugins = ["pivotal.testing.fixtures"]` in a conftest gives the `recorded_run`
fixture (docs/testing.md). Elsewhere: `with recorded("cassettes/refund.yaml"): ...`.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pivotal.core.errors import PivotalError
from pivotal.core.secrets import redact

if TYPE_CHECKING:  # vcrpy ships no types: these name what vcrpy hands over
    from vcr.cassette import Cassette
    from vcr.request import Request

MODE_VARIABLE = "PIVOTAL_RECORD_MODE"
MODES = {"none": "none", "once": "once", "all": "all", "rewrite": "all"}
"""What each accepted mode means to vcrpy. none: replay only (the default); once: record when the
cassette is missing, else replay only; all (pytest-recording's `rewrite`): record again from scratch."""
KEPT_HEADERS = frozenset({"content-type"})
"""The only headers a cassette keeps, on requests and responses alike."""
IGNORED_HOSTS = ("api.smith.langchain.com", "eu.api.smith.langchain.com")
"""LangSmith's own traces, when tracing is on, are no model calls: never recorded, never a miss."""
SHOWN_CHARS = 40
"""Characters of each side shown around the first difference in a body."""


class RecordingMismatch(PivotalError):
    """The run asked for a model call the recording does not hold, or left recorded calls unasked:
    what the run sends changed since it was recorded (a prompt, a model, a setting).
    """


@dataclass
class Recording:
    """One cassette in use: where it is, how it is used, and what did not match."""

    path: Path
    mode: str
    misses: list[str] = field(default_factory=list)
    """One line per call that was not in the recording (replay only), first difference included."""
    cassette: Any = None

    @property
    def replaying(self) -> bool:
        """True when no call may be recorded: every call must come from the cassette."""
        return bool(self.cassette is not None and self.cassette.write_protected)

    @property
    def bodies(self) -> list[Any]:
        """The recorded calls' request bodies (parsed JSON where they are JSON), in recorded order:
        what a test reads instead of a live server's request log.
        """
        return [_parsed(request.body) for request in self.cassette.requests] if self.cassette is not None else []

    @property
    def replayed(self) -> int:
        return int(self.cassette.play_count) if self.cassette is not None else 0

    def check(self, strict: bool = True) -> None:
        """Raise `RecordingMismatch` when a call missed, or (`strict`) a recorded call was never asked for."""
        again = f"if the change is meant, record again against the provider: {MODE_VARIABLE}=all"
        if self.misses:
            more = f" (and {len(self.misses) - 1} more)" if len(self.misses) > 1 else ""
            raise RecordingMismatch(
                f"a model call is not in the recording {self.path} (replay only): {self.misses[0]}{more}; {again}"
            )
        if strict and self.replaying and not self.cassette.all_played:
            unasked = [r for i, r in enumerate(self.cassette.requests) if not self.cassette.play_counts[i]]
            raise RecordingMismatch(
                f"the run asked for {self.replayed} of the {len(self.cassette)} model calls recorded in {self.path}; "
                f"the first never asked for: {_route(unasked[0])} ({_summary(unasked[0])}); {again}"
            )


@contextmanager
def recorded(path: str | os.PathLike[str], mode: str | None = None, *, strict: bool = True) -> Iterator[Recording]:
    """Replay (or record) every HTTP call made inside the block from (to) the cassette at `path`.

    `mode`: "none" replays only, "once" records when the cassette is missing, "all" records anew;
    by default `PIVOTAL_RECORD_MODE`, else "none". On leaving, a call that missed, or (`strict`) a
    recorded call never asked for, raises `RecordingMismatch`; the SDK inside the run only saw a
    failed connection, so this is where the test learns why.
    """
    vcr = _vcr_module()
    recording = Recording(Path(path), _mode(mode))
    if recording.mode == "none" and not recording.path.exists():
        raise RecordingMismatch(
            f"no recording at {recording.path}: record it once against the provider with {MODE_VARIABLE}=once"
        )
    if recording.mode == "all":
        recording.path.unlink(missing_ok=True)
    recorder = vcr.VCR(
        record_mode=recording.mode,
        match_on=("method", "path", "query", "pivotal_body"),
        before_record_request=_scrubbed_request,
        before_record_response=_scrubbed_response,
        decode_compressed_response=True,
        record_on_exception=False,
        ignore_hosts=IGNORED_HOSTS,
    )
    recorder.register_matcher("pivotal_body", same_body)
    with recorder.use_cassette(str(recording.path)) as cassette:
        recording.cassette = cassette
        _watch(recording)
        try:
            yield recording
        except Exception as exc:
            if recording.misses:  # the test failed because the run changed: say that first
                recording.check(strict=False)
            raise exc
    recording.check(strict)


def _vcr_module() -> Any:
    try:
        import vcr
    except ImportError:
        raise PivotalError("recorded runs need vcrpy: pip install 'pivotal[testing]'") from None
    return vcr


def _mode(mode: str | None) -> str:
    chosen = (mode or os.environ.get(MODE_VARIABLE) or "none").strip().lower()
    if chosen not in MODES:
        raise PivotalError(
            f"record mode {chosen!r} is not one of {', '.join(MODES)}; set {MODE_VARIABLE} to one of them"
        )
    return MODES[chosen]


def _watch(recording: Recording) -> None:
    """Note every call the cassette cannot answer while it replays, with why (vcrpy raises inside the
    SDK, which retries, then reports only a failed connection).
    """
    cassette = recording.cassette
    can_play = cassette.can_play_response_for

    def can_play_noting_misses(request: Request) -> bool:
        if can_play(request):
            return True
        if cassette.write_protected:
            miss = explain(cassette, cassette.filter_request(request))
            if miss not in recording.misses:  # the SDK's own retries ask again: one line per difference
                recording.misses.append(miss)
        return False

    cassette.can_play_response_for = can_play_noting_misses


# --- keys and differences --------------------------------------------------------------------


def same_body(r1: Request, r2: Request) -> None:
    """A vcrpy matcher: the same bytes, or the same JSON. vcrpy asks it for every recorded call on
    every lookup, so it only compares (each body parsed once); `explain` says how a miss differs.
    """
    if r1.body != r2.body and _parsed(r1.body) != _parsed(r2.body):
        raise AssertionError("the request bodies differ")


def explain(cassette: Cassette, request: Request) -> str:
    """One line on why `request` is not in `cassette`: its first difference from the next call
    recorded on the same route that was not yet replayed (a deterministic run asks in order).
    """
    same_route = [(i, r) for i, r in enumerate(cassette.requests) if _route(r) == _route(request)]
    if not same_route:
        return f"{_route(request)}: nothing was recorded on this route"
    waiting = [r for i, r in same_route if not cassette.play_counts[i]]
    if not waiting:
        return f"{_route(request)}: all {len(same_route)} calls recorded on this route were already replayed"
    difference = first_difference(_parsed(waiting[0].body), _parsed(request.body)) or "the query differs"
    return f"{_route(request)}: {difference}"


def first_difference(recorded: Any, now: Any, where: str = "body") -> str | None:
    """Where two JSON values first differ, and how, in one line; None when they are the same."""
    if type(recorded) is not type(now):
        return f"{where}: recorded {_show(recorded)}, now {_show(now)}"
    if isinstance(recorded, dict):
        for key in [*recorded, *(k for k in now if k not in recorded)]:
            if key not in now:
                return f"{where}.{key}: recorded {_show(recorded[key])}, now absent"
            if key not in recorded:
                return f"{where}.{key}: now {_show(now[key])}, not in the recording"
            found = first_difference(recorded[key], now[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list):
        for index, (old, new) in enumerate(zip(recorded, now, strict=False)):
            found = first_difference(old, new, f"{where}[{index}]")
            if found:
                return found
        if len(recorded) != len(now):
            return f"{where}: {len(recorded)} items recorded, {len(now)} now"
        return None
    if isinstance(recorded, str) and recorded != now:
        at = next(
            (i for i, (a, b) in enumerate(zip(recorded, now, strict=False)) if a != b), min(len(recorded), len(now))
        )
        return f"{where} at character {at}: recorded {_window(recorded, at)}, now {_window(now, at)}"
    return None if recorded == now else f"{where}: recorded {_show(recorded)}, now {_show(now)}"


def _window(text: str, at: int) -> str:
    start = max(0, at - SHOWN_CHARS // 2)
    part = text[start : at + SHOWN_CHARS]
    return ("…" if start else "") + json.dumps(part, ensure_ascii=False) + ("…" if at + SHOWN_CHARS < len(text) else "")


def _show(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 2 * SHOWN_CHARS else text[: 2 * SHOWN_CHARS] + "…"


def _parsed(body: object) -> Any:
    """The body as JSON where it is JSON; not to be changed (parsed bodies are shared)."""
    raw = body.read() if hasattr(body, "read") else body
    return _json(raw) if isinstance(raw, bytes | str) else raw


@lru_cache(maxsize=1024)
def _json(raw: bytes | str) -> Any:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        return json.loads(text) if text else text
    except ValueError:
        return text


def _route(request: Request) -> str:
    return f"{request.method} {request.path}"


def _summary(request: Request) -> str:
    """What a recorded call was for, in a few words: its model and, where forced, the tool it asked for."""
    body = _parsed(request.body)
    if not isinstance(body, dict):
        return "not JSON"
    choice = body.get("tool_choice")
    tool = choice.get("name") or (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
    return ", ".join(f"{k} {v}" for k, v in (("model", body.get("model")), ("schema", tool or schema)) if v)


# --- what a cassette keeps -------------------------------------------------------------------


def _scrubbed_request(request: Request) -> Request:
    """No header but content-type; URL and body redacted. Applied alike to what is recorded and to
    what is looked up, so a redacted value still matches itself.
    """
    request = copy.deepcopy(request)
    request.headers = {k: v for k, v in request.headers.items() if k.lower() in KEPT_HEADERS}
    request.uri = redact(request.uri)
    body = request.body
    if isinstance(body, bytes | str) and body:
        text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
        cleaned = redact(text)
        if cleaned != text:
            request.body = cleaned.encode()
    return request


def _scrubbed_response(response: dict[str, Any]) -> dict[str, Any]:
    response["headers"] = {k: v for k, v in response.get("headers", {}).items() if k.lower() in KEPT_HEADERS}
    body = response.get("body", {}).get("string")
    if isinstance(body, bytes | str) and body:
        text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
        cleaned = redact(text)
        if cleaned != text:
            response["body"]["string"] = cleaned.encode() if isinstance(body, bytes) else cleaned
    return response
