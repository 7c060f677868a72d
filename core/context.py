"""Run-time configuration passed to every node through `Runtime[Context]`.

Every ablation in the benchmark is one field here, so a comparison is one switch away.
"""

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel
from pydantic import WithJsonSchema

from pivotal.core.errors import PivotalError
from pivotal.core.schemas import PivotChoice, ReuseMoves
from pivotal.core.settings import settings

RetryStrategy = Literal["pivotal", "full", "none"]
StepBudget = Literal["fair", "new", "path"]
RecallMode = Literal["step", "task", "off"]
LessonsBackend = str
"""A row of the lesson backends' table (memory/storage/__init__.py `BACKENDS`: chroma, langgraph), or
"auto"; checked against it when a run with memory starts, so a new backend touches no file here."""
OnCritiqueExhausted = Literal["execute_best", "fail"]
LoopDetection = Literal["warn", "off", "end"]
DoubleText = Literal["reject", "enqueue", "interrupt", "rollback"]
"""What a message does that arrives while a turn runs on its thread (the LangGraph platform's
`multitask_strategy` names): graphs/busy.py."""
Role = Literal["actor", "critic", "reflector", "distiller", "gate", "screen"]
"""The roles that call a model."""
ModelSlot = Literal["actor", "critic", "reflector", "lesson"]
MODEL_SLOT: dict[Role, ModelSlot] = {
    "actor": "actor",
    "critic": "critic",
    "reflector": "reflector",
    "distiller": "lesson",
    "gate": "lesson",
    "screen": "critic",
}
"""Which Context field (`<slot>_model`) gives each role its model: the distiller and the gate both
judge lessons, so one `lesson_model` serves them."""
Model = Annotated[
    str | BaseChatModel,
    WithJsonSchema(
        {
            "type": "string",
            "description": "model spec: sim, local, openai:<model>, anthropic:<model>, "
            "openai-compatible:<model>@<base_url>; from Python also any LangChain chat model object",
        }
    ),
]
"""A model spec string, or a chat model the application built itself (Azure, a proxy, headers,
callbacks, any provider LangChain supports). Studio edits the string form."""


def _setting(name: str):
    return field(default_factory=lambda: getattr(settings(), name))


@dataclass(kw_only=True)
class Context:
    """Per-run knobs: models per role, loop bounds, feature switches, store location."""

    model: Model = _setting("model")
    """Model for every role that has none of its own (e.g. `local`, `sim`, `openai:gpt-4o-mini`, a ChatOpenAI)."""
    actor_model: Model = _setting("actor_model")
    critic_model: Model = _setting("critic_model")
    reflector_model: Model = _setting("reflector_model")
    lesson_model: Model = _setting("lesson_model")
    """Model that distils lessons and runs the lesson approval gate."""
    fallback_model: Model = _setting("fallback_model")
    """Model any role switches to when its own model's provider fails after the SDK's retries."""

    max_steps: int = 20
    """Executed environment steps allowed per attempt before the attempt counts as failed."""
    budget: StepBudget = "fair"
    """What `max_steps` counts, so that pivotal and full retry are compared at equal cost. "fair"
    (the default): every attempt's path, kept steps included, is held to `max_steps` whatever the
    strategy (the finished path a user gets has one limit), and all attempts together execute at
    most `total_steps()` = max_steps x (1 + max_pivot_retries), the most a full retry can spend, so
    no strategy gets a longer path or more steps than the other. "path": the same path limit
    without the shared total. "new": the steps an attempt executes itself, so a pivotal retry that
    kept 5 steps still gets max_steps new ones and its path can be longer than a full retry's (it
    favoured pivotal retry in the issue 32 bench: not a fair comparison). Where the world cannot go
    back (rewind `forward`, `compensate`) kept steps stay in the world and every budget counts an
    attempt's new steps."""
    max_critique_rounds: int = 2
    """Actor proposals the critic may send back per step before `on_critique_exhausted` applies
    (every proposal of the step it reviewed counts, those a person then rejected too)."""
    max_precheck_bounces: int | None = None
    """Proposals the deterministic pre-check may send back per step, a budget of their own: they are
    cheap and certain, so they do not use up the critic's rounds. None: `max_critique_rounds`."""
    max_human_rejections: int | None = None
    """Proposals a person may reject per step (`require_approval_for`); one more rejection fails the
    attempt. None: `max_critique_rounds`."""
    max_pivot_retries: int = 2
    """Retries after a failed attempt (pivotal or full, per `retry`)."""
    structured_retries: int = 2
    """Re-asks after a malformed structured reply before the role's safe fallback is used."""
    max_observation_chars: int = 4000
    """Longer observations are cut (head and tail kept) so prompts stay within budget."""
    step_timeout: float = _setting("step_timeout")
    """Seconds one environment call may take (PIVOTAL_STEP_TIMEOUT); past it the task stops with an
    error that `--resume` retries from the last checkpoint."""
    call_deadline: float = _setting("call_deadline")
    """Seconds one model call may take in all (PIVOTAL_CALL_DEADLINE); past it the role falls back."""

    critic: bool = True
    critic_veto: bool | None = None
    """Whether an LLM critic's `reject` is final. None (auto): yes, except for the embedded
    `local` model, whose verdicts measured uninformative (SmolLM2-135M rejected every move);
    its rejects become `revise` and the deterministic pre-check keeps the hard veto."""
    precheck: bool = True
    """Deterministic check (known action, valid arguments, legal in the current state) before the critic."""
    on_critique_exhausted: OnCritiqueExhausted = "execute_best"
    loop_detection: LoopDetection = "warn"
    """Steps that changed nothing and moves back to where the agent was. "warn": the actor and critic
    read a line naming each one from the current state, and in a deterministic environment the
    pre-check sends back a call that already changed nothing at this very state; no attempt ends for
    a loop (measured: ending it cost pivotal retry successes, benchmarks/bench_loops.py). "end":
    also the second return to one state ends the attempt as going in circles (the former rule, kept
    for comparison). "off": neither lines nor send-backs; the counts are still kept. Except under
    "off", an attempt also ends as soon as the environment says the goal is out of reach, or needs
    more steps than the attempt's budget has left (its optional `steps_to_goal`): the one ending that
    is certain, so it saves the steps and costs no success."""
    """`execute_best`: run the last proposal the critic asked to revise (never a rejected one)."""
    require_approval_for: list[str] = field(default_factory=list)
    """Actions a human must approve before they execute (the graph pauses with `interrupt()`):
    action names, "irreversible" (those the environment marks so) or "*" (every action)."""
    observe_only: list[str] | bool = field(default_factory=list)
    """Actions whose LLM critic only watches: it reviews every call of them and records what it would
    have done (`pivotal critic report` weighs that against what then happened), but lets each one
    through as if there were no critic. Action (tool) names, "*" or True for every action. The
    deterministic pre-check, the once-guard and `require_approval_for` still hold: only the critic's
    blocking is off. A run's context may narrow the list, never widen it (docs/observe.md)."""
    max_model_calls_per_turn: int = 50
    """A `create_agent` agent with `PivotalCritic`: model calls one turn (since the user's last
    message) may make; past them the turn ends with a final message saying why (the graph's own
    bounds are `max_steps`, `max_critique_rounds` and `max_pivot_retries`)."""
    max_refusals_per_turn: int | None = None
    """A `create_agent` agent with `PivotalCritic`: tool calls the critic, the pre-check or a person
    may turn down in one turn before the turn ends with a final message saying why. None:
    `max_critique_rounds` + 2 (4 by default: the critic's rounds, the call past them, one more)."""
    double_text: DoubleText = "enqueue"
    """A message that arrives while a turn runs on the same thread, or that repeats the one that opened
    the thread's last turn within `repeat_window_s` (a double-clicked send, a retried request):
    "reject" refuses it (`DoubleTextRejected`); "enqueue" runs it after the running turn; "interrupt"
    stops the running turn between two steps, keeping what it did, then runs it; "rollback" stops the
    running turn and runs it from where that turn started. Whatever the policy, nothing the thread
    already executed runs again (docs/side-effects.md#busy-threads-and-double-texts)."""
    repeat_window_s: float = 10.0
    """Seconds within which the same message as the one that opened the thread's last turn counts as a
    double text (0: never)."""
    allow_other_models: bool = False
    """A resume may go on with model objects other than those the run paused with (by class, model
    name and endpoint). Off: such a resume is refused in one line. Never saved with the run."""
    stream_roles: bool = False
    """Let the role calls (actor, critic, reflector, distiller, gate) stream their chunks too under
    `stream_mode="messages"`, each tagged `pivotal:<role>`. Off: they carry LangGraph's `nostream`
    tag and a chat UI sees only the answer (docs/python.md, Streaming a run). A choice of what one call
    shows, not of the run: never saved with it, so a resume may name it afresh."""
    retry: RetryStrategy = "pivotal"
    pivot: PivotChoice = "best"
    """Where a pivotal retry goes back to. "first_mistake": just before the first step that went
    wrong (the reflection's pivotal step). "no_return": just before the step after which the goal
    was out of reach, keeping every step from which success was still possible (a hole fallen into
    late keeps the whole path before it; in a plain maze that is every step but the last). "best"
    (the default): per failure, where the environment recorded its steps to the goal after each step
    (`steps_to_goal`), the state closest to the goal, no later than the point of no return, whose
    remaining steps still fit the path's room; else the point of no return when keeping the detour
    after the first mistake saves steps and still leaves the path room to finish, else the first
    mistake, by the reflection's estimates of the steps still needed from each; without those, by what
    the run recorded (critic verdicts, no-ops, revisited states: `nodes/pivot.py`, `recorded_restart`)."""
    reuse_moves: ReuseMoves = "off"
    """Show a retry's actor the move an earlier attempt made from the very state it stands in, where the
    run's own record vouches for it (`Reflection.held_moves`). "pivotal": pivotal retries only (part of
    the reflection a pivotal retry reads); "all": full retries too; "off" (the default: measured in
    docs/benchmarks.md, "Pivot accuracy", it does not pay enough to turn on)."""
    memory: bool = True
    model_screen: bool = False
    """Also ask the critic's model, after the rule screen (memory/lesson/screen.py), whether a new lesson
    would make the agent do what no task asked (nodes/gate.py `model_screen`); a lesson it refuses
    is not stored. One more model call per new lesson, so off by default."""
    recall: RecallMode = "step"
    recall_k: int = 3
    recall_min_similarity: float = 0.35
    store_path: str = _setting("store_path")
    store_url: str = _setting("store_url")
    """A Chroma server (`chroma run`) shared by several processes; when set, `store_path` is unused."""
    lessons_backend: LessonsBackend = "auto"
    """Where lessons live. "auto": in the run's LangGraph store when it has one (`build_graph(store=...)`,
    `create_pivotal_agent(..., store=...)`, the server's store under `langgraph dev`), else in Chroma
    (`store_path` / `store_url`). "chroma": always Chroma. "langgraph": always the run's store; a run
    without one is refused. Any other row of the backend table names its backend."""
    lessons_namespace: list[str] = field(default_factory=lambda: ["pivotal", "lessons"])
    """The LangGraph store namespace lessons go under, each family in its own `(*namespace, family)`.
    A list, as a thread saves it, so a resume finds it unchanged."""
    dedup_similarity: float = 0.9
    """A new lesson at least this similar (cosine) to a stored one of the same kind and family
    merges into it. Measured with the embedded MiniLM: paraphrases 0.91–0.94, lessons that differ
    in one key word ("left"/"up") 0.81."""
    utility_floor: float = 0.3
    """Lessons whose utility falls below this, once recalled `min_recalls_to_retire` times, retire."""
    min_recalls_to_retire: int = 3
    max_lessons: int = _setting("max_lessons")
    """Cap on an owner's approved lessons; the lowest utility ones retire first. Its pending ones
    (quarantined) have their own cap, a quarter of it (memory/policy/rules.py `pending_cap`)."""
    confirmations_skill: int = 2
    """A new lesson waits in quarantine (stored, never recalled) until this many independent runs
    (other threads, tasks or owners) with agreeing outcomes have given it, its own run included;
    1 recalls it from the next run on. Per kind: skill, strategy, guardrail."""
    confirmations_strategy: int = 2
    confirmations_guardrail: int = 3
    """Guardrails, and any lesson that says always or never, change what the critic enforces:
    they need the most confirmations."""
    local_threads: int = _setting("local_threads")
    default_env: str = ""
    """Environment for a task that names none (a goal string, or chat `messages`); "" means gridworld."""

    def __post_init__(self) -> None:
        for name in (
            "max_steps",
            "max_critique_rounds",
            "recall_k",
            "max_observation_chars",
            "max_model_calls_per_turn",
            "local_threads",
            "max_lessons",
            "min_recalls_to_retire",
            "confirmations_skill",
            "confirmations_strategy",
            "confirmations_guardrail",
        ):
            if getattr(self, name) <= 0:
                raise PivotalError(f"{name} must be > 0 (got {getattr(self, name)}); set a positive limit")
        for name in ("max_precheck_bounces", "max_human_rejections", "max_refusals_per_turn"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise PivotalError(
                    f"{name} must be > 0 (got {getattr(self, name)}); set a positive limit or leave it unset"
                )
        for name in ("step_timeout", "call_deadline"):
            if not getattr(self, name) > 0:
                raise PivotalError(f"{name} must be > 0 seconds (got {getattr(self, name)})")
        for name in ("max_pivot_retries", "structured_retries"):
            if getattr(self, name) < 0:
                raise PivotalError(f"{name} must be >= 0 (got {getattr(self, name)})")
        self.observe_only = _observed_names(self.observe_only)
        self.require_approval_for = _approval_names(self.require_approval_for)
        _check_choice("retry", self.retry, get_args(RetryStrategy))
        _check_choice("budget", self.budget, get_args(StepBudget))
        _check_choice("pivot", self.pivot, get_args(PivotChoice))
        _check_choice("reuse_moves", self.reuse_moves, get_args(ReuseMoves))
        _check_choice("recall", self.recall, get_args(RecallMode))
        self.lessons_namespace = list(self.lessons_namespace)  # a tuple as LangGraph spells a namespace
        if not self.lessons_namespace or not all(
            isinstance(p, str) and p and "." not in p for p in self.lessons_namespace
        ):
            raise PivotalError(
                f"lessons_namespace must be non-empty labels without dots (got {self.lessons_namespace!r})"
            )
        _check_choice("on_critique_exhausted", self.on_critique_exhausted, get_args(OnCritiqueExhausted))
        _check_choice("loop_detection", self.loop_detection, get_args(LoopDetection))
        _check_choice("double_text", self.double_text, get_args(DoubleText))
        if not self.repeat_window_s >= 0:
            raise PivotalError(f"repeat_window_s must be >= 0 seconds (got {self.repeat_window_s})")
        for name in ("recall_min_similarity", "dedup_similarity", "utility_floor"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise PivotalError(f"{name} must be between 0 and 1 (got {getattr(self, name)})")

    def confirmations(self) -> dict[str, int]:
        """Independent confirmations a new lesson needs, per kind (memory/policy/rules.py `needs`)."""
        return {
            "skill": self.confirmations_skill,
            "strategy": self.confirmations_strategy,
            "guardrail": self.confirmations_guardrail,
        }

    def total_steps(self) -> int | None:
        """The executed steps all attempts share under the "fair" budget (None: no shared cap)."""
        return self.max_steps * (1 + self.max_pivot_retries) if self.budget == "fair" else None

    def budget_spent(self, attempt_steps: int, executed: int) -> str:
        """Why the attempt must stop after a step, or "": `attempt_steps` are the steps it counts
        against `max_steps`, `executed` the run's executed steps so far, this one included.
        """
        total = self.total_steps()
        if total is not None and executed >= total:
            return f"total step budget of {total} spent without reaching the goal (budget {self.budget})"
        if attempt_steps >= self.max_steps:
            return f"step budget of {self.max_steps} spent without reaching the goal"
        return ""

    def steps_left(self, attempt_steps: int, executed: int) -> int:
        """The steps the attempt may still take (arguments as for `budget_spent`): its path's room
        under `max_steps`, and under the "fair" budget no more than the run's shared total has left.
        """
        total = self.total_steps()
        room = self.max_steps - attempt_steps
        return room if total is None else min(room, total - executed)

    def critic_has_veto(self) -> bool:
        if self.critic_veto is not None:
            return self.critic_veto
        return not model_label(self.model_for("critic")).startswith(("local", "LocalChatModel"))

    def observes(self, action: str | None) -> bool:
        """Whether the critic only watches this action (`observe_only`): its verdict is recorded, not enforced."""
        names = self.observed_actions()
        return bool(action) and ("*" in names or action in names)

    def observed_actions(self) -> list[str]:
        """`observe_only` as names ("*": every action); a list once the Context is made."""
        return self.observe_only if isinstance(self.observe_only, list) else _observed_names(self.observe_only)

    def precheck_bounces_allowed(self) -> int:
        return self.max_critique_rounds if self.max_precheck_bounces is None else self.max_precheck_bounces

    def human_rejections_allowed(self) -> int:
        return self.max_critique_rounds if self.max_human_rejections is None else self.max_human_rejections

    def refusals_allowed(self) -> int:
        return self.max_critique_rounds + 2 if self.max_refusals_per_turn is None else self.max_refusals_per_turn

    def loosened(self, own: "Context") -> str:
        """Why this run's context loosens a safety setting of the deployment's `own`, in one line, or "".

        A deployment (a graph built with a context, `create_pivotal_agent(...)`) locks its safety
        settings: a run's context (Studio, the SDK, `invoke(context=...)`) may tighten them only.
        """
        for name, looser in _LOOSER.items():
            if looser(getattr(self, name), getattr(own, name), self, own):
                return (
                    f"context {name} {getattr(self, name)!r} loosens this deployment's {name} "
                    f"{getattr(own, name)!r}; a run may tighten a safety setting, never loosen it "
                    "(docs/configuration.md#tighten-only): leave it out or build the graph with it"
                )
        return ""

    def model_for(self, role: Role) -> str | BaseChatModel:
        """The role's own model (its `MODEL_SLOT` field), else the shared `model`."""
        own = getattr(self, f"{MODEL_SLOT[role]}_model")
        return own if isinstance(own, BaseChatModel) or own else self.model

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """The same for every Context schema (a `context_schema` only changes defaults), so made once."""
        return _FIELD_NAMES

    def saved(self) -> dict[str, Any]:
        """The settings a run keeps with its thread, so it resumes anywhere exactly as it started.

        A model object cannot be saved: its place holds `{"model_object": label}`, and a resume
        must be given the object again.
        """
        return {name: _saved(getattr(self, name)) for name in _FIELD_ORDER if name not in _UNSAVED}

    def model_objects(self) -> dict[str, BaseChatModel]:
        """The settings that are model objects: `saved` cannot keep them, so a resume over the graph
        built with them takes them from that graph again.
        """
        return {name: value for name in _FIELD_ORDER if isinstance(value := getattr(self, name), BaseChatModel)}

    @classmethod
    def resumed(
        cls, saved: dict[str, Any], given: "Context | dict[str, Any] | None", name_of: Callable[[str], str] = str
    ) -> "Context":
        """The run's own settings; `given` may repeat them but not contradict them.

        `given` as a dict holds only what the caller set explicitly (CLI flags); a whole
        Context must match field by field. `name_of` spells a field's name for the message.
        """
        known = {name: value for name, value in saved.items() if name in cls.field_names()}
        wanted = (
            {f.name: getattr(given, f.name) for f in fields(given)} if isinstance(given, Context) else dict(given or {})
        )
        if not known:  # a thread from before settings were saved: what the caller says is all there is
            return given if isinstance(given, Context) else cls(**wanted)
        for name, value in known.items():
            if isinstance(value, dict) and "model_object" in value:
                if not isinstance(wanted.get(name), BaseChatModel):
                    raise PivotalError(
                        f"this run's {name} is a model object ({value['model_object']}) that cannot be saved; "
                        f"pass it again as the resume's context {{'{name}': ...}} (the run keeps its other saved "
                        f"settings), or as a whole Context that repeats them all"
                    )
                _same_model(name, value, wanted[name], bool(wanted.get("allow_other_models")))
                known[name] = wanted[name]
        unsaved = {name: bool(wanted.get(name)) for name in _UNSAVED}  # this call's: allow_other_models, stream_roles
        base = cls(**known, allow_other_models=unsaved["allow_other_models"], stream_roles=unsaved["stream_roles"])
        for name, value in wanted.items():
            if name in known and not isinstance(value, BaseChatModel) and known[name] != value:
                raise PivotalError(
                    f"{name_of(name)} {value!r} contradicts this run's saved {name} "
                    f"{known[name]!r}; resume without it (the run keeps its own settings) "
                    "or start a new run"
                )
        return base


def run_context(given: object, own: Context | None, names: Collection[str] = ()) -> Context | None:
    """The run's context as a Context over `own`, so every surface applies one tighten-only rule.

    A Context as it is (with `own`'s `default_env` when it names none); a Mapping
    (`invoke(context={...})` on a parent graph or a `create_agent` agent) or any other object (a
    parent's own context type) for its keys or attributes named like Context fields, the rest being
    the parent's own. `names`: only these fields (of a Context too). None when it names no field.
    """
    if given is None:
        return None
    if isinstance(given, Context) and not names:
        # the graph's environment is what it was built on (an agent's tools), not a setting to replace:
        # a whole Context naming none would otherwise run the goal in gridworld
        return (
            replace(given, default_env=own.default_env) if own and own.default_env and not given.default_env else given
        )
    wanted = names or _FIELD_ORDER
    if isinstance(given, Mapping):
        named = {name: given[name] for name in wanted if name in given}
    else:
        named = {name: getattr(given, name) for name in wanted if hasattr(given, name)}
    return replace(own or Context(), **named) if named else None


def refuse_loosening(given: Context | None, own: Context | None) -> None:
    """Refuse, in one line, a run whose context loosens a deployment's safety settings (`Context.loosened`);
    one without settings of its own (`own` None) locks nothing, and a context that is `own` loosens nothing.
    """
    if given is not None and own is not None and given is not own and (why := given.loosened(own)):
        raise PivotalError(why)


def context_schema(defaults: Context | None) -> type[Context]:
    """The Context type a graph hands LangGraph as its `context_schema`: unset fields take `defaults`.

    LangGraph builds the run's Context from a caller's dict (Studio, the SDK, `invoke(context={...})`)
    with the schema's own field defaults, so a graph built with settings (`create_pivotal_agent`)
    would lose them; with this schema a dict overrides only the keys it names, and Studio's form
    shows the graph's own settings as its defaults.
    """
    if defaults is None:
        return Context
    own = [(f.name, f.type, _default(getattr(defaults, f.name))) for f in fields(Context)]
    schema = make_dataclass("Context", own, bases=(Context,), kw_only=True)
    schema.__module__, schema.__doc__ = Context.__module__, Context.__doc__
    # setattr: a type checker cannot follow an __init__ replaced on a class made at run time
    setattr(schema, "__init__", _refuse_unknown_keys(vars(schema)["__init__"]))  # noqa: B010
    return schema


def _default(value: object) -> Any:
    if isinstance(value, str | int | float | bool | None):
        return field(default=value)  # plain values show in Studio's form
    return field(default_factory=lambda: list(value) if isinstance(value, list) else value)


def _refuse_unknown_keys(init: Callable[..., None]) -> Callable[..., None]:
    """A misspelt key (`{"modle": "sim"}` from Studio or an SDK) would otherwise be a bare TypeError."""

    def checked(self: Context, **values: Any) -> None:
        unknown = sorted(set(values) - Context.field_names())
        if unknown:
            hints = [difflib.get_close_matches(key, Context.field_names(), n=1) for key in unknown]
            named = ", ".join(f"{key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              for key, hint in zip(unknown, hints, strict=True))  # fmt: skip
            raise PivotalError(f"unknown context key {named}; the keys are the Context fields in docs/configuration.md")
        init(self, **values)

    return checked


Context.__init__ = _refuse_unknown_keys(Context.__init__)  # type: ignore[method-assign]
_FIELD_ORDER = tuple(f.name for f in fields(Context))
_UNSAVED = frozenset({"allow_other_models", "stream_roles", "double_text", "repeat_window_s"})
"""Settings of one call, not of the run: a resume names them afresh (a message's double-text policy
is read when it arrives, before its turn starts)."""
_FIELD_NAMES = frozenset(_FIELD_ORDER)


def model_label(model: str | BaseChatModel) -> str:
    """A model's name for logs, lesson provenance and messages: the spec, or the object's class and model."""
    if not isinstance(model, BaseChatModel):
        return model
    name = getattr(model, "model_name", None) or getattr(model, "model", None) or ""
    return f"{type(model).__name__}({name})" if name else type(model).__name__


def model_identity(model: BaseChatModel) -> str:
    """What a model object is, to tell it from another at a resume: its class, model name and
    endpoint (the address only: no credentials, path or query); never its keys or headers.
    """
    name = next((str(v) for a in _NAME_ATTRS if (v := getattr(model, a, None))), "")
    url = next((str(v) for a in _URL_ATTRS if (v := getattr(model, a, None))), "")
    where = urlsplit(url) if url else None
    endpoint = f"{where.scheme}://{where.hostname or ''}{f':{where.port}' if where.port else ''}" if where else ""
    return f"{type(model).__module__}.{type(model).__qualname__}(model={name!r}, endpoint={endpoint!r})"


_NAME_ATTRS = ("model_name", "model", "deployment_name", "model_id")
_URL_ATTRS = ("openai_api_base", "anthropic_api_url", "base_url", "azure_endpoint", "endpoint", "api_base")


def _same_model(name: str, saved: dict[str, Any], given: BaseChatModel, allowed: bool) -> None:
    """Refuse a resume whose model object is not the one the run paused with, unless allowed."""
    if why := model_change(name, saved.get("identity"), given, allowed):
        raise PivotalError(why)


def model_change(
    name: str, paused: str | None, given: "str | BaseChatModel", allowed: bool, where: str = "the resume's context"
) -> str:
    """Why going on with `given` where the run paused with the model `paused` identified is refused,
    in one line, or "" (the same model, allowed, or nothing recorded: a thread from before identities).
    `where` says where `allow_other_models=True` goes.
    """
    now = model_identity(given) if isinstance(given, BaseChatModel) else given
    if paused is None or allowed or now == paused:
        return ""
    return (
        f"this run's {name} paused with {paused} but the resume gives {now}; pass the same model object, "
        f"or set allow_other_models=True in {where} to go on with this one"
    )


def _saved(value: object) -> Any:
    if type(value) in _PLAIN:  # most settings: every node entry compares them (graphs/builder.py `_context`)
        return value
    if isinstance(value, BaseChatModel):
        return {"model_object": model_label(value), "identity": model_identity(value)}
    return list(value) if isinstance(value, list) else value


_PLAIN = frozenset((str, int, float, bool, type(None)))
"""Setting values saved as they are: no model object's check (an ABC's, slow) is needed for them."""


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PivotalError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")


_VETO = {False: 0, None: 1, True: 2}
"""critic_veto from loosest to tightest: None (auto) can mean no veto (the embedded model)."""


def _more(name: str) -> Callable[[Any, Any, Context, Context], bool]:
    """A limit: more of it loosens (compared as the limit in force, so None means its fallback)."""
    allowed = {
        "max_precheck_bounces": Context.precheck_bounces_allowed,
        "max_human_rejections": Context.human_rejections_allowed,
        "max_refusals_per_turn": Context.refusals_allowed,
    }.get(name)
    if allowed is None:
        return lambda given, own, *_: given > own
    return lambda _given, _own, run, deployment: allowed(run) > allowed(deployment)


def _approval_names(value: object) -> list[str]:
    """`require_approval_for` as a list: None asks for no approval, as an empty list does; a bare
    name is refused, since iterating it would ask for approval of its letters.
    """
    if value is None:
        return []
    if (
        isinstance(value, str)
        or not isinstance(value, Collection)
        or not all(isinstance(name, str) and name for name in value)
    ):
        raise PivotalError(
            f"require_approval_for must be a list of action names, '*' or 'irreversible' (got {value!r}); "
            f"e.g. require_approval_for=['refund']"
        )
    return list(value)


def _observed_names(value: Any) -> list[str]:
    """`observe_only` as a list of names: True is every action ("*"), False or None none."""
    if value is True:
        return ["*"]
    if value is False or value is None:
        return []
    if isinstance(value, str) or not all(isinstance(name, str) and name for name in value):
        raise PivotalError(f"observe_only must be True, False or a list of action names (got {value!r})")
    return list(value)


def _more_observed(given: list[str], own: list[str], *_: Any) -> bool:
    """Watching an action the deployment's critic blocks loosens it: a run may only watch fewer."""
    return "*" not in own and any(name == "*" or name not in own for name in given)


def _fewer_approvals(given: list[str], own: list[str], *_: Any) -> bool:
    """A run's list must cover the deployment's: "*" covers every action, "irreversible" only itself
    (which names the environment marks irreversible is not known here), a name itself or "*".
    """
    return "*" not in given and any(name not in given for name in own)


_LOOSER: dict[str, Callable[[Any, Any, Context, Context], bool]] = {
    "require_approval_for": _fewer_approvals,
    "observe_only": _more_observed,
    "critic": lambda given, own, *_: own and not given,
    "precheck": lambda given, own, *_: own and not given,
    "model_screen": lambda given, own, *_: own and not given,
    "critic_veto": lambda given, own, *_: _VETO[given] < _VETO[own],
    "on_critique_exhausted": lambda given, own, *_: own == "fail" and given != "fail",
    **{
        name: _more(name)
        for name in (
            "max_steps",
            "max_pivot_retries",
            "max_critique_rounds",
            "max_precheck_bounces",
            "max_human_rejections",
            "max_model_calls_per_turn",
            "max_refusals_per_turn",
        )
    },
}
"""The safety settings a run's context may tighten but never loosen, each with its test of looser."""
SAFETY_FIELDS = tuple(_LOOSER)
