"""Busy threads and double texts for a `create_agent` agent under `PivotalCritic`: the policies of
graphs/busy.py (`double_text`), applied from the middleware's hooks.

The middleware does not see an invocation begin or end, only its hooks, so a turn holds its thread
from its first model call (`before_model` with the user's message last) until its last reply (no
tool calls), its hard stop, a model call that raised, or a pause for a person (a paused turn is not
running); the hold is renewed while a model or tool call runs (`running`), and a turn that stopped
some other way lets go when its hold runs out, PIVOTAL_LEASE_S later.

By the time a second message reaches `before_model`, LangGraph has put it on a branch of whatever
checkpoint was newest when it was sent, possibly one in the middle of the running turn. So a message
that waited (enqueue) or stopped the running turn (interrupt) goes on from the newest state of the
thread, the one the other turn ended with; under rollback it goes on from the messages before the
stopped turn's own. The messages are rebased, nothing else is: the once-guard reads what ran from
every branch of the thread, so nothing executed runs again whichever branch the turn goes on from.
"""

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from pivotal.core.context import Context
from pivotal.core.environments.once import REVIEWS, VERDICTS, closed_listing
from pivotal.core.settings import settings
from pivotal.graphs.blocking import run_blocking
from pivotal.graphs.busy import Board, Turn, arrive, board_for, digest, owner_token

HEAD_LOOKBACK = 50
"""Checkpoints read back from the newest for the state the other turn ended with."""


async def turn_opens(state: Mapping[str, Any], context: Context) -> dict[str, Any] | None:
    """Before each model call: the turn's first holds the thread under the policy (waiting, stopping the
    running turn, or refusing the message), the others ask whether a newer message stopped this turn.
    The update rebases the turn's messages when it waited for, or stopped, another.
    """
    where = _thread()
    messages = state.get("messages") or []
    opening = _opening(messages)
    if where is None or opening is None:
        return None
    saver, thread = where
    board = await board_for(saver)
    index, message = opening
    owner = owner_token(f"msg:{message.id}")
    ttl = settings().lease_s
    if index != len(messages) - 1:  # a later model call of the turn
        await _still_running(board, thread, owner, ttl)
        return None
    row = await board.read(thread)
    if row.owner == owner and row.running():
        return None  # this turn holds it already (its first hook ran again)
    said = f"{digest(['message', message.text])}@{index}"  # a fork puts it at the same place again: no repeat
    turn = await arrive(board, thread, owner, said=said, policy=context.double_text, window=context.repeat_window_s,
                        ttl=ttl, on_reject=lambda: board.drop(thread, message.id or ""))  # fmt: skip
    await board.opened(thread, owner, said, "")
    return await _rebased(saver, thread, state, index, turn, row.dropped)


async def _still_running(board: Board, thread: str, owner: str, ttl: float) -> None:
    """Renew this turn's hold, or take the thread again after a pause; stop here when asked to."""
    row = await board.read(thread)
    if row.owner == owner and row.stop:
        turn = Turn(board, thread, owner, ttl, stopped=row.stop)
        await turn.release()
        raise turn.interrupted()
    if row.owner == owner:
        await board.renew(thread, owner, ttl)
    elif not row.running():  # resumed after a pause for a person: running again
        await board.claim(thread, owner, ttl)


async def _rebased(
    saver: BaseCheckpointSaver, thread: str, state: Mapping[str, Any], index: int, turn: Turn, dropped: list[str]
) -> dict[str, Any] | None:
    """The turn's messages on top of the thread as the other turn left it (or, after a rollback, as it
    found it), without messages a "reject" refused; None when they already are.
    """
    messages = state.get("messages") or []
    own, opening = messages[:index], messages[index]
    update: dict[str, Any] = {}
    base = own
    if turn.waited_for is not None and turn.rollback_to is not None:
        stopped = turn.waited_for.owner.rpartition("|msg:")[2]
        ids = [m.id for m in own]
        base = own[: ids.index(stopped)] if stopped in ids else own
    elif turn.waited_for is not None:
        head = await _head(saver, thread, opening.id or "")
        if head is not None:
            base = list(head.get("messages") or [])
            known = {r.get("tool_call_id") for r in state.get(REVIEWS) or []}
            update[REVIEWS] = [r for r in head.get(REVIEWS) or [] if r.get("tool_call_id") not in known]
            update[VERDICTS] = head.get(VERDICTS) or {}
    base = [m for m in base if m.id not in dropped]
    if [m.id for m in base] != [m.id for m in own]:
        update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *base, opening]
    return {key: value for key, value in update.items() if value} or None


async def _head(saver: BaseCheckpointSaver, thread: str, opening: str) -> dict[str, Any] | None:
    """The newest state of the thread's agent that does not hold this turn's message: where the turn it
    waited for (or stopped) ended.
    """
    query: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}

    def fits(values: object) -> bool:
        return isinstance(values, dict) and opening not in {m.id for m in values.get("messages") or []}

    try:
        async with closed_listing(saver, query, limit=HEAD_LOOKBACK) as items:
            async for item in items:
                if fits(values := item.checkpoint["channel_values"]):
                    return values
        return None
    except NotImplementedError:  # a synchronous saver (SqliteSaver)
        found = await asyncio.to_thread(lambda: list(saver.list(query, limit=HEAD_LOOKBACK)))
        return next((i.checkpoint["channel_values"] for i in found if fits(i.checkpoint["channel_values"])), None)


def ends_turn(state: Mapping[str, Any]) -> bool:
    """The model's last reply calls no tool: the agent ends after it (`after_model`)."""
    messages = state.get("messages") or []
    return bool(messages) and not getattr(messages[-1], "tool_calls", None) and _opening(messages) is not None


async def turn_over(state: Mapping[str, Any]) -> None:
    """The turn let go of its thread: it ended, stopped, or paused for a person."""
    where = _thread()
    opening = _opening(state.get("messages") or [])
    if where is None or opening is None:
        return
    board = await board_for(where[0])
    await board.release(where[1], owner_token(f"msg:{opening[1].id}"))


@contextmanager
def running(state: Mapping[str, Any]) -> Iterator[None]:
    """Around a model call or a tool call of the turn: its hold renewed every third of PIVOTAL_LEASE_S
    while the call runs (a refund that takes a minute must not let a second message in), from a
    thread of its own, so a sync call that blocks renews it too. It stops when the call returns or raises.
    """
    where, opening = _thread(), _opening(state.get("messages") or [])
    if where is None or opening is None:
        yield
        return
    owner, ttl, done = owner_token(f"msg:{opening[1].id}"), settings().lease_s, threading.Event()
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    async def renew() -> None:
        await (await board_for(where[0])).renew(where[1], owner, ttl)

    def keep() -> None:
        while not done.wait(ttl / 3):
            with contextlib.suppress(Exception):  # a blip of the database: the next renewal tries again
                if loop is None:
                    run_blocking(renew)
                else:
                    asyncio.run_coroutine_threadsafe(renew(), loop).result(ttl / 3)

    threading.Thread(target=keep, name="pivotal-turn-hold", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def pausing(state: Mapping[str, Any]) -> None:
    """Before a pause for a person (`interrupt`), from a sync tool wrapper under `invoke` or `ainvoke`:
    a turn waiting for a person is not running.
    """
    _soon(turn_over, state)


def resumed(state: Mapping[str, Any]) -> None:
    """After the pause answered (`interrupt` returned the reply): the turn runs again, and holds its
    thread while the call it paused for runs.
    """
    _soon(_take_again, state)


async def _take_again(state: Mapping[str, Any]) -> None:
    where = _thread()
    opening = _opening(state.get("messages") or [])
    if where is not None and opening is not None:
        board = await board_for(where[0])
        await board.claim(where[1], owner_token(f"msg:{opening[1].id}"), settings().lease_s)


def _soon(step: Callable[[Mapping[str, Any]], Coroutine[Any, Any, None]], state: Mapping[str, Any]) -> None:
    """`step(state)` now under a sync call, or as a task of the running loop (in order) under an async one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        run_blocking(step, state)
        return
    task = loop.create_task(step(state))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


_pending: set[asyncio.Task[None]] = set()
"""Releases under way (a task must be held until it is done)."""


def _thread() -> tuple[Any, str] | None:
    """The agent's checkpointer and thread, when it runs at the root of one (a sub-agent's turn is its parent's)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return None
    saver, thread = configurable.get(CONFIG_KEY_CHECKPOINTER), configurable.get("thread_id")
    if saver is None or thread is None or "|" in str(configurable.get("checkpoint_ns", "")):
        return None
    return saver, str(thread)


def _opening(messages: Any) -> tuple[int, HumanMessage] | None:
    """The user's message that opened the turn: the last one, and where it stands."""
    index = next((i for i in reversed(range(len(messages))) if isinstance(messages[i], HumanMessage)), None)
    return None if index is None else (index, messages[index])
