"""Sub-agents inherit the critic: a tool call that runs another agent runs that agent's tool calls
under the same `PivotalCritic`, with nothing to add to the inner agent.

A tool may run a whole agent: Deep Agents' `task` (its default general-purpose sub-agent never gets
the main agent's `middleware=[...]`), a `create_agent` agent invoked in a tool's body, a compiled
subgraph with a `ToolNode` used as a tool. Nothing of the outer agent's middleware is in the inner
agent's graph; what does reach it is the run's callbacks, which LangGraph and LangChain hand to
every nested run through the config. So while a reviewed call runs, the critic puts a `Guard` in a
context variable that LangChain adds to every callback manager it configures
(`register_configure_hook`, as LangSmith's tracer is added): every tool the inner agent starts
calls the guard's `on_tool_start` first, in the tool's own thread and context, before its body.

The guard hands the call to the critic that let the outer call run, which reviews it exactly as its
own (the once-guard over the outer thread's record, the critic's verdict, a person where
`require_approval_for` says so: the `interrupt` is raised in the inner agent's tools node, reaches
the top-level thread, and a `Command(resume=...)` of the outer agent answers it). A call that may run
returns and the tool runs; one that may not raises `NestedRefusal` before its body runs. That is a
`ToolInvocationError`, which a `create_agent` tools node answers by default as the tool's error
result: the inner agent reads "Not run: ..." and proposes again, as under its own critic; where the
inner agent lets errors through, its run ends and the outer call is sent back with the same words.
Either way the tool never ran. The reviews are kept on the guard and recorded with the outer call's
own review (`pivotal_reviews`), so each is counted once and the outer thread's once-guard sees them.

Only tool calls a model proposed (they carry a tool call id) are reviewed: a tool that calls another
tool's function in its body is the application's code. An inner agent with its own `PivotalCritic`
(the same instance or another) reviews its calls itself; the guard leaves those alone.
"""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolCall
from langchain_core.tracers.context import register_configure_hook
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.prebuilt.tool_node import ToolInvocationError

from pivotal.core.environments.once import REVIEWS, VERDICTS, WRITTEN, beside, put_beside
from pivotal.core.secrets import redact_tree
from pivotal.graphs.blocking import run_blocking

T = TypeVar("T")


class NestedRefusal(ToolInvocationError):
    """A tool call of an inner agent that the critic did not let run: its words, as the tool's error."""

    def __init__(self, name: str, arguments: dict[str, Any], text: str) -> None:
        Exception.__init__(self, text)
        self.message = text
        self.tool_name = name
        self.tool_kwargs = arguments
        self.source = None  # type: ignore[assignment]  # no validation error: a verdict
        self.filtered_errors = None


InnerReview = Callable[["Guard", ToolCall, str], str | None]
"""The critic's review of an inner call and its tool's description: None to run it, else why not."""


class Guard(BaseCallbackHandler):
    """The callbacks of one reviewed tool call while it runs: each tool an agent inside it starts is
    reviewed first (`review`), and what the reviews decided and what the tools returned is kept here.
    """

    raise_error = True
    """A refusal, or a person's pause (`interrupt`), must stop the inner tool, not be logged."""
    run_inline = False
    """Under an async run LangChain calls it in a worker thread, with the tool's context variables
    (`interrupt` needs the inner node's config), so it can wait on the run's own loop (`run`)."""
    ignore_llm = ignore_chat_model = ignore_chain = ignore_retriever = ignore_custom_event = True
    """Only tool events (LangChain files them under `ignore_agent`) matter here."""

    def __init__(self, review: InnerReview, call_id: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self.review = review
        self.call_id = call_id
        self.loop = loop
        """The event loop the outer call runs on, when it runs async: the checkpointer's is bound to it."""
        self.entries: list[dict[str, Any]] = []
        """The inner calls' reviews, in order; `executed` and `observation` once their tool ended."""
        self.verdicts: dict[str, Any] = {}
        """The inner calls' rulings by `verdict_key`: a call paused for a person resumes on its own."""
        self.resumed = False
        """Whether the reviews kept at an earlier pause of this call (`kept`) were read back."""
        self._running: dict[UUID, dict[str, Any]] = {}

    def run(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`await function(*args)` from the callback's thread: on the outer call's loop when it runs
        async (its checkpointer's connection lives there), else on Pivotal's private loop.
        """
        if self.loop is None or self.loop.is_closed() or _in_loop(self.loop):
            return run_blocking(function, *args)
        return asyncio.run_coroutine_threadsafe(_awaited(function, *args), self.loop).result()

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        call_id = kwargs.get("tool_call_id")
        if _GUARD.get() is not self or not call_id or call_id == self.call_id:
            return  # an inner critic's guard is innermost (it reviewed the call), or the outer call itself
        name = str((serialized or {}).get("name") or kwargs.get("name") or "")
        arguments = dict(inputs or {})
        before = len(self.entries)
        call: ToolCall = {"name": name, "args": arguments, "id": call_id, "type": "tool_call"}
        refusal = self.review(self, call, str((serialized or {}).get("description") or ""))
        if refusal is not None:
            raise NestedRefusal(name, arguments, refusal)
        if len(self.entries) > before:
            self._running[run_id] = self.entries[-1]

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if (entry := self._running.pop(run_id, None)) is not None:
            entry["executed"] = getattr(output, "status", "success") != "error"
            entry["observation"] = str(getattr(output, "content", output))[:4000]

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if (entry := self._running.pop(run_id, None)) is not None:
            entry["executed"] = False  # the tool raised: the world did not change
            entry["observation"] = str(error)[:4000]


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _awaited(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await function(*args)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's running event loop, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_GUARD: ContextVar[Guard | None] = ContextVar("pivotal_nested_guard", default=None)
"""The guard of the reviewed call now running, innermost first: the one that reviews what starts."""

register_configure_hook(_GUARD, inheritable=True)


# --- a delegation paused for a person keeps the reviews it made -------------------------------
# A pause ends the outer call's run; its resume (in any process) runs the outer call again, whose
# inner agent goes on from its own checkpoint: the inner calls made before the pause do not start
# again, so their reviews would be lost. They are written, at the pause, beside the checkpoint the
# outer call runs from, as writes of a task of their own (`_TASK`), which LangGraph passes over (no
# such task runs); the resumed call's guard reads them back first.

_TASK = f"{WRITTEN}inner:"


async def keep(config: Mapping[str, Any], guard: Guard) -> None:
    """Write the guard's reviews so far beside the outer call's checkpoint (a pause follows)."""
    if guard.entries:
        task = f"{_TASK}{guard.call_id}:{uuid.uuid4().hex[:12]}"  # one per pause: Postgres keeps the first writes
        writes = [(REVIEWS, [redact_tree(entry) for entry in guard.entries]), (VERDICTS, redact_tree(guard.verdicts))]
        await put_beside(config, writes, task)


IN_FLIGHT = "its tool started and no checkpoint holds its end (the process stopped while it ran): it may have acted"


def checkpointed(config: Mapping[str, Any]) -> bool:
    """Whether the call runs in a thread with a checkpointer: where an intent can be written."""
    return (config.get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER) is not None and beside(config) is not None


async def intend(config: Mapping[str, Any], entry: Mapping[str, Any]) -> None:
    """Write down, beside the call's checkpoint, that an irreversible call's tool is about to run: a
    process stopped during it (kill -9) leaves this and no review, and the thread's record
    (`ThreadRecord.in_flight`) takes the call as run, so a resume in any process does not run it again.
    """
    written = {**redact_tree(dict(entry)), "executed": True, "in_flight": True, "observation": IN_FLIGHT}
    task = f"{WRITTEN}intent:{entry.get('tool_call_id')}:{uuid.uuid4().hex[:12]}"
    await put_beside(config, [(REVIEWS, [written])], task)


async def withdraw(config: Mapping[str, Any], entry: Mapping[str, Any]) -> None:
    """The tool paused (its own `interrupt`, or an agent's inside it): not in flight; on resume it runs
    again, as LangGraph runs a paused node again, and writes a new intent.
    """
    written = {"tool_call_id": entry.get("tool_call_id"), "in_flight": False}
    task = f"{WRITTEN}paused:{entry.get('tool_call_id')}:{uuid.uuid4().hex[:12]}"
    await put_beside(config, [(REVIEWS, [written])], task)


async def kept(config: Mapping[str, Any], guard: Guard) -> None:
    """Read back into `guard` what its outer call kept at its pauses: each inner call's review once (the
    latest), and the rulings, so a paused call resumes on the verdict it paused with (no critic call).
    """
    saver, at = (config.get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER), beside(config)
    if saver is None or at is None:
        return
    try:
        saved = await saver.aget_tuple(at)
    except NotImplementedError:
        saved = await asyncio.to_thread(saver.get_tuple, at)
    entries: dict[str, dict[str, Any]] = {}
    for task, channel, value in (saved.pending_writes or []) if saved else []:
        if not str(task).startswith(f"{_TASK}{guard.call_id}:"):
            continue
        if channel == REVIEWS:
            entries.update({str(entry.get("tool_call_id")): entry for entry in value})
        elif channel == VERDICTS:
            guard.verdicts.update(value)
    guard.entries[:0] = list(entries.values())


class _Quiet(logging.Filter):
    """LangChain logs a callback's exception as a warning before raising it: a guard's refusal or
    pause is no error, and the pause's repr holds the call's arguments, which logs must not show.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.args and isinstance(record.args, tuple) and record.args[0] == Guard.__name__)


logging.getLogger("langchain_core.callbacks.manager").addFilter(_Quiet())


def guarding(guard: Guard) -> Token[Guard | None]:
    """Set while a reviewed call runs (`_GUARD.reset(token)` after): tools started inside go to `guard`."""
    return _GUARD.set(guard)


def unguard(token: Token[Guard | None]) -> None:
    _GUARD.reset(token)
