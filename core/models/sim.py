"""`sim` chat models: real LangChain chat models that answer from an environment's oracle.

They let tests and benchmarks drive the same `with_structured_output` → tool-call → parser
path that hosted providers use, with a configurable error rate and a seed. Each reply is a
pure function of (seed, role, the prompt's data blocks), so results do not depend on scheduling,
and rewording a prompt's instructions does not reshuffle every seeded outcome.

The role comes from the call's metadata (`pivotal_role`), which the graph attaches to every
model call for tracing; the oracle is the run's environment, which the calling node gives for
the call (`pivotal.core.models.world`). No prompt parsing is involved.
"""

import asyncio
import copy
import hashlib
import json
import random
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.utils.function_calling import convert_to_openai_tool

from pivotal.core.environments import ActionSpec, Oracle, Restorable
from pivotal.core.environments.base import DistanceOracle, NoReturnOracle, action_problem
from pivotal.core.environments.live import state_of
from pivotal.core.models.literal import literal_reply
from pivotal.core.models.streaming import as_chunks
from pivotal.core.models.world import World, current
from pivotal.core.schemas import RECIPE

RunManager = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
"""The run manager LangChain hands a sync or async call (None when it streams without one)."""

LEGAL_SHARE = 0.5
"""Of the `sim` actor's wrong calls in an environment with one action, the share that are legal
(the pre-check lets them through: the critic must judge them); the rest are calls the pre-check
refuses. Set per model with `sim:legal=`."""


FOLLOW = 0.8
"""How often the `sim` actor plays the move an earlier attempt made from the very state it stands in,
when its prompt shows one (`<held_here>`, `Context.reuse_moves`): the sim's model of an LLM that is
shown the path it took before and follows it most of the time, whether or not it was the best move.
Set per model with `sim:follow=` (0: it never does, and the runs are those without the block)."""


HEED = 0.0
"""How often the `sim` actor, standing in the state from which a reflection of this run named a call as
the mistake, does not make that call again (the actor's call names each reflection's failed path in its
metadata, `pivotal_named`; the world's state is compared as loop detection compares it, `state_of`).
The sim's model of an LLM that reads the `<reflections>` block and recognises the situation a
reflection describes: it heeds it literally. A right reflection (the named call was a mistake) then
gets the expert's move instead, as a recalled guardrail does; a wrong one (it named the move that was
right) makes it avoid that move for a wrong one; not once it was critiqued at the step (the critic's
fresh word outweighs it, as for a recipe or a remembered move). Full and pivotal retry both show the
reflections, so both get it. Default 0: the sim ignores reflections, as it always has, and runs are those without the
knob. Set per model with `sim:heed=`."""


class SimChatModel(BaseChatModel):
    """`error`: share of wrong decisions per role; `invalid`: share of malformed replies."""

    model_name: str = "sim"
    error: float = 0.0
    seed: int = 0
    invalid: float = 0.0
    latency: float = 0.0
    """Seconds each call waits (async), to model a provider's latency in benchmarks."""
    legal: float = LEGAL_SHARE
    """In an environment with one action: the share of the actor's wrong calls that are legal
    there (the critic's to catch); the rest fail the pre-check (`LEGAL_SHARE`)."""

    follow: float = FOLLOW
    """The share of steps at which the actor plays a remembered move its prompt shows (`FOLLOW`)."""
    heed: float = HEED
    """The share of steps at which the actor heeds a reflection that named its call from here (`HEED`)."""

    @property
    def _llm_type(self) -> str:
        return "pivotal-sim"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, run_manager, kwargs))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop=None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency:
            await asyncio.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, run_manager, kwargs))])

    def _stream(
        self, messages: list[BaseMessage], stop=None, run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        yield from as_chunks(self._reply(messages, run_manager, kwargs))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop=None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if self.latency:
            await asyncio.sleep(self.latency)
        for chunk in as_chunks(self._reply(messages, run_manager, kwargs)):
            yield chunk

    def _reply(self, messages: list[BaseMessage], run_manager: RunManager, kwargs: dict[str, Any]) -> AIMessage:
        """Inside a Pivotal role the oracle answers; anywhere else the literal stand-in does."""
        metadata = _metadata(run_manager)
        tools = kwargs.get("tools")
        prompt = "\n".join(str(m.content) for m in messages)
        role = str(metadata.get("pivotal_role", ""))
        key = f"{self.seed}|{role}|{_data(prompt)}"
        rng = random.Random(hashlib.sha256(key.encode(errors="surrogatepass")).digest())
        if role and tools:
            function = tools[0]["function"]
            follows = random.Random(hashlib.sha256(f"{key}|follow".encode(errors="surrogatepass")).digest())
            follow = follows.random() < self.follow  # its own dice: the block and the knob redraw nothing else
            heeds = random.Random(hashlib.sha256(f"{key}|heed".encode(errors="surrogatepass")).digest())
            heed = heeds.random() < self.heed  # its own dice too: at 0 every run is the run without the knob
            parameters = function.get("parameters", {})
            args = _answer(role, metadata, rng, self.error, parameters, prompt, self.legal, follow, heed)
            message = _tool_message(function["name"], args, rng.random() < self.invalid)
        else:
            message = literal_reply(messages, tools, kwargs.get("tool_choice"))
        message.usage_metadata = _usage(prompt, message)
        message.response_metadata = {"model_name": self.model_name, "model_provider": self._llm_type}
        return message


def _metadata(run_manager: RunManager) -> dict[str, Any]:
    """The call's metadata; LangChain streams without handing `_stream` its run manager, so then
    the config of the runnable that made the call, which carries the same metadata.
    """
    if run_manager is not None:
        return run_manager.metadata or {}
    return dict((var_child_runnable_config.get() or {}).get("metadata") or {})


def _tool_message(name: str, args: dict[str, Any], malformed: bool) -> AIMessage:
    call_id = f"call_{uuid.uuid4().hex[:12]}"
    if malformed:
        raw = json.dumps(args)[: max(1, len(json.dumps(args)) // 2)]
        return AIMessage(
            content="",
            invalid_tool_calls=[
                {"name": name, "args": raw, "id": call_id, "error": "truncated JSON", "type": "invalid_tool_call"}
            ],
        )
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


def _usage(prompt: str, message: AIMessage) -> UsageMetadata:
    out = json.dumps([c["args"] for c in message.tool_calls]) if message.tool_calls else str(message.content)
    inp, outp = max(1, len(prompt) // 4), max(1, len(out) // 4)
    return {"input_tokens": inp, "output_tokens": outp, "total_tokens": inp + outp}


_BLOCKS = re.compile(r"<([A-Za-z_][\w-]*)>(.*?)</\1>", re.S)


UNREAD = ("repeats", "held_here")
"""Blocks left out of the seed: loop detection's lines (which the sim roles never act on) and the
remembered move (which the actor follows on its own dice) would otherwise redraw every later outcome,
and their measured effect would be the dice's."""


def _data(prompt: str) -> str:
    """The prompt's data blocks, or the whole text of a prompt that has none."""
    blocks = [(tag, body) for tag, body in _BLOCKS.findall(prompt) if tag not in UNREAD]
    return "\n".join(f"{tag}={body.strip()}" for tag, body in blocks) if blocks else prompt


def _block(prompt: str, tag: str) -> str:
    """A prompt's <tag> data block, "" when absent."""
    return prompt.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0] if f"<{tag}>" in prompt else ""


def _guardrails(prompt: str) -> str:
    """The recalled guardrail lessons in the prompt, lower-cased, for sim roles that heed them: each
    one's line and the indented lines under it (the quoted note of the run that taught it, read
    as an LLM reads data beside advice).
    """
    kept, inside = [], False
    for line in _block(prompt, "lessons").lower().splitlines():
        if not line.startswith(" "):
            inside = "[guardrail]" in line
        if inside:
            kept.append(line)
    return "\n".join(kept)


_MOVE = re.compile(r"([A-Za-z_][\w-]*)(?:\((\{[^()]*\})\))?")


def _critiqued(prompt: str) -> bool:
    """The actor was just critiqued at this step: the critic's fresh word outweighs what it was shown before
    (a recalled recipe, a remembered move, a reflection it heeds).
    """
    return _block(prompt, "critiques_of_this_step").strip() not in ("", "(none)")


def _recipe(prompt: str) -> list[tuple[str, dict[str, Any]]]:
    """The moves of the first recalled recipe, none when the actor was just critiqued here: the
    sim's model of an LLM that follows a recipe it is shown until told that a move is wrong.
    """
    if _critiqued(prompt):
        return []
    for line in _block(prompt, "lessons").splitlines():
        if "[skill]" in line and RECIPE in line:
            text = line.split(RECIPE, 1)[1].rstrip()
            moves = _moves(text.removesuffix("."))
            return moves if text.endswith(".") else moves[:-1]  # a recipe cut short by the length cap
    return []


def _held(prompt: str, names: list[str]) -> dict[str, Any]:
    """The remembered move of the prompt's `<held_here>` block (its first line), none when the actor was
    just critiqued here or the schema no longer offers the action.
    """
    if _critiqued(prompt):
        return {}
    moves = _moves(_block(prompt, "held_here").strip().split("\n", 1)[0])
    if not moves or (names and moves[0][0] not in names):
        return {}
    name, arguments = moves[0]
    return {"action": name, "arguments": arguments, "thought": "an earlier attempt's move from here held"}


def _moves(text: str) -> list[tuple[str, dict[str, Any]]]:
    moves: list[tuple[str, dict[str, Any]]] = []
    at = 0
    while (move := _MOVE.match(text, at)) and (move.end() == len(text) or text.startswith(", ", move.end())):
        moves.append((move[1], json.loads(move[2]) if move[2] else {}))
        at = move.end() + 2
    return moves


def _recipe_text(applied: list[tuple[str, dict[str, Any]]]) -> str:
    moves = ", ".join(f"{name}({json.dumps(args)})" if args else name for name, args in applied)
    return f"{RECIPE}{moves}."


def _answer(
    role: str,
    metadata: dict[str, Any],
    rng: random.Random,
    error: float,
    schema: dict[str, Any],
    prompt: str = "",
    legal: float = LEGAL_SHARE,
    follow: bool = False,
    heed: bool = False,
) -> dict[str, Any]:
    live = current()
    oracle = live.env if live and isinstance(live.env, Oracle) else None
    wrong = rng.random() < error
    if role == "actor":
        followed = _follow(live, _recipe(prompt), _action_names(schema))
        held = _held(prompt, _action_names(schema)) if follow else {}
        pick = followed or held or _act(live, oracle, rng, wrong, schema, _guardrails(prompt), legal)
        named = _named_here(live, metadata.get("pivotal_named") or []) if heed and not _critiqued(prompt) else []
        return _heeded(live, oracle, rng, named, _action_names(schema), legal) if _call(pick) in named else pick
    if role == "critic":
        return _criticise(oracle, metadata.get("pivotal_proposal") or {}, wrong, _guardrails(prompt))
    if role == "reflector":
        return _reflect(live, oracle, rng, wrong)
    if role == "distiller":
        return _distill(live, metadata)
    if role == "gate":
        return {"decision": "reject" if wrong else "approve", "reason": "sim gate"}
    return _fill(schema)


def _act(
    live: World | None,
    oracle: Oracle | None,
    rng: random.Random,
    wrong: bool,
    schema: dict[str, Any],
    guardrails: str = "",
    legal: float = LEGAL_SHARE,
) -> dict[str, Any]:
    """A wrong pick that a recalled guardrail names is dropped for the expert's move: the sim's
    model of an LLM heeding its lessons, so memory can pay off only when recall surfaces them.
    """
    names = _action_names(schema)
    expert = oracle.expert_action() if oracle else None
    if expert and names and expert[0] not in names:
        expert = None  # the schema no longer offers it here (a reflection named it): no model could choose it
    if expert and not wrong:
        return {"action": expert[0], "arguments": expert[1], "thought": "closest safe step to the goal"}
    name, arguments = _wrong_pick(live, expert, rng, names, legal)
    pick = {"action": name, "arguments": arguments, "thought": "exploring"}
    if expert and _warned(oracle, pick, guardrails):
        return {
            "action": expert[0],
            "arguments": expert[1],
            "thought": "a recalled guardrail warns against the other move",
        }
    return pick


def _call(pick: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return str(pick.get("action", "")), dict(pick.get("arguments") or {})


def _named_here(live: World | None, failed_paths: list[list[Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls a reflection named as the mistake (each failed path's last call) from the state the world
    is in now: the same path so far, or a path the world replayed on a copy of itself ends in the same state.
    """
    if live is None:
        return []
    here, named = _state(live.env), []
    applied = [(name, dict(arguments or {})) for name, arguments in live.applied]
    for path in failed_paths:
        calls = [(str(name), dict(arguments or {})) for name, arguments in path]
        if calls and (calls[:-1] == applied or (here is not None and _replayed(live, calls[:-1]) == here)):
            named.append(calls[-1])
    return named


def _state(env: Any) -> str | None:
    shot = getattr(env, "snapshot", None)
    found = state_of(env, shot() if callable(shot) else None)
    return None if found is None else json.dumps(found, sort_keys=True, default=str)


def _replayed(live: World, calls: list[tuple[str, dict[str, Any]]]) -> str | None:
    """The state a copy of the world reaches from its start along `calls` (None: it cannot go back there)."""
    initial = getattr(live, "initial", None)
    if initial is None or not isinstance(live.env, Restorable):
        return None
    world = copy.deepcopy(live.env)
    cast(Restorable, world).restore(initial)
    for name, arguments in calls:
        world.step(name, arguments)
    return _state(world)


def _heeded(
    live: World | None,
    oracle: Oracle | None,
    rng: random.Random,
    named: list[tuple[str, dict[str, Any]]],
    names: list[str],
    legal: float,
) -> dict[str, Any]:
    """Another call than the ones a reflection named from here: the expert's where it is not one of them
    (the reflection was right), else a wrong pick that is not (it named the right move).
    """
    expert = oracle.expert_action() if oracle else None
    if expert and names and expert[0] not in names:
        expert = None
    if expert and (expert[0], dict(expert[1])) not in named:
        return {"action": expert[0], "arguments": expert[1], "thought": "a reflection named the other move"}
    pick = _wrong_pick(live, expert, rng, names, legal)
    for _ in range(_DRAWS):
        if (pick[0], pick[1]) not in named:
            break
        pick = _wrong_pick(live, expert, rng, names, legal)
    return {"action": pick[0], "arguments": pick[1], "thought": "a reflection named that move as the mistake"}


def _follow(live: World | None, recipe: list[tuple[str, dict[str, Any]]], names: list[str]) -> dict[str, Any]:
    """The recipe's move for this step, whether or not it suits this instance: a recipe recalled
    in the wrong maze is followed into its walls, so only recall's scope keeps it out.
    """
    step = len(live.applied) if live else 0
    if step >= len(recipe) or (names and recipe[step][0] not in names):
        return {}
    name, arguments = recipe[step]
    return {"action": name, "arguments": arguments, "thought": "following a recalled recipe"}


def _action_names(schema: dict[str, Any]) -> list[str]:
    """The actor schema's choices: a union with one member per action, or one flat `action` (pivotal.core.schemas)."""
    call = schema.get("properties", {}).get("call")
    names: list[str] = []
    for member in (call.get("anyOf") or [call]) if call else [schema]:
        action = member.get("properties", {}).get("action", {})
        names += action.get("enum") or ([action["const"]] if "const" in action else [])
    return names


def _wrong_pick(
    live: World | None,
    expert: tuple[str, dict[str, Any]] | None,
    rng: random.Random,
    names: list[str],
    legal: float = LEGAL_SHARE,
) -> tuple[str, dict[str, Any]]:
    """The environment's own plausible mistake (`wrong_action(rng)`) when it offers one; else another
    action name with arguments drawn from its schema; in an environment with a single action, a
    mix of legal and illegal calls of it (`_one_action_mistake`).
    """
    offer = getattr(live.env, "wrong_action", None) if live else None
    if callable(offer) and (mistake := offer(rng)):
        return mistake[0], dict(mistake[1])
    names = names or [spec.name for spec in _specs(live)]
    if live is not None and len(set(names)) == 1:
        return _one_action_mistake(live, names[0], expert, rng, legal)
    choices = [n for n in names if not expert or n != expert[0]] or names or ["noop"]
    name = rng.choice(choices)
    same = expert is not None and name == expert[0]
    return name, _wrong_arguments(_parameters(live, name), dict(expert[1]) if expert else {}, rng, same)


def _one_action_mistake(
    live: World, name: str, expert: tuple[str, dict[str, Any]] | None, rng: random.Random, legal: float
) -> tuple[str, dict[str, Any]]:
    """A wrong call when the only action is the expert's own (`command(text)`, `reveal(row, col)`).

    Drawn from the schema alone, a string argument became the expert's text with a digit added
    (`examine trunk3`), a command no environment knows: every mistake was the pre-check's to catch
    and the critic was never tested. Now `legal` of them are another call that is legal here (from
    the environment's `legal_actions()` when it has one, else drawn arguments the pre-check passes),
    and the rest are refused by the pre-check; with no legal alternative, all are.
    """
    given = dict(expert[1]) if expert else {}

    def draw() -> dict[str, Any]:
        return _wrong_arguments(_parameters(live, name), given, rng, expert is not None)

    if rng.random() < legal:
        listed = getattr(live.env, "legal_actions", None)
        if callable(listed):
            others = [dict(args) for called, args in listed() if called == name and dict(args) != given]
        else:
            others = [args for args in (draw() for _ in range(_DRAWS)) if args != given and _passes(live, name, args)]
        if others:
            return name, rng.choice(others)
    arguments = draw()
    for _ in range(_DRAWS):
        if not _passes(live, name, arguments):
            break
        arguments = draw()
    return name, arguments


def _passes(live: World, name: str, arguments: dict[str, Any]) -> bool:
    return action_problem(live.env, name, arguments) is None


def _specs(live: World | None) -> list[ActionSpec]:
    """The environment's actions, names and argument schemas, whatever shape the actor's output
    schema gives them.
    """
    return live.env.describe_actions() if live else []


def _parameters(live: World | None, name: str) -> dict[str, Any]:
    return next((spec.parameters for spec in _specs(live) if spec.name == name), {})


def _wrong_arguments(schema: dict[str, Any], expert: dict[str, Any], rng: random.Random, same: bool) -> dict[str, Any]:
    """Arguments drawn from the schema (integers within their bounds, enums, booleans). Strings keep
    the expert's value under another action name (delete the path it should have written: a
    plausible mistake the critic must judge); under the expert's own name they must differ.
    """
    properties = schema.get("properties") or {}
    keys = [k for k in properties if k in expert or k in schema.get("required", [])]
    if not keys:
        return expert
    arguments = expert
    for _ in range(_DRAWS):
        arguments = {key: _draw(properties[key], expert.get(key), rng, same) for key in keys}
        if not same or arguments != expert:
            break
    return arguments


_DRAWS = 20
"""Draws before a wrong call settles for one equal to the expert's (a schema with one value)."""


def _draw(prop: dict[str, Any], given: object, rng: random.Random, change: bool) -> Any:
    if "enum" in prop:
        return rng.choice(prop["enum"])
    kind = prop.get("type")
    if kind in ("integer", "number"):
        centre = given if isinstance(given, int | float) and not isinstance(given, bool) else 0
        low, high = prop.get("minimum", centre - 5), prop.get("maximum", centre + 5)
        return rng.randint(int(low), int(high)) if kind == "integer" else rng.uniform(low, high)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        text = given if isinstance(given, str) else ""
        return f"{text}{rng.randrange(10)}" if change or not text else text
    return given if given is not None else {"array": [], "object": {}}.get(str(kind))


def _warned(oracle: Oracle | None, proposal: dict[str, Any], guardrails: str) -> str:
    """The oracle's reason against this proposal when a recalled guardrail states it, else ""."""
    if oracle is None or not proposal.get("action") or not guardrails:
        return ""
    quality, reason = oracle.judge(str(proposal["action"]), proposal.get("arguments") or {})
    return reason if quality != "good" and reason.lower() in guardrails else ""


def _criticise(oracle: Oracle | None, proposal: dict[str, Any], wrong: bool, guardrails: str = "") -> dict[str, Any]:
    if oracle is None:
        return {"decision": "approve", "confidence": 0.5, "diagnosis": "no oracle", "revision": ""}
    if reason := _warned(oracle, proposal, guardrails):
        return {
            "decision": "reject",
            "confidence": 0.95,
            "diagnosis": f"a recalled guardrail forbids this: {reason}",
            "revision": "take another action",
        }
    quality, reason = oracle.judge(str(proposal.get("action", "")), proposal.get("arguments") or {})
    decision = {"good": "approve", "poor": "revise", "fatal": "reject"}[quality]
    if wrong:
        decision = "revise" if decision == "approve" else "approve"
    return {
        "decision": decision,
        "confidence": 0.9,
        "diagnosis": reason,
        "revision": "" if decision == "approve" else f"Do not do that: {reason}.",
    }


def _reflect(live: World | None, oracle: Oracle | None, rng: random.Random, wrong: bool) -> dict[str, Any]:
    steps = len(live.applied) if live else 0
    if oracle is None or live is None or steps == 0:
        index, reason = max(steps - 1, 0), "the last step did not help"
        no_return = index
    else:
        index, reason = oracle.first_mistake(live.applied)
        no_return = oracle.last_recoverable(live.applied) if isinstance(oracle, NoReturnOracle) else index
    if wrong and steps:  # a wrong reflection names another step, in that step's own words
        index = rng.randrange(steps)
        reason = f"step {index} ({live.applied[index][0]}) was the mistake" if live else reason
        no_return = rng.randrange(index, steps)
    lesson = {"kind": "guardrail", "situation": reason, "text": f"Avoid this: {reason}."}
    no_return = max(no_return, index)
    return {
        "pivotal_step": index,
        "no_return_step": no_return,
        "steps_left_at_pivotal": _steps_left(live, oracle, index),
        "steps_left_at_no_return": _steps_left(live, oracle, no_return),
        "error_type": "wrong_action",
        "diagnosis": reason,
        "advice": f"At step {index}, choose differently: {reason}.",
        "lesson_candidates": [lesson],
    }


UNREACHABLE = 999
"""The estimate the sim reflector gives from a state the goal is out of reach from: no retry fits it."""


def _steps_left(live: World | None, oracle: Oracle | None, index: int) -> int | None:
    """The oracle's distance to the goal from just before step `index`; None without a distance oracle."""
    if live is None or not isinstance(oracle, DistanceOracle):
        return None
    left = oracle.steps_to_goal(live.applied[:index])
    return UNREACHABLE if left is None else left


def _distill(live: World | None, metadata: dict[str, Any]) -> dict[str, Any]:
    if live is None or metadata.get("pivotal_outcome") != "success" or not live.applied:
        return {"lessons": []}
    first = live.first_observation.split("\n", 1)[0]
    return {"lessons": [{"kind": "skill", "situation": first, "text": _recipe_text(live.applied)}]}


def _fill(schema: dict[str, Any]) -> dict[str, Any]:
    """A minimal valid object for an unknown schema."""
    defaults = {"string": "", "number": 0.5, "integer": 0, "boolean": False, "array": [], "object": {}}
    values: dict[str, Any] = {}
    for key in schema.get("required", []):
        prop = schema.get("properties", {}).get(key, {})
        values[key] = prop["enum"][0] if "enum" in prop else defaults.get(prop.get("type", "string"), "")
    return values
