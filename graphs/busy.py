"""Busy threads and double texts: one policy for a message that arrives while a turn runs on its
thread, or that repeats the message that opened the thread's last turn (a double-clicked send, a
request a client retried after a timeout). The policies are the LangGraph platform's
`multitask_strategy` names (`Context.double_text`):

- "reject": the message is refused before it runs (`DoubleTextRejected`, one line);
- "enqueue" (the default): it waits for the running turn to end, then runs as the next turn;
- "interrupt": the running turn stops at its next safe point (before its next node in Pivotal's
  graph, before its next model call under `PivotalCritic`: never during a tool, nor between the
  tool calls of one reply) and its caller gets `TurnInterrupted`; what it did stays in the
  thread, and the message runs next, after it;
- "rollback": as "interrupt", but the message runs from where the stopped turn started, as if that
  turn had not been asked. What the stopped turn executed is not undone: it stays recorded, and
  the once-guard, which reads every branch of the thread, never runs it again.

A repeat is a double text even when the turn it repeats has ended: "reject" refuses it, and the
other policies run it as a new turn (after, or in place of, the turn it repeats while that runs).
Whatever the policy, nothing the thread executed runs again (core/environments/once.py).

Which turn runs on a thread is kept on a board: in this process for every checkpointer (one board
per checkpointer object), and for LangGraph's async SQLite and Postgres savers in a table beside the
checkpoints (`pivotal_turns`, as graphs/lease.py keeps `pivotal_leases`), so processes on any
machine see each other's turns. A hold that was not renewed for PIVOTAL_LEASE_S, or whose process
is gone on this machine, is free. A turn paused for a person holds nothing: it is not running.
"""

import asyncio
import contextvars
import hashlib
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.messages import HumanMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from pivotal.core.context import Context, DoubleText
from pivotal.core.environments.once import read_whole_next
from pivotal.core.errors import PivotalError
from pivotal.core.logs import logger
from pivotal.core.settings import settings
from pivotal.graphs.lease import ThreadBusy, _create_postgres, _Database, _database, _gone, _machine, holding

LOCAL_POLL_S = 0.05
"""How often a message waiting for a turn of this process looks again."""
SHARED_POLL_S = 0.2
"""How often a message waiting for a turn in the database looks again."""


class DoubleTextRejected(ThreadBusy):
    """The agent's `double_text` is "reject" and the message came while a turn ran, or repeated the last one."""


class TurnInterrupted(PivotalError):
    """A newer message stopped this turn between two steps ("interrupt" or "rollback"); what it executed stays."""


@dataclass
class Row:
    """A thread's place on the board: who runs a turn on it, and what opened its last turn."""

    owner: str = ""
    left: float = 0.0
    """Seconds the owner's hold has left; 0 or less: released or run out."""
    stop: str = ""
    """"interrupt" or "rollback": a newer message asked the owner to stop."""
    said: str = ""
    """A digest of the message that opened the thread's last turn (never its text)."""
    said_age: float = math.inf
    started_from: str = ""
    """The checkpoint the running turn started from ("" for a thread that had none): a rollback goes back there."""
    dropped: list[str] = field(default_factory=list)
    """Ids of messages refused by "reject" after they entered a branch (under `PivotalCritic`)."""

    def running(self) -> bool:
        return bool(self.owner) and self.left > 0 and not _gone(self.owner)


class Board(Protocol):
    poll_s: float

    async def read(self, thread: str) -> Row: ...
    async def claim(self, thread: str, owner: str, ttl: float) -> bool: ...
    async def renew(self, thread: str, owner: str, ttl: float) -> bool: ...
    async def release(self, thread: str, owner: str) -> None: ...
    async def ask_stop(self, thread: str, owner: str, kind: str) -> None: ...
    async def opened(self, thread: str, owner: str, said: str, started_from: str) -> None: ...
    async def drop(self, thread: str, message_id: str) -> None: ...


# --- the policy ------------------------------------------------------------------------------
@dataclass
class Turn:
    """A turn that holds its thread on the board until `release`."""

    board: Board
    thread: str
    owner: str
    ttl: float
    rollback_to: str | None = None
    """Set when this message stopped a turn under "rollback": the checkpoint that turn started from."""
    waited_for: Row | None = None
    """The turn this message waited for (or stopped), when there was one."""
    stopped: str = ""

    async def stop_asked(self) -> str:
        """The stop a newer message asked of this turn ("interrupt", "rollback" or ""), read at every
        safe point: a stop seen one node late could let one more tool run.
        """
        if not self.stopped:
            row = await self.board.read(self.thread)
            self.stopped = row.stop if row.owner == self.owner else ""
        return self.stopped

    async def release(self) -> None:
        await self.board.release(self.thread, self.owner)

    def interrupted(self) -> TurnInterrupted:
        return TurnInterrupted(
            f"thread {self.thread!r}: this turn was stopped between two steps because a newer message arrived "
            f"(double_text {self.stopped!r}); what it executed stays recorded and never runs again"
        )


async def arrive(
    board: Board,
    thread: str,
    owner: str,
    *,
    said: str,
    policy: DoubleText,
    window: float,
    ttl: float,
    on_reject: Callable[[], Awaitable[None]] | None = None,
) -> Turn:
    """Hold the thread for a new turn under `policy`, or refuse it (`DoubleTextRejected`).

    `said`: the digest of the message that opens the turn, with `@<place>` where its place is known ("" for
    a resume or replay, which is no new message: it waits for a running turn whatever the policy).
    `on_reject`: what to undo before refusing.
    """
    turn = Turn(board, thread, owner, ttl)
    previous = await board.read(thread)
    busy = previous.running() and previous.owner != owner
    repeat = window > 0 and previous.said_age <= window and _repeats(said, previous.said)
    if said and (busy or repeat):
        if policy == "reject":
            if on_reject is not None:
                await on_reject()
            logger().warning("double_text", thread_id=thread, policy=policy, busy=busy, repeat=repeat)
            raise DoubleTextRejected(_why(thread, busy, previous, window))
        if busy and policy in ("interrupt", "rollback"):
            await board.ask_stop(thread, previous.owner, policy)
        logger().warning("double_text", thread_id=thread, policy=policy, busy=busy, repeat=repeat)
    while not await board.claim(thread, owner, ttl):
        await asyncio.sleep(board.poll_s)
    if busy:
        read_whole_next(thread)
        turn.waited_for = previous
        if said and policy == "rollback":
            turn.rollback_to = previous.started_from
    return turn


def _repeats(said: str, before: str) -> bool:
    """Whether `said` says what `before` said, as a later message: a said may end in `@<place>` (where
    the message stands in the conversation, under PivotalCritic), and the same message met at the same
    place again is a fork re-running its turn, not a second message.
    """
    text, _, place = said.partition("@")
    earlier, _, was = before.partition("@")
    return bool(text) and text == earlier and (not place or not was or int(place) > int(was))


def _why(thread: str, busy: bool, previous: Row, window: float) -> str:
    if busy:
        return (
            f"thread {thread!r} is busy: a turn is running on it and this agent's double_text is 'reject'; "
            "send the message again when that turn has ended, or use double_text='enqueue'"
        )
    return (
        f"thread {thread!r}: this message repeats the one that opened its last turn {previous.said_age:.1f} s ago "
        f"(double_text 'reject', repeat_window_s {window:g}); it was not run again"
    )


def digest(text: object) -> str:
    """What a message is, for telling a repeat: a digest, so the board never holds what was said."""
    return hashlib.sha256(json.dumps(text, sort_keys=True, default=str).encode()).hexdigest()[:32]


def owner_token(tag: str = "") -> str:
    """A turn's owner on the board: this machine and process (so a dead owner is seen), and the turn."""
    return f"{_machine()}|{os.getpid()}|{tag or uuid.uuid4().hex[:12]}"


# --- the boards --------------------------------------------------------------------------------
@dataclass
class _Held:
    owner: str = ""
    until: float = 0.0
    stop: str = ""
    said: str = ""
    said_at: float = -math.inf
    started_from: str = ""
    dropped: list[str] = field(default_factory=list)


class LocalBoard:
    """The turns of this process, for a checkpointer that no other process shares (or one this
    module cannot reach from another: an application's own).
    """

    poll_s = LOCAL_POLL_S

    def __init__(self) -> None:
        self._rows: dict[str, _Held] = {}
        self._lock = threading.Lock()

    async def read(self, thread: str) -> Row:
        with self._lock:
            held = self._rows.get(thread) or _Held()
            now = time.monotonic()
            return Row(held.owner, held.until - now, held.stop, held.said, now - held.said_at,
                       held.started_from, list(held.dropped))  # fmt: skip

    async def claim(self, thread: str, owner: str, ttl: float) -> bool:
        with self._lock:
            held = self._rows.setdefault(thread, _Held())
            now = time.monotonic()
            if held.owner and held.owner != owner and held.until > now:
                return False
            held.owner, held.until, held.stop, held.started_from = owner, now + ttl, "", ""
            return True

    async def renew(self, thread: str, owner: str, ttl: float) -> bool:
        with self._lock:
            held = self._rows.get(thread)
            if held is None or held.owner != owner or held.until == 0:
                return False  # released, or taken by another since its hold ran out
            held.until = time.monotonic() + ttl
            return True

    async def release(self, thread: str, owner: str) -> None:
        with self._lock:
            held = self._rows.get(thread)
            if held is not None and held.owner == owner:
                held.until, held.stop = 0.0, ""

    async def ask_stop(self, thread: str, owner: str, kind: str) -> None:
        with self._lock:
            held = self._rows.get(thread)
            if held is not None and held.owner == owner:
                held.stop = kind

    async def opened(self, thread: str, owner: str, said: str, started_from: str) -> None:
        with self._lock:
            held = self._rows.get(thread)
            if held is not None and held.owner == owner:
                held.started_from = started_from
                if said:
                    held.said, held.said_at = said, time.monotonic()

    async def drop(self, thread: str, message_id: str) -> None:
        with self._lock:
            held = self._rows.setdefault(thread, _Held())
            held.dropped = [*held.dropped[-(KEPT_DROPPED - 1) :], message_id]


KEPT_DROPPED = 20
"""Refused message ids a board keeps per thread (each is removed by the thread's next turn)."""

TABLE = """CREATE TABLE IF NOT EXISTS pivotal_turns (
    thread_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    stop TEXT NOT NULL DEFAULT '',
    said TEXT NOT NULL DEFAULT '',
    said_at DOUBLE PRECISION NOT NULL DEFAULT 0,
    started_from TEXT NOT NULL DEFAULT '',
    dropped TEXT NOT NULL DEFAULT ''
)"""
"""One row per thread; times in Unix seconds of the database's clock (`expires_at` 0 once released)."""
READ = (
    "SELECT owner, expires_at - {now}, stop, said, {now} - said_at, started_from, dropped "
    "FROM pivotal_turns WHERE thread_id = ?"
)
INSERT = (
    "INSERT INTO pivotal_turns (thread_id, owner, expires_at, stop, said, said_at, started_from, dropped) "
    "VALUES (?, ?, {now} + ?, '', '', 0, '', '') ON CONFLICT (thread_id) DO NOTHING"
)
TAKE = (
    "UPDATE pivotal_turns SET owner = ?, expires_at = {now} + ?, stop = '', started_from = '' "
    "WHERE thread_id = ? AND owner = ?"
)
RENEW = "UPDATE pivotal_turns SET expires_at = {now} + ? WHERE thread_id = ? AND owner = ? AND expires_at > 0"
"""A hold that ran out is renewed while nobody took it (its owner was slow, not gone); a released one never is."""
RELEASE = "UPDATE pivotal_turns SET expires_at = 0, stop = '' WHERE thread_id = ? AND owner = ?"
STOP = "UPDATE pivotal_turns SET stop = ? WHERE thread_id = ? AND owner = ?"
OPENED = "UPDATE pivotal_turns SET started_from = ? WHERE thread_id = ? AND owner = ?"
SAID = "UPDATE pivotal_turns SET said = ?, said_at = {now} WHERE thread_id = ? AND owner = ?"
DROP = "UPDATE pivotal_turns SET dropped = ? WHERE thread_id = ?"


class SharedBoard:
    """The turns of every process using the checkpointer's database (LangGraph's async SQLite or Postgres saver)."""

    poll_s = SHARED_POLL_S

    def __init__(self, db: _Database) -> None:
        self.db = db

    async def read(self, thread: str) -> Row:
        found = await self.db.row(READ, (thread,))
        if found is None:
            return Row()
        owner, left, stop, said, age, started_from, dropped = found
        return Row(owner, float(left), stop, said, float(age), started_from, dropped.split())

    async def claim(self, thread: str, owner: str, ttl: float) -> bool:
        row = await self.read(thread)
        if not row.owner:
            return await self.db.change(INSERT, (thread, owner, ttl)) == 1
        if row.running() and row.owner != owner:
            return False
        return await self.db.change(TAKE, (owner, ttl, thread, row.owner)) == 1

    async def renew(self, thread: str, owner: str, ttl: float) -> bool:
        return await self.db.change(RENEW, (ttl, thread, owner)) == 1

    async def release(self, thread: str, owner: str) -> None:
        try:
            await self.db.change(RELEASE, (thread, owner))
        except Exception as exc:  # noqa: BLE001 — unreleased, the hold simply runs out
            logger().info("turn_release_failed", thread_id=thread, error=f"{type(exc).__name__}: {exc}")

    async def ask_stop(self, thread: str, owner: str, kind: str) -> None:
        await self.db.change(STOP, (kind, thread, owner))

    async def opened(self, thread: str, owner: str, said: str, started_from: str) -> None:
        await self.db.change(OPENED, (started_from, thread, owner))
        if said:
            await self.db.change(SAID, (said, thread, owner))

    async def drop(self, thread: str, message_id: str) -> None:
        row = await self.read(thread)
        await self.db.change(DROP, (" ".join([*row.dropped[-(KEPT_DROPPED - 1) :], message_id]), thread))


_local: dict[int, tuple[Any, LocalBoard]] = {}
_local_lock = threading.Lock()
READY = "_pivotal_turns"
"""The saver's attribute holding its shared board once the table is there."""


async def board_for(saver: BaseCheckpointSaver) -> Board:
    """The board of the threads in `saver`: shared through its database where other processes can
    reach it, else this process's own for that checkpointer object.
    """
    if (known := getattr(saver, READY, None)) is not None:
        return known
    db = await _database(saver)
    if db is None:
        with _local_lock:
            kept = _local.get(id(saver))
            if kept is None or kept[0] is not saver:
                kept = _local[id(saver)] = (saver, LocalBoard())  # the saver kept too: its id stays its own
            return kept[1]
    if db.postgres:
        await _create_postgres(db, TABLE)
    else:
        await db.change(TABLE, ())
    board = SharedBoard(db)
    setattr(saver, READY, board)
    return board


def shared(saver: BaseCheckpointSaver) -> bool:
    """Whether `saver`'s threads are on a board in its database (async savers only)."""
    return type(saver).__name__ in ("AsyncSqliteSaver", "AsyncPostgresSaver")


_running: contextvars.ContextVar[Turn | None] = contextvars.ContextVar("pivotal_turn", default=None)
"""The turn a graph run in this context holds: its nodes ask it, at their start, whether to stop."""


def running_turn() -> Turn | None:
    return _running.get()


def hold(turn: Turn | None) -> contextvars.Token[Turn | None]:
    return _running.set(turn)


def let_go(token: contextvars.Token[Turn | None]) -> None:
    with suppress(ValueError):  # a stream abandoned mid-way is closed later, from another context
        _running.reset(token)


async def keep(turn: Turn) -> None:
    """Renew a shared board's hold while the graph's turn runs (a node may outlast PIVOTAL_LEASE_S)."""
    if not isinstance(turn.board, SharedBoard):
        return
    while True:
        await asyncio.sleep(turn.ttl / 3)
        with suppress(Exception):  # a blip of the database: the next renewal tries again
            await turn.board.renew(turn.thread, turn.owner, turn.ttl)


# --- Pivotal's graph: a turn is one invocation -------------------------------------------------
async def graph_arrival(
    saver: BaseCheckpointSaver | None,
    input: object,
    config: RunnableConfig | None,
    context: Context,
    node: bool = False,
) -> tuple[Turn | None, Any]:
    """The turn an invocation of Pivotal's graph holds (None where there is no thread to hold: no
    checkpointer, no thread id, or a runner's run that holds the thread's lease), and the config it
    runs with: a rollback's forks from where the stopped turn started.

    `node`: run as a node of a parent graph, on the parent's thread. The parent's resume runs the node
    again with the same input, so no repeat is told there; and the node has no checkpoint of its own
    before the stopped turn, so a rollback goes on as an interrupt does.
    """
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if saver is None or thread is None or holding(thread):
        return None, config
    board = await board_for(saver)
    said = said_by(input)
    ttl = settings().lease_s if isinstance(board, SharedBoard) else math.inf
    window = 0.0 if node else context.repeat_window_s
    turn = await arrive(
        board, str(thread), owner_token(), said=said, policy=context.double_text, window=window, ttl=ttl
    )
    try:
        if turn.rollback_to is not None and not node:
            start = turn.rollback_to or await _oldest(saver, str(thread))
            if start:
                configurable = {**configurable, "checkpoint_ns": "", "checkpoint_id": start}
                config = {**(config or {}), "configurable": configurable}
        started = "" if node else configurable.get("checkpoint_id") or await _head(saver, str(thread))
        await board.opened(str(thread), turn.owner, said, started)
    except BaseException:
        await turn.release()
        raise
    return turn, config


def said_by(input: object) -> str:
    """The digest of what a graph's input asks (its task, else its last human message); "" for a resume or replay."""
    if not isinstance(input, Mapping):
        return ""
    if task := input.get("task"):
        return digest(["task", {k: v for k, v in task.items() if k != "id"} if isinstance(task, Mapping) else task])
    try:
        messages = convert_to_messages(input.get("messages") or [])
    except (ValueError, TypeError, NotImplementedError):
        return ""
    human = [m for m in messages if isinstance(m, HumanMessage)]
    return digest(["message", human[-1].text]) if human else ""


async def _head(saver: BaseCheckpointSaver, thread: str) -> str:
    """The newest checkpoint of the thread's own graph ("" for a new thread)."""
    query: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    try:
        found = await saver.aget_tuple(query)
    except NotImplementedError:  # a synchronous saver (SqliteSaver)
        found = await asyncio.to_thread(saver.get_tuple, query)
    return found.config["configurable"].get("checkpoint_id", "") if found else ""


async def _oldest(saver: BaseCheckpointSaver, thread: str) -> str:
    """The thread's first checkpoint (its first input): where a rollback of the thread's first turn goes back to."""
    query: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    try:
        ids = [item.config["configurable"]["checkpoint_id"] async for item in saver.alist(query)]
    except NotImplementedError:
        ids = await asyncio.to_thread(lambda: [i.config["configurable"]["checkpoint_id"] for i in saver.list(query)])
    return min(ids, default="")
