"""Review the proposed action before it can run: deterministic pre-check and repeat guard first, then the LLM critic."""

import uuid
from collections.abc import Awaitable, Callable

from langgraph.runtime import Runtime

from pivotal import prompts
from pivotal.core.context import Context
from pivotal.core.environments import Environment, check_action, deterministic
from pivotal.core.environments.live import attach
from pivotal.core.environments.observe import observed_counts, watch
from pivotal.core.environments.once import executed, executed_step, needs_person, repeat_reason, step_key
from pivotal.core.errors import describe_model_error
from pivotal.core.models.roles import ask_role
from pivotal.core.models.world import World
from pivotal.core.schemas import Decision, Verdict
from pivotal.core.state import (
    CriticUpdate,
    Critique,
    Observation,
    Observed,
    Proposal,
    Spent,
    State,
    VerdictSource,
    same_call,
    state_before,
    task_of,
)
from pivotal.core.task import Task
from pivotal.memory.lesson import lessons_block
from pivotal.prompts import show

COUNTER = {"approve": "approved", "revise": "revised", "reject": "rejected"}
IRREVERSIBLE_CONFIDENCE = 0.9
"""An irreversible action runs only on an approval at least this confident."""


async def critic(state: State, runtime: Runtime[Context]) -> CriticUpdate:
    context = runtime.context
    task = task_of(state)
    live, replayed = await attach(state["run_id"], task, state["trajectory"], runtime.context.step_timeout)
    proposal = state["proposal"] or {}
    source: VerdictSource
    spent: Spent
    if useless := _known_no_op(context, state, live.env, proposal):
        verdict, source, spent = _reject(useless), "precheck", {}
    else:
        verdict, source, spent = await review(
            context,
            state,
            live.env,
            proposal,
            prompt=lambda: _prompt(context, state, task, live.env, proposal),
            world=live,
            guard=lambda: _repeat(state, task, live.env, proposal),
        )
    updates: CriticUpdate = {**spent}
    verdict, source, observed = watch(context, proposal.get("action"), verdict, source)
    critique: Critique = {
        **proposal,
        "decision": verdict.decision,
        "confidence": verdict.confidence,
        "diagnosis": verdict.diagnosis,
        "revision": verdict.revision,
        "source": source,
        "review": uuid.uuid4().hex,
        **({"observed": observed} if observed else {}),
    }
    critiques = [*state.get("critiques", []), critique]
    chosen, reason = _decide(critiques, context)
    if verdict.decision == "reject" and source == "critic" and _final(live.env, proposal):
        chosen, reason = None, f"the critic rejected the final answer: {verdict.diagnosis}"
        updates["verified"] = False  # judged by a model, not checked by the environment
    if chosen is None and source == "guard" and needs_person(context.require_approval_for, live.env, proposal):
        chosen, reason = {**_proposal(critique), "repeat": verdict.diagnosis}, ""  # only a person may run it again
    if chosen is not None:
        chosen["needs_approval"] = needs_person(context.require_approval_for, live.env, chosen)
    counters = updates.setdefault("counters", {})
    counters.update({COUNTER[verdict.decision]: 1, "replayed": replayed, "prechecked": int(source == "precheck"),
                     "guarded": int(source == "guard"), "repeats": int(_proposed_here(state, proposal)),
                     **observed_counts(observed)})  # fmt: skip
    if observed:
        updates["critic_observed"] = [_observation(state, critique, observed)]
    return {"critiques": critiques, "chosen": chosen, "attempt_failed": reason, "stuck": bool(reason), **updates}


def _observation(state: State, critique: Critique, observed: Observed) -> Observation:
    """The thread's record of a watched review: the call, where it was proposed, the review that let it through."""
    return {
        **observed,
        "action": critique.get("action") or "",
        "arguments": critique.get("arguments") or {},
        "review": critique.get("review", ""),
        "run_id": state.get("run_id", ""),
        "key": step_key(state),
    }


async def review(
    context: Context,
    state: State,
    env: Environment,
    proposal: Proposal,
    *,
    prompt: Callable[[], str],
    world: World | None,
    guard: Callable[[], Awaitable[str | None]] | None = None,
) -> tuple[Verdict, VerdictSource, Spent]:
    """The verdict on one proposal: the pre-check, the repeat guard, then the critic model, then the
    irreversible rule.

    Shared by this node and the LangChain middleware (pivotal.middleware.critic), which render the
    same critic prompt from their own state (`prompt`, called only when the model is asked) and
    keep their own record of what ran (`guard`: the repeat rule over it, before any model).
    """
    verdict, source, updates = await _judge(context, state, env, proposal, prompt, world, guard)
    return _stricter_if_irreversible(verdict, env, proposal), source, updates


async def _judge(
    context: Context,
    state: State,
    env: Environment,
    proposal: Proposal,
    prompt: Callable[[], str],
    world: World | None,
    guard: Callable[[], Awaitable[str | None]] | None,
) -> tuple[Verdict, VerdictSource, Spent]:
    if not proposal.get("action"):
        why = describe_model_error(proposal.get("error") or "empty action")
        return _reject(f"the actor gave no valid proposal ({why})"), "actor", {}
    if context.precheck:
        problem = check_action(env, proposal["action"], proposal.get("arguments") or {})
        if problem:
            return _reject(problem), "precheck", {}
    if guard is not None and (repeat := await guard()):
        return _verdict("reject", 1.0, repeat, "take it as done and choose the next step"), "guard", {}
    if not context.critic:
        return Verdict(decision="approve", confidence=1.0, diagnosis="critic disabled"), "none", {}
    answer, updates = await ask_role(
        context,
        state,
        "critic",
        Verdict,
        user=prompt(),
        # The actor's system prompt, and its data blocks in the same order: a prefix-caching
        # backend (llama.cpp's slots, a provider's prompt cache) has read all that for the actor.
        system=prompts.system("step_system"),
        fallback=_reject("the critic gave no valid verdict; not executing an unreviewed action"),
        metadata={"pivotal_proposal": {"action": proposal["action"], "arguments": proposal.get("arguments") or {}}},
        world=world,
    )
    if answer.fallback:  # the reason says what failed: a timeout, an HTTP status, an unreadable reply
        why = f"unreadable reply ({answer.error}): {answer.said}" if answer.said else describe_model_error(answer.error)
        return _reject(f"the critic gave no valid verdict, so nothing was run: {why}"), "critic-fallback", updates
    if answer.value.decision == "reject" and not context.critic_has_veto() and not _irreversible(env, proposal):
        return _advisory(answer.value), "critic-advisory", updates
    return answer.value, "critic", updates


def _known_no_op(context: Context, state: State, env: Environment, proposal: Proposal) -> str:
    """Why the proposal cannot help, or "": in a deterministic environment, the same call already ran
    from this very state in this attempt and changed nothing, so it would change nothing again.

    Only a no-op is sent back, never a call that led back to an earlier state: going back through a
    state can be the only way on (out of a dead end), so that is a warning (`show.loops_here`) only.
    And only while the step has pre-check bounces left: a send-back never ends an attempt (the stuck
    path), which measured costing success where the actor moved on after one wasted step
    (benchmarks/bench_loops.py); past them the call goes to the critic as any other.
    """
    if context.loop_detection == "off" or not context.precheck or not deterministic(env) or not proposal.get("action"):
        return ""
    if _bounced(state.get("critiques", [])) >= context.precheck_bounces_allowed():
        return ""
    trajectory = state["trajectory"]
    now = state_before(state, len(trajectory))
    same = [
        step["index"]
        for step in trajectory[state.get("attempt_start", 0) :]
        if step.get("no_op") and now is not None and step.get("state") == now and same_call(step, proposal)
    ]
    if not same:
        return ""
    called = show.call(proposal["action"], proposal.get("arguments") or {})
    return f"`{called}` changed nothing from this same state at step {same[-1]}; it would change nothing again"


def _proposed_here(state: State, proposal: Proposal) -> bool:
    """Whether this call was proposed before from the state the world is in now, in this attempt
    (for this step, or for an earlier one that started from the same state), whether it ran or not.
    """
    trajectory = state["trajectory"]
    start = state.get("attempt_start", 0)
    now = state_before(state, len(trajectory))
    earlier = list(state.get("critiques", []))
    if now is not None:
        earlier += [
            c for s in trajectory[start:] if state_before(state, s["index"]) == now for c in s.get("verdicts", [])
        ]
    return any(c.get("action") and same_call(c, proposal) for c in earlier)


def _prompt(context: Context, state: State, task: Task, env: Environment, proposal: Proposal) -> str:
    return prompts.render(
        "critic",
        task=task.goal,
        actions=show.actions(env.describe_actions()),
        earlier_turns=show.earlier_turns(state.get("turns", [])),
        history=show.history(state["trajectory"]),
        repeats=show.repeats(state, loops=context.loop_detection != "off"),
        held_here=show.held(state, context.reuse_moves, context.retry),
        observation=state["observation"],
        lessons=lessons_block(state.get("lessons", [])),
        reflections=show.reflections(state.get("reflections", [])),
        critiques=show.critiques(state.get("critiques", [])),
        proposal=show.call(proposal["action"], proposal.get("arguments") or {})
        + (f"\nreason given: {proposal['thought']}" if proposal.get("thought") else ""),
    )


async def _repeat(state: State, task: Task, env: Environment, proposal: Proposal) -> str | None:
    """The guard, whatever the switches: a repeat of an executed irreversible call is never a model's to allow.

    Reads the thread's executed history only for an irreversible proposal (a fork shares the world).
    A replay's proposal that is the very step this run executed here is no repeat: the executor
    takes it as done (`executed_step`), and the branch goes on as the first run did.
    """
    if not _irreversible(env, proposal) or await executed_step(env, state, step_key(state), proposal):
        return None
    done, _ = await executed(env, state)
    return repeat_reason(env, proposal["action"], proposal.get("arguments") or {}, done, allow=task.allow_repeat)


def _advisory(verdict: Verdict) -> Verdict:
    """A reject from a critic without veto power still goes back to the actor, as a revise.

    Only for reversible actions: a reject of an irreversible one stays final whoever the critic is.
    """
    return _verdict(
        "revise",
        verdict.confidence,
        f"advisory reject: {verdict.diagnosis}".strip(),
        verdict.revision or "choose a different action",
    )


def _reject(reason: str) -> Verdict:
    return _verdict("reject", 1.0, reason, "choose a different, valid action")


def _verdict(decision: Decision, confidence: float, diagnosis: str, revision: str) -> Verdict:
    """A verdict the graph writes itself. Its text (a pre-check listing twenty action names, a
    prefix on the critic's own words) can outgrow the limit the reply schema sets for models:
    cut it to fit, never fail the run on it.
    """
    return Verdict(
        decision=decision,
        confidence=confidence,
        diagnosis=_fit(diagnosis, "diagnosis"),
        revision=_fit(revision, "revision"),
    )


def _fit(text: str, field: str) -> str:
    limit = next(rule.max_length for rule in Verdict.model_fields[field].metadata if hasattr(rule, "max_length"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _irreversible(env: Environment, proposal: Proposal) -> bool:
    return _marked(env, proposal, "irreversible")


def _final(env: Environment, proposal: Proposal) -> bool:
    """The proposal ends the task with the agent's own answer (no verifier checks it)."""
    return _marked(env, proposal, "final")


def _marked(env: Environment, proposal: Proposal, flag: str) -> bool:
    """The environment's ActionSpec for the proposed action carries `flag`."""
    return proposal.get("action") in {s.name for s in env.describe_actions() if getattr(s, flag)}


def _stricter_if_irreversible(verdict: Verdict, env: Environment, proposal: Proposal) -> Verdict:
    if verdict.decision == "approve" and _irreversible(env, proposal) and verdict.confidence < IRREVERSIBLE_CONFIDENCE:
        return _verdict(
            "reject",
            verdict.confidence,
            f"irreversible action approved with confidence {verdict.confidence:.2f} "
            f"< {IRREVERSIBLE_CONFIDENCE}: {verdict.diagnosis}",
            "propose a reversible action or gather more evidence first",
        )
    return verdict


def _decide(critiques: list[Critique], context: Context) -> tuple[Proposal | None, str]:
    """(proposal to execute, failure reason); neither means the actor proposes again.

    Bounded: at most max_critique_rounds send-backs by the critic, and max_precheck_bounces by the
    pre-check and the repeat guard (cheap and certain, so they do not use up the critic's rounds): the loop
    ends either way.
    """
    last = critiques[-1]
    if last["decision"] == "approve":
        return _proposal(last), ""
    prechecked = _bounced(critiques)
    reviewed = len(critiques) - prechecked
    if reviewed <= context.max_critique_rounds and prechecked <= context.precheck_bounces_allowed():
        return None, ""
    revisable = [c for c in critiques if c["decision"] == "revise" and c["source"] in ("critic", "critic-advisory")]
    if context.on_critique_exhausted == "execute_best" and revisable:
        return _proposal(revisable[-1]), ""
    return None, (
        f"no acceptable action after {len(critiques)} proposals; last verdict: {last['decision']} ({last['diagnosis']})"
    )


def _bounced(critiques: list[Critique]) -> int:
    """Send-backs by the pre-check and the repeat guard: they have a budget of their own."""
    return sum(c["source"] in ("precheck", "guard") for c in critiques)


def _proposal(critique: Critique) -> Proposal:
    return {
        "action": critique["action"],
        "arguments": critique.get("arguments") or {},
        "thought": critique.get("thought", ""),
        "compensates": critique.get("compensates"),
        "review": critique.get("review", ""),
    }
