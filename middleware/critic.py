"""Pivotal's critic as LangChain agent middleware: every tool call of a `create_agent` agent is
pre-checked and reviewed before it runs.

The verdict comes from the graph's own critic (pivotal.nodes.critic.review: the same prompt,
pre-check, advisory rule and irreversible rule). Approve runs the tool; revise and reject do not:
the critic's text goes back to the model as the tool's result, so it proposes again. What the
critic decided is kept in the agent's state (`pivotal_reviews`), so send-backs are bounded per step,
an irreversible call runs at most once per thread, and counts add up like the graph's.
"""

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse, hook_config
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from pivotal import prompts
from pivotal.core.context import Context, model_change, model_identity
from pivotal.core.environments import Environment, check_action
from pivotal.core.environments.once import needs_person, repeat_reason
from pivotal.core.environments.tools import ToolEnvironment
from pivotal.core.errors import PivotalError
from pivotal.core.schemas import Verdict
from pivotal.core.state import Critique, Proposal, Step, add_counts
from pivotal.graphs.blocking import run_blocking
from pivotal.memory.lesson import lessons_block
from pivotal.middleware.stop import turn_stop
from pivotal.nodes.critic import COUNTER, review
from pivotal.nodes.human_approval import QUESTION, read_reply
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
    observation: str
    counters: dict[str, Any]
    usage: dict[str, Any]


def _append(current: list[Review] | None, update: list[Review] | None) -> list[Review]:
    return [*(current or []), *(update or [])]


class CriticState(AgentState):
    pivotal_reviews: NotRequired[Annotated[list[Review], _append]]
    pivotal_stop: NotRequired[str]
    """Why the agent was stopped (middleware/stop.py), when it was."""
    pivotal_critic_model: NotRequired[str]
    """The critic model that reviews this step's calls: a paused approval resumes only with it."""


@dataclass
class _World:
    """What a `sim` critic reads of the world (pivotal.core.models.world.World)."""

    env: Any
    applied: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    first_observation: str = ""


class PivotalCritic(AgentMiddleware):
    """`create_agent(model, tools, middleware=[PivotalCritic("openai:gpt-4o-mini")])`.

    `model`: the critic's model, a spec string (`sim`, `openai:…`) or a chat model object.
    `irreversible`: tool names that run only on a confident approval and at most once per thread.
    `require_approval_for`: tool names (or "irreversible", "*") that pause for a person after the
    critic approves (LangGraph `interrupt`; needs a checkpointer). `environment`: an application's
    own Environment for the pre-check (`check`) and the action list; else the agent's tools.
    Any other `Context` field (`max_critique_rounds`, `critic_veto`, `precheck`, ...) as a keyword.
    """

    state_schema = CriticState

    def __init__(
        self,
        model: str | BaseChatModel = "",
        *,
        irreversible: Sequence[str] = (),
        require_approval_for: Sequence[str] = (),
        environment: Environment | None = None,
        **context: Any,
    ) -> None:
        super().__init__()
        self.context = Context(
            critic_model=model, require_approval_for=list(require_approval_for), memory=False, **context
        )
        self.irreversible = list(irreversible)
        self.environment = environment
        self._tools: dict[str, BaseTool] = {}
        self._verdicts: dict[str, tuple[Verdict, str, dict[str, Any]]] = {}
        """Verdicts by thread and call: a resumed interrupt re-enters the call and must not pay the critic again."""
        self._claims: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        """Calls let through per thread, by tool call id: the calls of one model reply run side by side,
        each seeing the state from before any of them, so the once guard also asks this."""
        self._lock = threading.Lock()

    # --- the hard stop: a turn's bounds (middleware/stop.py) --------------------------------
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: CriticState, runtime: Any) -> dict[str, Any] | None:
        return turn_stop(state, self.context)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: CriticState, runtime: Any) -> dict[str, Any] | None:
        return turn_stop(state, self.context)

    # --- a paused approval resumes with the critic it paused with -----------------------------
    def after_model(self, state: CriticState, runtime: Any) -> dict[str, Any] | None:
        critic = self._critic_id()
        return None if state.get("pivotal_critic_model") == critic else {"pivotal_critic_model": critic}

    async def aafter_model(self, state: CriticState, runtime: Any) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    def _same_critic(self, state: dict[str, Any]) -> None:
        paused, allowed = state.get("pivotal_critic_model"), self.context.allow_other_models
        if why := model_change("critic_model", paused, self.context.model_for("critic"), allowed, "PivotalCritic(...)"):
            raise PivotalError(why)

    def _critic_id(self) -> str:
        model = self.context.model_for("critic")
        return model_identity(model) if isinstance(model, BaseChatModel) else model

    # --- the agent's tools, as the model sees them ------------------------------------------
    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        self._learn_tools(request)
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> Any:
        self._learn_tools(request)
        return await handler(request)

    def _learn_tools(self, request: ModelRequest) -> None:
        self._tools.update({t.name: t for t in request.tools if isinstance(t, BaseTool)})

    # --- each tool call -----------------------------------------------------------------------
    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        self._same_critic(request.state)
        verdict, source, updates = run_blocking(self._verdict, request)
        return self._act(request, verdict, source, updates, handler)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        self._same_critic(request.state)
        verdict, source, updates = await self._verdict(request)
        decided = self._act(request, verdict, source, updates, handler)
        return await decided if asyncio.iscoroutine(decided) else decided

    async def _verdict(self, request: ToolCallRequest) -> tuple[Verdict, str, dict[str, Any]]:
        call = request.tool_call
        env = self._env(request)
        state = request.state
        reviews = state.get("pivotal_reviews") or []
        done = _uncompensated(env, [(r["action"], r["arguments"]) for r in reviews if r.get("executed")])
        pending = _pending(reviews)
        if reason := repeat_reason(env, call["name"], call["args"], done):
            return _refusal(reason), "precheck", {}
        if _exhausted(pending, self.context):
            return _refusal(f"{len(pending)} proposals were turned down at this step; {STOP}"), "none", {}
        # the same call of the same reply in the same thread: the one a person is answering about
        memo = json.dumps([_thread(request), call["id"], call["name"], call["args"]], sort_keys=True, default=str)
        if (known := self._verdicts.get(memo)) is not None:
            return known
        proposal: Proposal = {"action": call["name"], "arguments": call["args"], "thought": _thought(state)}
        found = await review(
            self.context,
            {"run_id": _thread(request)},
            env,
            proposal,
            prompt=lambda: self._prompt(state, env, proposal, pending),
            world=_World(env, done, _goal(state)),
        )
        if len(self._verdicts) > 4096:
            self._verdicts.clear()
        self._verdicts[memo] = found
        return found

    def _act(
        self, request: ToolCallRequest, verdict: Verdict, source: str, updates: dict[str, Any], handler: Callable
    ) -> Any:
        """Run, pause for a person, or send the critic's words back: a Command, or an awaitable of one."""
        call = request.tool_call
        entry: Review = {
            "tool_call_id": call["id"] or "",
            "action": call["name"],
            "arguments": call["args"],
            "decision": verdict.decision,
            "source": source,
            "diagnosis": verdict.diagnosis,
            "revision": verdict.revision,
            "executed": False,
            "counters": add_counts(
                updates.get("counters"), {COUNTER[verdict.decision]: 1, "prechecked": int(source == "precheck")}
            ),
            "usage": updates.get("usage") or {},
        }
        if verdict.decision != "approve":
            pending = _pending(request.state.get("pivotal_reviews") or [])
            if not _exhausted(pending, self.context, source):
                return _sent_back(request, entry)
            if not self._best_effort(request, verdict, source):
                return _sent_back(request, {**entry, "revision": f"{entry['revision']} (last round: {STOP})"})
            entry = {**entry, "diagnosis": f"run as the best revised proposal: {entry['diagnosis']}"}
        if needs_person(
            self.context.require_approval_for, self._env(request), {"action": call["name"], "arguments": call["args"]}
        ):
            request, entry = self._ask_person(request, entry, verdict)
            if entry["decision"] != "approve":
                return _sent_back(request, entry)
        if reason := self._claim(request):
            return _sent_back(request, {**entry, "decision": "reject", "source": "precheck", "diagnosis": reason,
                                        "revision": "choose a different action"})  # fmt: skip
        result = handler(request)
        if asyncio.iscoroutine(result):
            return _after_async(result, request, entry)
        return _ran(result, request, entry)

    def _claim(self, request: ToolCallRequest) -> str | None:
        """The once guard at the moment of running, over what ran before this step and what this step
        already let through; None claims the call for this thread.
        """
        call, env = request.tool_call, self._env(request)
        reviews = request.state.get("pivotal_reviews") or []
        recorded = {r.get("tool_call_id") for r in reviews}
        with self._lock:
            claims = self._claims.setdefault(_thread(request), {})
            for known in [key for key in claims if key in recorded]:
                del claims[known]  # in the state now: counted from there
            ran = [(r["action"], r["arguments"]) for r in reviews if r.get("executed")]
            reason = repeat_reason(env, call["name"], call["args"], _uncompensated(env, [*ran, *claims.values()]))
            if reason is None:
                claims[call["id"] or ""] = (call["name"], dict(call["args"]))
            return reason

    def _best_effort(self, request: ToolCallRequest, verdict: Verdict, source: str) -> bool:
        """After the last round a call the critic asked to revise runs, as in the graph
        (`on_critique_exhausted="execute_best"`); a rejected one never, nor an irreversible one.
        """
        irreversible = {s.name for s in self._env(request).describe_actions() if s.irreversible}
        return (
            self.context.on_critique_exhausted == "execute_best"
            and verdict.decision == "revise"
            and source in ("critic", "critic-advisory")
            and request.tool_call["name"] not in irreversible
        )

    def _ask_person(self, request: ToolCallRequest, entry: Review, verdict: Verdict) -> tuple[ToolCallRequest, Review]:
        """`interrupt` with the call and the critic's view; HumanInTheLoopMiddleware's decisions read too."""
        call = request.tool_call
        reply = interrupt(
            {
                "type": "tool_approval",
                "question": QUESTION,
                "tool_call_id": call["id"],
                "name": call["name"],
                "args": call["args"],
                "action": call["name"],
                "arguments": call["args"],
                "critic": verdict.diagnosis,
            }
        )
        if isinstance(reply, dict) and isinstance(reply.get("decisions"), list) and len(reply["decisions"]) == 1:
            reply = reply["decisions"][0]
        if isinstance(reply, dict) and reply.get("type") == "edit":
            edited = reply.get("edited_action") or {}
            arguments = dict(edited.get("args") or {})
            problem = check_action(self._env(request), call["name"], arguments)
            if problem:
                return request, {
                    **entry,
                    "decision": "reject",
                    "source": "human",
                    "diagnosis": f"human edit: {problem}",
                }
            request = request.override(tool_call={**call, "args": arguments})
            return request, {**entry, "arguments": arguments, "source": "human", "diagnosis": "human: edited"}
        decision, reason = read_reply(reply)
        counters = add_counts(entry["counters"], {"human_approved" if decision == "approve" else "human_rejected": 1})
        return request, {
            **entry,
            "decision": decision,
            "source": "human",
            "diagnosis": f"human: {reason}" if reason else "human",
            "revision": "" if decision == "approve" else (reason or "a person rejected this call"),
            "counters": counters,
        }

    def _env(self, request: ToolCallRequest) -> Any:
        if self.environment is not None:
            return self.environment
        tools = dict(self._tools)
        if request.tool is not None:
            tools.setdefault(request.tool.name, request.tool)
        return ToolEnvironment(
            list(tools.values()), _undecided, irreversible=[n for n in self.irreversible if n in tools]
        )

    def _prompt(self, state: dict[str, Any], env: Any, proposal: Proposal, pending: list[Review]) -> str:
        reviews = state.get("pivotal_reviews") or []
        limit = self.context.max_observation_chars
        return prompts.render(
            "critic",
            task=_goal(state),
            actions=show.actions(env.describe_actions()),
            earlier_turns="",
            history=show.history(_steps(reviews)),
            repeats="",  # the middleware keeps no world states to tell a repeat by
            observation=clip(_observation(state), limit),
            lessons=lessons_block(state.get("pivotal_lessons") or []),
            reflections="",
            critiques=show.critiques([_critique(r) for r in pending]),
            proposal=show.call(proposal["action"], proposal.get("arguments") or {})
            + (f"\nreason given: {proposal['thought']}" if proposal.get("thought") else ""),
        )


def critic_counts(state: dict[str, Any]) -> dict[str, Any]:
    """The run's counters (approved, revised, rejected, prechecked, llm_calls, human_…) and usage per role."""
    totals: dict[str, Any] = {"counters": {}, "usage": {}}
    for entry in state.get("pivotal_reviews") or []:
        totals["counters"] = add_counts(totals["counters"], entry.get("counters"))
        totals["usage"] = add_counts(totals["usage"], entry.get("usage"))
    return totals


def _undecided(task: Any, calls: Any) -> None:
    """The agent, not a verifier, decides when it is done (and no `finish` action is offered)."""
    return None


def _refusal(reason: str) -> Verdict:
    return Verdict(decision="reject", confidence=1.0, diagnosis=clip(reason, 400), revision="choose a different action")


def _sent_back(request: ToolCallRequest, entry: Review) -> Command:
    word = "rejected" if entry["decision"] == "reject" else "asks for a revision of"
    who = "a person" if entry["source"] == "human" else "the reviewer"
    text = f"Not run: {who} {word} {entry['action']}: {entry['diagnosis']}"
    if entry.get("revision"):
        text = f"{text.rstrip('.')}. What to do: {entry['revision']}"
    message = ToolMessage(text, name=entry["action"], tool_call_id=request.tool_call["id"] or "", status="error")
    return Command(update={"messages": [message], "pivotal_reviews": [entry]})


async def _after_async(result: Awaitable[Any], request: ToolCallRequest, entry: Review) -> Any:
    return _ran(await result, request, entry)


def _ran(result: Any, request: ToolCallRequest, entry: Review) -> Any:
    """The tool's own result, with the review recorded beside it."""
    if isinstance(result, ToolMessage):
        ran: Review = {**entry, "executed": result.status != "error", "observation": str(result.content)[:4000]}
        return Command(update={"messages": [result], "pivotal_reviews": [ran]})
    return result  # a tool that returned its own Command: its update stands (the review is not recorded)


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


def _uncompensated(env: Any, executed: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
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


def _goal(state: dict[str, Any]) -> str:
    human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    return clip(human.text, 2000) if human else ""


def _observation(state: dict[str, Any]) -> str:
    result = next((m for m in reversed(state.get("messages") or []) if isinstance(m, ToolMessage)), None)
    return str(result.content) if result else "No tool has been called yet."


def _thought(state: dict[str, Any]) -> str:
    asked = next((m for m in reversed(state.get("messages") or []) if isinstance(m, AIMessage)), None)
    return clip(asked.text, 400) if asked and asked.text else ""


def _thread(request: ToolCallRequest) -> str:
    config = getattr(request.runtime, "config", None) or {}
    return str((config.get("configurable") or {}).get("thread_id") or "agent")
