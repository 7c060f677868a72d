"""Pivotal's critic as LangChain agent middleware: every tool call of a `create_agent` agent is
pre-checked and reviewed before it runs.

The verdict comes from the graph's own critic (pivotal.nodes.critic.review: the same prompt,
pre-check, advisory rule and irreversible rule). Approve runs the tool; revise and reject do not:
the critic's text goes back to the model as the tool's result, so it proposes again. What the
critic decided is kept in the agent's state (`pivotal_reviews`, secrets blanked), so send-backs are
bounded per step, an irreversible call runs at most once per thread, and counts add up like the graph's.

The review happens when the model proposes the calls (`after_model`, as LangChain's
HumanInTheLoopMiddleware reviews them): the verdicts, with the rules they were given under, are in
the checkpoint before any tool runs (`pivotal_verdicts`). The tool wrapper only enforces them, asks a
person where those rules say so, and applies the once-guard at the moment of running. So a resume in
another process, with another `PivotalCritic`, pays no critic call again and follows the rules the
pause was made under; and a fork, which re-runs the tools, meets the guard keyed on the world: every
checkpoint of the thread, all branches and turns (`pivotal.core.environments.once.thread_record`).
A fork that meets a tool call that already ran there, any tool, gets the result recorded then and
runs nothing (`_executed`); a call whose tool raised changed nothing and runs again.
"""

import asyncio
import dataclasses
import hashlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain.agents.middleware.human_in_the_loop import ToolApprovalRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command, interrupt
from langgraph.typing import ContextT
from typing_extensions import TypedDict

from pivotal import prompts
from pivotal.core.context import SAFETY_FIELDS, Context, model_change, model_identity, refuse_loosening, run_context
from pivotal.core.environments import Environment, check_action
from pivotal.core.environments.base import check_approvals, check_names
from pivotal.core.environments.once import (
    REVIEWS,
    VERDICTS,
    ThreadRecord,
    irreversible as env_irreversible,
    needs_person,
    repeat_reason,
    thread_record,
    verdict_key,
)
from pivotal.core.environments.tools import Call, ToolEnvironment, ToolLike, as_tools
from pivotal.core.errors import PivotalError
from pivotal.core.models.factory import check_specs
from pivotal.core.schemas import Verdict
from pivotal.core.secrets import redact_tree
from pivotal.core.state import Critique, Observation, Proposal, Spent, Step, add_counts
from pivotal.core.task import Task
from pivotal.graphs.blocking import run_blocking
from pivotal.memory.lesson import lessons_block
from pivotal.middleware.busy import ends_turn, pausing, resumed, running, turn_opens, turn_over
from pivotal.middleware.nested import (
    Guard,
    InnerReview,
    NestedRefusal,
    checkpointed,
    guarding,
    intend,
    keep,
    kept,
    running_loop,
    unguard,
    withdraw,
)
from pivotal.middleware.observe import noted, watched
from pivotal.middleware.stop import turn_stop
from pivotal.nodes.critic import COUNTER, review
from pivotal.nodes.human_approval import AGAIN, QUESTION, person_said
from pivotal.prompts import clip, show


class Review(TypedDict, total=False):
    """One reviewed tool call: what was proposed, the verdict, and whether it ran."""

    tool_call_id: str
    action: str
    arguments: dict[str, Any]
    decision: str
    source: str
    diagnosis: str
    revision: str
    executed: bool
    step: str
    """Where the call was proposed: its turn, reply and place in the reply (`_step`)."""
    replayed: bool
    """The call had run before (a fork met it again): its recorded result was returned, nothing ran."""
    observation: str
    counters: dict[str, Any]
    usage: dict[str, Any]


class Rules(TypedDict, total=False):
    """The rules a verdict was given under, kept with it: a resume elsewhere follows these."""

    require_approval_for: list[str]
    irreversible: list[str]
    critic: str


class Ruling(TypedDict, total=False):
    """The review of one proposed call, made when the model proposed it (`pivotal_verdicts`)."""

    decision: str
    confidence: float
    source: str
    diagnosis: str
    revision: str
    repeat: str
    """The once-guard's reason when the call repeats one that ran: only a person's re-approval runs it."""
    counters: dict[str, Any]
    usage: dict[str, Any]
    rules: Rules
    observed: Observation
    """What the critic said where it only watches the tool (`observe_only`; middleware/observe.py)."""


class ToolApproval(ToolApprovalRequest):
    """The pause before a tool call a person must approve: LangChain's per-call request, which its UIs
    read (`description` is the question), with the names the graph's pause uses and the critic's view.
    Answered as the graph's is (pivotal.nodes.human_approval `Reply`), an `edit` included.
    """

    question: str
    action: str
    arguments: dict[str, Any]
    critic: str
    repeat: NotRequired[str]
    """The once-guard's reason, when the call repeats one that ran: only `"repeat": true` re-approves it."""


ToolHandler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
"""What runs the tool call (or the next middleware's wrapper), as LangChain hands it to `wrap_tool_call`."""


def _append(current: list[Review] | None, update: list[Review] | None) -> list[Review]:
    return [*(current or []), *(update or [])]


def _merge(current: dict[str, Ruling] | None, update: dict[str, Ruling] | None) -> dict[str, Ruling]:
    return {**(current or {}), **(update or {})}


class CriticState(AgentState):
    pivotal_reviews: NotRequired[Annotated[list[Review], _append]]
    pivotal_verdicts: NotRequired[Annotated[dict[str, Ruling], _merge]]
    pivotal_stop: NotRequired[str]
    """Why the agent was stopped (middleware/stop.py), when it was."""
    pivotal_critic_model: NotRequired[str]
    """The critic model that reviews this step's calls: a paused approval resumes only with it."""


@dataclass
class _World:
    """What a `sim` critic reads of the world (pivotal.core.models.world.World)."""

    env: Environment
    applied: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    first_observation: str = ""


class PivotalCritic(AgentMiddleware[CriticState, ContextT]):
    """`create_agent(model, tools, middleware=[PivotalCritic("openai:gpt-4o-mini")])`.

    `model`: the critic's model, a spec string (`sim`, `openai:…`) or a chat model object.
    `irreversible`: tool names that run only on a confident approval and at most once per thread.
    `require_approval_for`: tool names (or "irreversible", "*") that pause for a person after the
    critic approves (LangGraph `interrupt`; needs a checkpointer). `environment`: an application's
    own Environment for the pre-check (`check`) and the action list; else the agent's tools.
    `tools`: the agent's tools (LangChain tools or plain functions, as `create_agent` takes them), so a
    name in `irreversible` or `require_approval_for` that is none of them is refused here; without them
    (LangChain shows middleware the tools only at a model call) it is refused at the agent's first model
    call, before any tool can run.
    Any other `Context` field (`max_critique_rounds`, `critic_veto`, `precheck`, ...) as a keyword.
    A run's context (`invoke(..., context={...})`) may tighten the safety settings, never loosen them.
    """

    state_schema = CriticState

    def __init__(
        self,
        model: str | BaseChatModel = "",
        *,
        irreversible: Sequence[str] = (),
        require_approval_for: Sequence[str] | None = (),
        environment: Environment | None = None,
        tools: Sequence[ToolLike] | None = None,
        **context: Any,
    ) -> None:
        super().__init__()
        # Context checks the names' shape (None is none; a bare name is refused, not read as letters)
        approvals: dict[str, Any] = {"require_approval_for": require_approval_for}
        check_specs(model)  # its form now; its key and endpoint at the first review
        self._own = Context(critic_model=model, memory=False, **context, **approvals)
        self.irreversible = list(irreversible)
        self.environment = environment
        self._tools: dict[str, BaseTool] = {t.name: t for t in as_tools(tools or ())}
        self._checked = False
        self._known: list[str] = []
        """The tools (or the environment's actions) the safety names were checked against: a run's too."""
        self._marked: list[str] = []
        if environment is not None:
            if not callable(getattr(environment, "describe_actions", None)):
                raise PivotalError(
                    f"environment must be an Environment (describe_actions), not {type(environment).__name__}"
                )
            self._check_names([spec.name for spec in environment.describe_actions()], what="action")
        elif tools is not None:
            self._check_names(list(self._tools))
        self._claims: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        """Calls let through per thread, by tool call id: the calls of one model reply run side by side,
        each seeing the state from before any of them, so the once guard also asks this."""
        self._lock = threading.Lock()

    # --- the run's settings: its context may tighten the critic's own, never loosen them -------
    @property
    def context(self) -> Context:
        """The settings this run goes by: the critic's own, with the safety settings the run's context
        names (`invoke(..., context=...)`, a parent graph's; a dict, a Context or any object with
        those attributes) where they tighten them, as Pivotal's graph does. Read from LangGraph's
        runtime wherever a hook or tool runs, so the verdicts record the run's rules.
        """
        try:
            runtime = get_runtime()
        except RuntimeError:  # outside a run: construction
            return self._own
        run = run_context(getattr(runtime, "context", None), self._own, SAFETY_FIELDS)
        refuse_loosening(run, self._own)
        if run is not None and self._known:
            self._check_run_names(run)
        return run or self._own

    def _check_run_names(self, run: Context) -> None:
        """The approvals and observed actions name real tools, the critic's own and a run's tightening
        alike: a misspelt approval would tighten nothing, and the real tool would run unasked. Checked
        once the agent's tools are known (built with them, or from the first model call on), before
        any of them runs.
        """
        what = "action" if self.environment is not None else "tool"
        check_approvals(run.require_approval_for, self._known, what=what, irreversible=self._marked)
        check_names("observe_only", [n for n in run.observed_actions() if n != "*"], self._known, what=what)

    # --- the hard stop: a turn's bounds (middleware/stop.py) --------------------------------
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: CriticState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        """Also the first hook of a turn: a run context that loosens the safety settings is refused
        here (reading `self.context`), before the model is asked or any tool runs; a resumed tool
        call is refused where its wrapper reads them. No hook of its own: a node, and a checkpoint,
        more per turn. A turn holds its thread from here under `double_text` (middleware/busy.py).
        """
        return run_blocking(self._before_model, state)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: CriticState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        return await self._before_model(state)

    async def _before_model(self, state: CriticState) -> dict[str, Any] | None:
        context = self.context
        opened = await turn_opens(state, context)
        if stop := turn_stop(state, context):
            await turn_over(state)
            return stop
        return opened

    # --- a paused approval resumes with the critic it paused with -----------------------------
    def _same_critic(self, state: Mapping[str, Any]) -> None:
        paused, allowed = state.get("pivotal_critic_model"), self.context.allow_other_models
        if why := model_change("critic_model", paused, self.context.model_for("critic"), allowed, "PivotalCritic(...)"):
            raise PivotalError(why)

    def _critic_id(self) -> str:
        model = self.context.model_for("critic")
        return model_identity(model) if isinstance(model, BaseChatModel) else model

    # --- the agent's tools, as the model sees them ------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest[ContextT], handler: Callable[[ModelRequest[ContextT]], ModelResponse]
    ) -> ModelResponse:
        self._learn_tools(request)
        try:
            with running(request.state):
                return handler(request)
        except Exception:
            run_blocking(turn_over, request.state)  # the turn ends here: its thread is free
            raise

    async def awrap_model_call(
        self, request: ModelRequest[ContextT], handler: Callable[[ModelRequest[ContextT]], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        self._learn_tools(request)
        try:
            with running(request.state):
                return await handler(request)
        except Exception:
            await turn_over(request.state)
            raise

    def _learn_tools(self, request: ModelRequest[ContextT]) -> None:
        self._tools.update({t.name: t for t in request.tools if isinstance(t, BaseTool)})
        if not self._checked:
            given = [t.get("name") for t in request.tools if isinstance(t, dict)]  # a provider's built-in tools
            self._check_names([*self._tools, *(name for name in given if isinstance(name, str))])

    def _check_names(self, known: list[str], what: str = "tool") -> None:
        """The safety settings name real tools (or the environment's actions): a typo would let the
        real one run unguarded. Checked once; the first model call is the earliest the agent's tools show.
        """
        check_names("irreversible", self.irreversible, known, what=what)
        marked = [s.name for s in self.environment.describe_actions() if s.irreversible] if self.environment else []
        self._known, self._marked = list(known), [*self.irreversible, *marked]
        self._check_run_names(self._own)
        self._checked = True

    # --- the review, when the model proposes the calls ----------------------------------------
    def after_model(self, state: CriticState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        with running(state):
            update = self._with_critic(state, run_blocking(self._review_reply, state))
        if ends_turn(state):
            run_blocking(turn_over, state)
        return update

    async def aafter_model(self, state: CriticState, runtime: Runtime[ContextT]) -> dict[str, Any] | None:
        with running(state):
            update = self._with_critic(state, await self._review_reply(state))
        if ends_turn(state):
            await turn_over(state)
        return update

    def _with_critic(self, state: Mapping[str, Any], update: dict[str, Any] | None) -> dict[str, Any] | None:
        """The review's update, with the critic model it was made under when that changed."""
        critic = self._critic_id()
        if state.get("pivotal_critic_model") == critic:
            return update
        return {**(update or {}), "pivotal_critic_model": critic}

    async def _review_reply(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The verdicts on the last reply's calls, into the checkpoint before any of them runs.

        A call already judged, in this branch or another (a fork re-running this hook), keeps its
        verdict: the critic is paid once per proposed call.
        """
        messages = state.get("messages") or []
        reply = messages[-1] if messages and isinstance(messages[-1], AIMessage) else None
        known = state.get(VERDICTS) or {}
        calls = [c for c in (reply.tool_calls if reply else []) if _key(c) not in known]
        if not calls:
            return None
        record = await thread_record()
        env = self._env()
        rulings = await asyncio.gather(*(self._rule(state, call, env, record) for call in calls))
        return {VERDICTS: {_key(call): ruling for call, ruling in zip(calls, rulings, strict=True)}}

    async def _rule(
        self, state: Mapping[str, Any], call: Mapping[str, Any], env: Environment, record: ThreadRecord
    ) -> Ruling:
        reviews = state.get(REVIEWS) or []
        done = _uncompensated(env, list(_ran(reviews, record).values()))
        pending = _pending(reviews)
        rules = self._rules(env)
        if reason := repeat_reason(env, call["name"], call["args"], done):
            return _ruling(_refusal(reason), "precheck", {}, rules, repeat=reason)
        if (earlier := record.verdicts.get(_key(call))) is not None:
            return cast(Ruling, earlier)
        if _exhausted(pending, self.context):
            return _ruling(
                _refusal(f"{len(pending)} proposals were turned down at this step; {STOP}"), "none", {}, rules
            )
        proposal: Proposal = {"action": call["name"], "arguments": call["args"], "thought": _thought(state)}
        verdict, source, updates = await review(
            self.context,
            {"run_id": _thread(get_config())},
            env,
            proposal,
            prompt=lambda: self._prompt(state, env, proposal, pending),
            world=_World(env, done, _goal(state)),
        )
        verdict, source, observed = watched(self.context, call, verdict, source)
        return noted(_ruling(verdict, source, updates, rules), observed)

    def _rules(self, env: Environment) -> Rules:
        return {
            "require_approval_for": list(self.context.require_approval_for),
            "irreversible": sorted(s.name for s in env.describe_actions() if s.irreversible),
            "critic": self._critic_id(),
        }

    # --- each tool call: enforce the verdict ----------------------------------------------------
    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage | Command[Any]:
        with running(request.state), _raised_redacted():  # the turn holds its thread while the call runs
            return self._tool_call(request, handler)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage | Command[Any]:
        with running(request.state), _raised_redacted():
            return await self._atool_call(request, handler)

    def _tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        self._same_critic(request.state)
        ruling, record = run_blocking(self._ruling, request)
        if isinstance(ruling, str):
            return _replayed(request, record, ruling)
        return self._act(request, ruling, record, handler)

    async def _atool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        self._same_critic(request.state)
        ruling, record = await self._ruling(request)
        if isinstance(ruling, str):
            return _replayed(request, record, ruling)
        decided = self._act(request, ruling, record, handler)
        return await decided if asyncio.iscoroutine(decided) else decided

    async def _ruling(self, request: ToolCallRequest) -> tuple[Ruling | str, ThreadRecord]:
        """The call's recorded verdict and what the thread executed; the id it ran under when this very
        call already ran in the thread (`_executed`: a fork met it again), whatever the tool.
        A call no review hook saw (a state written past it: `update_state(..., as_node=...)`) is
        reviewed here, as a first run's would be.
        """
        record = await thread_record(getattr(request.runtime, "config", None) or {})
        if (earlier := _executed(request, record)) is not None:
            return earlier, record
        ruling = (request.state.get(VERDICTS) or {}).get(_key(request.tool_call))
        if ruling is None:
            env = self._env(request.tool)
            ruling = await self._rule(request.state, request.tool_call, env, record)
        return ruling, record

    def _act(
        self,
        request: ToolCallRequest,
        ruling: Ruling,
        record: ThreadRecord,
        handler: Callable,
        run: Callable[..., Any] = run_blocking,
    ) -> Any:
        """Run, pause for a person, or send the critic's words back: a Command, or an awaitable of one.
        `run`: how a sync caller awaits (the intent's write), on the loop the checkpointer lives on.
        """
        call = request.tool_call
        entry = _entry(call, ruling)
        rules = ruling.get("rules") or {}
        env = self._env(request.tool, rules.get("irreversible") or [])
        wanted = [*self.context.require_approval_for, *(rules.get("require_approval_for") or [])]
        person = needs_person(wanted, env, {"action": call["name"], "arguments": call["args"]})
        repeat = ruling.get("repeat") or self._repeat(request, record, env)
        if repeat and not (person and (ruling.get("repeat") or entry["decision"] == "approve")):
            entry = {**entry, **_refused(repeat)} if entry["decision"] == "approve" else entry
            repeat = ""  # no person to re-approve it: refused like any rejected call
        if entry["decision"] != "approve" and not repeat:
            pending = _pending(request.state.get(REVIEWS) or [])
            if not _exhausted(pending, self.context, entry["source"]):
                return _sent_back(request, entry)
            if not self._best_effort(request, entry, env):
                return _sent_back(request, {**entry, "revision": f"{entry['revision']} (last round: {STOP})"})
            entry = {**entry, "diagnosis": f"run as the best revised proposal: {entry['diagnosis']}"}
        again = False
        if person:
            request, entry, again = self._ask_person(request, entry, env, repeat)
            if entry["decision"] != "approve":
                return _sent_back(request, entry)
            if repeat and not again:
                return _sent_back(request, {**entry, **_refused(f"{repeat}. {AGAIN}")})
        if reason := self._claim(request, record, env, again):
            return _sent_back(request, {**entry, **_refused(reason)})
        within = _step(request.state, call["id"] or "")
        loop, config = running_loop(), getattr(request.runtime, "config", None) or {}
        guard = Guard(self._inner_review(request), call["id"] or "", loop)  # middleware/nested.py
        intent = {**entry, "step": within} if env_irreversible(env, call["name"]) and checkpointed(config) else None
        token, guarded = _WITHIN.set(within), guarding(guard)
        try:
            if intent is not None and loop is None:
                run(intend, config, intent)  # the intent is in the database before the tool starts
            result = handler(request)
            if intent is not None and loop is not None:
                result = _after(intend(config, intent), result, withdraw(config, intent))
        except NestedRefusal as refused:  # the inner agent let the refusal through: its run ended there
            return _sent_back(request, {**entry, **_refused(refused.message)}, guard.entries)
        except GraphBubbleUp:
            if intent is not None:
                run(withdraw, config, intent)
            raise
        finally:
            unguard(guarded)
            _WITHIN.reset(token)
        if asyncio.iscoroutine(result):
            return _after_async(result, request, entry, within, guard)
        return _recorded(result, request, entry, guard.entries)

    def _inner_review(self, outer: ToolCallRequest) -> InnerReview:
        """How a tool call of an agent that `outer` runs is reviewed (middleware/nested.py): as this
        critic's own, against the outer thread's record and the reviews made inside `outer` so far.
        """
        config = getattr(outer.runtime, "config", None) or {}

        def review(guard: Guard, call: ToolCall, description: str) -> str | None:
            if not guard.resumed:
                guard.resumed = True
                guard.run(kept, config, guard)
            state = {
                **outer.state,
                REVIEWS: [*(outer.state.get(REVIEWS) or []), *guard.entries],
                VERDICTS: {**(outer.state.get(VERDICTS) or {}), **guard.verdicts},
            }
            tool = self._tools.get(call["name"]) or _stand_in(call, description)
            inner = ToolCallRequest(tool_call=call, tool=tool, state=state, runtime=outer.runtime)
            ruling, record = guard.run(self._ruling, inner)
            if isinstance(ruling, str):  # this very call ran before (a paused delegation resumed)
                decided = _replayed(inner, record, ruling)
            else:
                guard.verdicts[_key(call)] = ruling
                try:
                    decided = self._act(inner, ruling, record, lambda req: _let_through(req, call), guard.run)
                except GraphInterrupt:  # a person is asked: the reviews so far outlive the pause
                    guard.run(keep, config, guard)
                    raise
            update = cast(Mapping[str, Any], decided.update)
            guard.entries.extend(update[REVIEWS])
            [answer] = update["messages"]
            return None if answer.content == _LET_THROUGH else str(answer.content)

        return review

    def _repeat(self, request: ToolCallRequest, record: ThreadRecord, env: Environment) -> str:
        """Why the call repeats one that ran in the thread (or that this step already let through), or ""."""
        with self._lock:
            standing = self._standing(request, record, env)
        return repeat_reason(env, request.tool_call["name"], request.tool_call["args"], standing) or ""

    def _claim(self, request: ToolCallRequest, record: ThreadRecord, env: Environment, again: bool) -> str | None:
        """The once guard at the moment of running, over what the thread executed and what this step
        already let through; None claims the call for this thread. `again`: a person re-approved a repeat.
        """
        call = request.tool_call
        with self._lock:
            reason = repeat_reason(env, call["name"], call["args"], self._standing(request, record, env))
            if reason is None or again:
                self._claims.setdefault(_thread(getattr(request.runtime, "config", None)), {})[call["id"] or ""] = (
                    call["name"],
                    dict(call["args"]),
                )
                return None
            return reason

    def _standing(
        self, request: ToolCallRequest, record: ThreadRecord, env: Environment
    ) -> list[tuple[str, dict[str, Any]]]:
        """Under the lock: the thread's executed, uncompensated calls and this process's claims but the
        call's own. A claim stands until the thread's durable record holds its call: this turn's state
        is no record another turn reads (a message that stopped this turn goes on from another branch,
        maybe before this step's checkpoint is written), so a call in it alone stays claimed.
        """
        reviews = request.state.get(REVIEWS) or []
        claims = self._claims.setdefault(_thread(getattr(request.runtime, "config", None)), {})
        for known in [key for key in claims if _settled(key, reviews, record)]:
            del claims[known]
        ran = _ran(reviews, record)
        others = [c for key, c in claims.items() if key != request.tool_call["id"] and key not in ran]
        return _uncompensated(env, [*ran.values(), *others])

    def _best_effort(self, request: ToolCallRequest, entry: Review, env: Environment) -> bool:
        """After the last round a call the critic asked to revise runs, as in the graph
        (`on_critique_exhausted="execute_best"`); a rejected one never, nor an irreversible one.
        """
        irreversible = {s.name for s in env.describe_actions() if s.irreversible}
        return (
            self.context.on_critique_exhausted == "execute_best"
            and entry["decision"] == "revise"
            and entry["source"] in ("critic", "critic-advisory")
            and request.tool_call["name"] not in irreversible
        )

    def _ask_person(
        self, request: ToolCallRequest, entry: Review, env: Environment, repeat: str
    ) -> tuple[ToolCallRequest, Review, bool]:
        """`interrupt` with the call and the critic's view; HumanInTheLoopMiddleware's decisions read too.
        The flag: the person re-approved a repeat (`{"type": "approve", "repeat": true}`).
        """
        call = request.tool_call
        question = f"{repeat}. {AGAIN}" if repeat else QUESTION
        pause: ToolApproval = {
            "type": "tool_approval",
            "question": question,
            "description": question,
            "tool_call_id": call["id"] or "",
            "name": call["name"],
            "args": call["args"],
            "action": call["name"],
            "arguments": call["args"],
            "critic": entry["diagnosis"],
        }
        if repeat:
            pause["repeat"] = repeat
        pausing(request.state)  # a turn waiting for a person is not running (middleware/busy.py)
        said = person_said(interrupt(pause))
        resumed(request.state)
        if (arguments := said.edited) is not None:
            problem = check_action(env, call["name"], arguments)
            if problem:
                return (
                    request,
                    {**entry, "decision": "reject", "source": "human", "diagnosis": f"human edit: {problem}"},
                    False,
                )
            request = request.override(tool_call={**call, "args": arguments})
            return request, {**entry, "arguments": arguments, "source": "human", "diagnosis": "human: edited"}, False
        decision, reason = said.decision, said.reason
        counters = add_counts(entry["counters"], {"human_approved" if decision == "approve" else "human_rejected": 1})
        again = said.repeat
        return (
            request,
            {
                **entry,
                "decision": decision,
                "source": "human",
                "diagnosis": f"human: {reason}" if reason else "human",
                "revision": "" if decision == "approve" else (reason or "a person rejected this call"),
                "counters": counters,
            },
            again,
        )

    def _env(self, tool: BaseTool | None = None, marked: Sequence[str] = ()) -> Environment:
        """The application's environment, else the agent's tools with the irreversible ones named here
        and, for a call reviewed under other rules (another process's), those named there too.
        """
        if self.environment is not None:
            return self.environment
        tools = dict(self._tools)
        if tool is not None:
            tools.setdefault(tool.name, tool)
        named = {*self.irreversible, *marked}
        return ToolEnvironment(list(tools.values()), _undecided, irreversible=[n for n in tools if n in named])

    def _prompt(self, state: Mapping[str, Any], env: Environment, proposal: Proposal, pending: list[Review]) -> str:
        reviews = state.get("pivotal_reviews") or []
        limit = self.context.max_observation_chars
        return prompts.render(
            "critic",
            task=_goal(state),
            actions=show.actions(env.describe_actions()),
            earlier_turns="",
            history=show.history(_steps(reviews)),
            repeats="",  # the middleware keeps no world states to tell a repeat by
            held_here="",  # nor earlier attempts to remember a move from
            observation=clip(_observation(state), limit),
            lessons=lessons_block(state.get("pivotal_lessons") or []),
            reflections="",
            critiques=show.critiques([_critique(r) for r in pending]),
            proposal=show.call(proposal["action"], proposal.get("arguments") or {})
            + (f"\nreason given: {proposal['thought']}" if proposal.get("thought") else ""),
        )


def critic_counts(state: Mapping[str, Any]) -> dict[str, Any]:
    """The run's counters (approved, revised, rejected, prechecked, llm_calls, human_…) and usage per role."""
    totals: dict[str, Any] = {"counters": {}, "usage": {}}
    for entry in state.get(REVIEWS) or []:
        totals["counters"] = add_counts(totals["counters"], entry.get("counters"))
        totals["usage"] = add_counts(totals["usage"], entry.get("usage"))
    return totals


def _undecided(task: Task, calls: list[Call]) -> None:
    """The agent, not a verifier, decides when it is done (and no `finish` action is offered)."""
    return None


def _refusal(reason: str) -> Verdict:
    return Verdict(decision="reject", confidence=1.0, diagnosis=clip(reason, 400), revision="choose a different action")


def _refused(reason: str) -> Review:
    """What a review entry says when the once-guard refuses the call."""
    return {"decision": "reject", "source": "precheck", "diagnosis": clip(reason, 400),
            "revision": "choose a different action"}  # fmt: skip


def _ruling(verdict: Verdict, source: str, updates: Spent, rules: Rules, repeat: str = "") -> Ruling:
    counters = {COUNTER[verdict.decision]: 1, "prechecked": int(source == "precheck")}
    return {
        "decision": verdict.decision,
        "confidence": verdict.confidence,
        "source": source,
        "diagnosis": verdict.diagnosis,
        "revision": verdict.revision,
        "counters": add_counts(updates.get("counters"), counters),
        "usage": updates.get("usage") or {},
        "rules": rules,
        **({"repeat": repeat} if repeat else {}),
    }


def _entry(call: Mapping[str, Any], ruling: Ruling) -> Review:
    return {
        "tool_call_id": call["id"] or "",
        "action": call["name"],
        "arguments": call["args"],
        "decision": ruling["decision"],
        "source": ruling["source"],
        "diagnosis": ruling["diagnosis"],
        "revision": ruling.get("revision", ""),
        "executed": False,
        "counters": ruling.get("counters") or {},
        "usage": ruling.get("usage") or {},
    }


def _key(call: Mapping[str, Any]) -> str:
    return verdict_key(call.get("id") or "", call["name"], call.get("args") or {})


def _ran(reviews: list[Review], record: ThreadRecord) -> dict[str, tuple[str, dict[str, Any]]]:
    """The calls that ran in the thread by id, every branch and turn, oldest first, with those in flight
    when a process stopped (they may have acted); this branch's too (without a checkpointer, the only record).
    """
    ran = {**record.ran, **{i: (e["action"], e.get("arguments") or {}) for i, e in record.in_flight().items()}}
    for entry in reviews:
        if entry.get("executed"):
            ran.setdefault(entry.get("tool_call_id") or "", (entry["action"], entry["arguments"]))
    return ran


def _settled(call_id: str, reviews: list[Review], record: ThreadRecord) -> bool:
    """Whether a claimed call no longer needs its claim: a checkpoint of the thread holds its review,
    or it did not run (its tool raised); without a checkpointer, this turn's state is the only record.
    """
    if call_id in record.ran or call_id in record.settled:
        return True
    mine = next((r for r in reviews if r.get("tool_call_id") == call_id), None)
    return mine is not None and (record.saver is None or mine.get("executed") is False)


def _executed(request: ToolCallRequest, record: ThreadRecord) -> str | None:
    """The id under which this call already ran in the thread (any branch or process), or None: the
    same tool call id (a fork re-running the tools node), or the same tool and arguments at the same
    place of the same turn (a fork re-running the model, which names its calls anew), as the graph's
    executor takes a step it meets again (`executed_step`). A call that raised did not run.
    """
    call = request.tool_call
    call_id = call["id"] or ""
    mine = [r for r in request.state.get(REVIEWS) or [] if r.get("executed")]  # without a checkpointer, all
    ran = {**{r["tool_call_id"]: (r["action"], r["arguments"]) for r in mine}, **record.ran}
    if call_id and (call_id in ran or call_id in record.in_flight()):
        return call_id
    place = _step(request.state, call_id)
    if not place:
        return None
    earlier = [*(r["tool_call_id"] for r in mine if r.get("step") == place), *record.places.get(place, [])]
    same = verdict_key("", call["name"], call["args"])
    return next((e for e in earlier if e in ran and verdict_key("", *ran[e]) == same), None)


def _step(state: Mapping[str, Any], call_id: str) -> str:
    """A call's place: the turn (where its user message is and what it says: a fork from before the
    input gives the message a new id), which of the turn's replies with calls, and which call of it.
    """
    if not call_id:
        return ""
    within = _WITHIN.get()
    messages = state.get("messages") or []
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    said = str(messages[start].content) if start >= 0 else ""
    turn = f"{start}:{hashlib.sha256(said.encode()).hexdigest()[:16]}"
    replies = [m for m in messages[start + 1 :] if isinstance(m, AIMessage) and m.tool_calls]
    for place, reply in enumerate(replies):
        ids = [c.get("id") for c in reply.tool_calls]
        if call_id in ids:
            here = f"{turn}:{place}:{ids.index(call_id)}"
            return f"{within} > {here}" if within else here
    return ""


_WITHIN: ContextVar[str] = ContextVar("pivotal_within", default="")
"""The place (`_step`) of the tool call now running, while it runs: a sub-agent it runs under this
critic starts its turns afresh, so its calls' places begin with the delegating call's, else a second
delegation would meet the first's calls at the same places and be taken for a fork replaying them."""


REPLAYED = "the recorded result: this call was made before in this thread and is not made again"


def _replayed(request: ToolCallRequest, record: ThreadRecord, earlier: str) -> Command:
    """A call that ran before, met again (a fork): its recorded result, and its review with the counts
    of this branch's verdict on it (the branch paid for that review, and records no other entry of
    the call), so `critic_counts` adds each review once per branch.
    """
    call = request.tool_call
    ruling = (request.state.get(VERDICTS) or {}).get(_key(call)) or {}
    call_id = call["id"] or ""
    reviews = request.state.get(REVIEWS) or []
    mine = next((r for r in reviews if r.get("executed") and r.get("tool_call_id") == earlier), None)
    stopped = record.in_flight().get(earlier)
    observation = record.observations.get(earlier) or str((mine or stopped or {}).get("observation") or "")
    entry: Review = {
        "tool_call_id": call_id,
        "action": call["name"],
        "arguments": call["args"],
        "decision": "approve",
        "source": "replay",
        "diagnosis": REPLAYED,
        "revision": "",
        "executed": True,
        "replayed": True,
        "step": _step(request.state, call_id),
        "observation": observation,
        "counters": ruling.get("counters") or {},
        "usage": ruling.get("usage") or {},
    }
    message = ToolMessage(f"{observation}\n({REPLAYED})", name=call["name"], tool_call_id=call_id)
    return Command(update={"messages": [message], REVIEWS: [redact_tree(entry)]})


def _sent_back(request: ToolCallRequest, entry: Review, inner: Sequence[Mapping[str, Any]] = ()) -> Command:
    word = "rejected" if entry["decision"] == "reject" else "asks for a revision of"
    who = "a person" if entry["source"] == "human" else "the reviewer"
    text = f"Not run: {who} {word} {entry['action']}: {entry['diagnosis']}"
    if entry.get("revision"):
        text = f"{text.rstrip('.')}. What to do: {entry['revision']}"
    message = ToolMessage(text, name=entry["action"], tool_call_id=request.tool_call["id"] or "", status="error")
    return Command(update={"messages": [message], REVIEWS: [*(redact_tree(r) for r in inner), redact_tree(entry)]})


async def _after_async(
    result: Awaitable[Any], request: ToolCallRequest, entry: Review, within: str, guard: Guard
) -> Any:
    token, guarded = _WITHIN.set(within), guarding(guard)
    try:
        done = await result
    except NestedRefusal as refused:
        return _sent_back(request, {**entry, **_refused(refused.message)}, guard.entries)
    finally:
        unguard(guarded)
        _WITHIN.reset(token)
    return _recorded(done, request, entry, guard.entries)  # its place outside itself, as a sync call's


@contextmanager
def _raised_redacted() -> Iterator[None]:
    """A tool's exception leaves the critic as a copy of its own type with its secrets blanked: a tool's
    error quotes what it was given, and whoever reads it on keeps it (LangGraph's `__error__` write,
    a server's thread record and log, an app's own log). A pause or a hand-off (`GraphBubbleUp`)
    passes as it is; so does an exception that cannot be copied.
    """
    try:
        yield
    except GraphBubbleUp:
        raise
    except Exception as error:
        clean = redact_tree(error)
        if clean is error or not isinstance(clean, BaseException):
            raise
        raise clean from clean.__cause__  # the original's text stays out of the traceback


def _recorded(result: object, request: ToolCallRequest, entry: Review, inner: Sequence[Mapping[str, Any]] = ()) -> Any:
    """The tool's own result, with the review recorded beside it; a tool that returned its own Command
    (`write_todos`, a sub-agent's `task`) gets the review merged into the Command's update. `inner`:
    the reviews of the calls an agent inside the tool made (middleware/nested.py), recorded before it.
    """
    inner = [redact_tree(r) for r in inner]
    if isinstance(result, ToolMessage):
        ran = redact_tree(_ran_entry(request, entry, result))
        return Command(update={"messages": [result], REVIEWS: [*inner, ran]})
    if isinstance(result, Command) and result.graph is None and isinstance(result.update, Mapping):
        update = dict(result.update)
        call_id = request.tool_call["id"] or ""
        answer = next((m for m in update.get("messages") or [] if _answers(m, call_id)), None)
        ran = redact_tree(_ran_entry(request, entry, answer))
        update[REVIEWS] = [*_delegated(request, update), *inner, ran]
        return dataclasses.replace(result, update=update)
    return result  # a Command to a parent graph: no review entry, as no state of this agent changes


async def _after(written: Awaitable[None], result: Awaitable[Any], withdrawn: Coroutine[Any, Any, None]) -> Any:
    """The async tool call, started once its intent is written; withdrawn if it pauses."""
    await written
    try:
        return await result
    except GraphBubbleUp:
        await withdrawn
        raise
    finally:
        withdrawn.close()  # not awaited when the tool ended: no "never awaited" warning


_LET_THROUGH = "pivotal: let through"
"""What `_let_through` answers in place of an inner call's tool: the critic let it run; its tool runs next."""


def _let_through(request: ToolCallRequest, call: ToolCall) -> ToolMessage:
    """The handler `_act` runs an inner call with: its tool runs after the guard returns, as proposed,
    so a person's edit of its arguments cannot reach it and is refused.
    """
    call_id = call["id"] or ""
    if _canonical_args(request.tool_call["args"]) != _canonical_args(call["args"]):
        edit = "a person's edit cannot change the arguments of a sub-agent's call: reject it and say what to do instead"
        return ToolMessage(f"Not run: {edit}", name=call["name"], tool_call_id=call_id, status="error")
    return ToolMessage(_LET_THROUGH, name=call["name"], tool_call_id=call_id)


def _canonical_args(arguments: Mapping[str, Any]) -> str:
    return verdict_key("", "", dict(arguments))


def _stand_in(call: ToolCall, description: str) -> BaseTool:
    """A tool of the inner agent that the outer one lacks, as the review sees it: its name and
    description, any arguments (the inner agent's own tool checks them when it runs).
    """
    schema = {"type": "object", "properties": {name: {} for name in call["args"]}}
    return StructuredTool.from_function(
        func=lambda **_: "", name=call["name"], description=description or call["name"], args_schema=schema
    )


def _ran_entry(request: ToolCallRequest, entry: Review, answer: ToolMessage | None) -> Review:
    return {**entry, "executed": answer is None or answer.status != "error",
            "observation": str(answer.content)[:4000] if answer is not None else "",
            "step": _step(request.state, request.tool_call["id"] or "")}  # fmt: skip


def _answers(message: object, call_id: str) -> bool:
    return isinstance(message, ToolMessage) and message.tool_call_id == call_id


def _delegated(request: ToolCallRequest, update: Mapping[str, Any]) -> list[Review]:
    """The reviews a sub-agent under this critic made (Deep Agents' `task` hands back the sub-agent's
    `pivotal_reviews`, which began as a copy of this agent's): the new ones only, so each review is
    recorded, and counted, once.
    """
    known = {r.get("tool_call_id") for r in request.state.get(REVIEWS) or []}
    return [r for r in update.get(REVIEWS) or [] if r.get("tool_call_id") not in known]


STOP = "stop calling tools for this and tell the user what is left undone"


def _exhausted(pending: list[Review], context: Context, current: str = "") -> bool:
    """The graph's bounds on one step, counting the `current` verdict's source too: more than
    `max_critique_rounds` send-backs by the critic, or more pre-check bounces than allowed (cheap
    and certain, so they do not use up the critic's rounds).
    """
    sources = [r["source"] for r in pending] + ([current] if current else [])
    prechecked = sources.count("precheck")
    reviewed = sum(source not in ("precheck", "none") for source in sources)
    return reviewed > context.max_critique_rounds or prechecked > context.precheck_bounces_allowed()


def _uncompensated(env: Environment, executed: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls that ran and still stand: a later call that is an earlier one's declared compensation
    (`Compensating`, e.g. reverse_refund for refund) takes that one back, so it may run again.
    """
    undo = getattr(env, "compensation", None)
    standing: list[tuple[str, dict[str, Any]]] = []
    for call in executed:
        undone = next(
            (i for i in reversed(range(len(standing))) if callable(undo) and undo(*standing[i]) == call), None
        )
        if undone is None:
            standing.append(call)
        else:
            standing.pop(undone)
    return standing


def _pending(reviews: list[Review]) -> list[Review]:
    """The calls turned down since the last one that ran: this step's critiques."""
    since: list[Review] = []
    for entry in reviews:
        since = [] if entry.get("executed") else [*since, entry]
    return since


def _critique(entry: Review) -> Critique:
    return {
        "action": entry["action"],
        "arguments": entry["arguments"],
        "decision": entry["decision"],  # type: ignore[typeddict-item]
        "diagnosis": entry["diagnosis"],
        "revision": entry.get("revision", ""),
        "source": entry["source"],  # type: ignore[typeddict-item]
    }


def _steps(reviews: list[Review]) -> list[Step]:
    ran = [r for r in reviews if r.get("executed")]
    return [
        {"index": i, "action": r["action"], "arguments": r["arguments"], "observation": r.get("observation", "")}
        for i, r in enumerate(ran)
    ]


def _goal(state: Mapping[str, Any]) -> str:
    human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    return clip(human.text, 2000) if human else ""


def _observation(state: Mapping[str, Any]) -> str:
    result = next((m for m in reversed(state.get("messages") or []) if isinstance(m, ToolMessage)), None)
    return str(result.content) if result else "No tool has been called yet."


def _thought(state: Mapping[str, Any]) -> str:
    asked = next((m for m in reversed(state.get("messages") or []) if isinstance(m, AIMessage)), None)
    return clip(asked.text, 400) if asked and asked.text else ""


def _thread(config: RunnableConfig | Mapping[str, Any] | None) -> str:
    return str(((config or {}).get("configurable") or {}).get("thread_id") or "agent")
