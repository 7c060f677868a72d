"""Graph state and every shape that flows through it, typed once, here.

Values are plain JSON so every checkpointer stores and reloads them as-is (and Studio shows
them as they are). Lists that a pivot cuts back (the trajectory) are replaced whole by the
node that changes them; only the counters add up, through `add_counts`. The structured LLM
replies these shapes are built from are in `pivotal.core.schemas`.

`typing_extensions.TypedDict`, not `typing.TypedDict`: on Python 3.11 the LangGraph server
cannot build Studio's input and output forms from the latter.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, cast

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from pivotal.core.schemas import Decision, ErrorType, LessonKind, LessonLevel, Outcome
from pivotal.core.task import Task

Rewind = Literal["snapshot", "replay", "compensate", "forward"]
"""How an environment goes back to the state before the pivotal step:

- `snapshot`: `restore()` puts the world back (simulators, sandboxes, savepoints);
- `replay`: reset, then the kept actions again; only for environments that declare it
  (deterministic and free of side effects, e.g. a seeded simulator);
- `compensate`: the abandoned steps' compensating actions run, newest first, each reviewed
  by the critic like any action (the saga pattern: `refund` → `reverse_refund`);
- `forward`: the world cannot go back; the retry goes on from the real state, with the
  reflection and the abandoned steps shown as done. A tool is never re-run to rebuild state.
"""

Status = Literal["running", "success", "failure"]
VerdictSource = Literal[
    "precheck", "guard", "critic", "critic-advisory", "critic-fallback", "actor", "none", "human", "observe"
]
"""Who decided: the deterministic pre-check, the guard against repeating an irreversible action
(`pivotal.core.environments.once`), the LLM critic (its reject made advisory for a
critic without veto, or its safe fallback), an empty actor reply, no critic at all, a person, or
nobody: a critic that only watches this action (`Context.observe_only`) let it through."""


def add_counts(current: dict[str, Any] | None, update: dict[str, Any] | None) -> dict[str, Any]:
    """Add numbers key by key (nested dicts too), so nodes report deltas, never totals."""
    merged = dict(current or {})
    for key, value in (update or {}).items():
        if isinstance(value, dict):
            merged[key] = add_counts(merged.get(key), value)
        else:
            merged[key] = merged.get(key, 0) + value
    return merged


def counts_since(total: dict[str, Any] | None, before: dict[str, Any] | None) -> dict[str, Any]:
    """What `add_counts` added after `before`, key by key (nested dicts too)."""
    left = dict(total or {})
    for key, value in (before or {}).items():
        if isinstance(value, dict):
            left[key] = counts_since(left.get(key), value)
            if all(isinstance(n, int | float) and abs(n) < 1e-9 for n in left[key].values()):
                del left[key]  # a role no call of this turn used is absent, as in a first turn
        elif key in left:
            left[key] = left[key] - value
    return left


def turn_counts(values: Mapping[str, Any], key: str = "counters") -> dict[str, Any]:
    """The current turn's own `counters` (or `usage`): the thread's, less what earlier turns had counted."""
    opened_with = (values.get("turn") or {}).get("opened_with") or {}
    return counts_since(values.get(key) or {}, opened_with.get(key))


def append_list(current: list[Any] | None, update: list[Any] | None) -> list[Any]:
    """A record only ever added to."""
    return [*(current or []), *(update or [])]


class Proposal(TypedDict, total=False):
    """An action to take: the actor's, a pivot's compensation, or the one chosen to execute."""

    action: str
    arguments: dict[str, Any]
    thought: str
    error: str
    """Why the actor's reply was unusable (its safe fallback was used); empty otherwise."""
    compensates: int | None
    """Index of the abandoned step this action undoes (a pivot's compensation)."""
    needs_approval: bool
    """Chosen, but a person must approve it first (`require_approval_for`)."""
    review: str
    """The critic's verdict that chose it (the same id on that Critique): the executor runs an
    irreversible action only on a review of this branch that no execution used up."""
    repeat: str
    """Why it repeats an executed irreversible call (the once-guard's reason): chosen only to ask a
    person, and run only on a re-approval (a person's approving Critique carries it too)."""


class Observed(TypedDict, total=False):
    """What a critic that only watches (`Context.observe_only`) said of a call it let through: its own
    verdict, kept so a report can weigh it against what then happened (`pivotal critic report`).
    """

    decision: Decision
    confidence: float
    diagnosis: str
    revision: str
    source: VerdictSource
    would_block: bool
    """The verdict would have kept the call from running (anything but an approval)."""


class Critique(Proposal, total=False):
    """A verdict on one proposal, with the proposal it judged."""

    decision: Decision
    confidence: float
    diagnosis: str
    revision: str
    source: VerdictSource
    observed: Observed
    """The watching critic's own verdict, where this one (an approval, source "observe") replaced it."""


class Observation(Observed, total=False):
    """One watched review in the thread's record (`State.critic_observed`): the call, where it was
    proposed (its run and step key, `pivotal.core.environments.once.step_key`), and the review that
    let it through (the `review` id its executed step carries).
    """

    review: str
    run_id: str
    key: str
    action: str
    arguments: dict[str, Any]
    tool_call_id: str
    """The agent's tool call, on the `create_agent` face (`PivotalCritic`): its review entry has the same id."""


class Step(TypedDict, total=False):
    """One executed environment step."""

    index: int
    action: str
    arguments: dict[str, Any]
    thought: str
    verdicts: list[Critique]
    observation: str
    done: bool
    success: bool
    snapshot: dict[str, Any] | None
    checkpoint_id: str | None
    """LangGraph checkpoint just before this step executed: fork from it in Studio."""
    lessons: list[str]
    error: bool
    """The action raised (a tool error): nothing to compensate."""
    compensates: int | None
    """Index of the abandoned step this compensating action undid."""
    review: str
    """The review it ran on, spent by running: a fork that hands it to the executor again is sent back."""
    key: str
    """Its idempotency key (run, attempt, index): a replay or fork that reaches the same step with the
    same call takes this step as done instead of running the tool again."""
    state: Any
    """The world's state after the step as the environment reports it (`info["state"]`, JSON), or
    None when it does not say: compared with earlier steps' to tell a return to where the agent was."""
    revisit_of: int | None
    """The earlier step of this attempt after which the world was exactly as now (-1: as at the start),
    or None: the prompts show it (and with `loop_detection="end"` a second return ends the attempt)."""
    no_op: bool
    """The step left the world as it was (its state equals the one before it; without a state, the same
    call saw the same observation at an earlier step of this attempt)."""
    repeat_of: int | None
    """The first earlier step of this attempt that made the same call from the same state, or None."""
    goal_steps_left: int | None
    """The environment's `steps_to_goal` after the step (None: out of reach); absent when it cannot
    say. A replay that takes this step as done ends the attempt here just as the first run did."""


class Reflection(TypedDict, total=False):
    """The reflector's account of a failed attempt, and what the pivot then did."""

    pivotal_step: int
    no_return_step: int
    """The first step after which the goal was out of reach (>= pivotal_step): `pivot="no_return"` redoes it."""
    steps_left_at_pivotal: int | None
    steps_left_at_no_return: int | None
    """The reflection's estimates of the steps still needed from each restart point: `pivot="best"` reads them."""
    error_type: ErrorType
    diagnosis: str
    advice: str
    attempt: int
    failure: str
    failed_path: list[list[Any]]
    """[action, arguments] of the steps up to and including the pivotal one."""
    attempt_path: list[list[Any]]
    """[action, arguments] of every step on the failed attempt's path (kept ones included): what the
    bench scores the pivotal step against (pivotal.bench.pivot_truth)."""
    held_moves: list[list[Any]]
    """[step index, state before, action, arguments] of the steps the run's own record vouches for
    (`nodes/reflector.py`, `moves_that_held`): shown to a retry's actor when it stands in that state
    again, where `Context.reuse_moves` allows."""
    rewind: Rewind
    kept_steps: int
    not_undone: list[int]
    """Abandoned steps the world still holds (forward / compensate): shown to the actor as done."""


class Candidate(TypedDict, total=False):
    """A lesson on its way to the store: drafted, matched against the store, then gated."""

    kind: LessonKind
    situation: str
    text: str
    outcome: Outcome
    level: LessonLevel
    verified: bool
    """False when the run's outcome was declared by the agent or judged by a model, not checked."""
    duplicate_of: str
    """Id of the stored lesson it only adds evidence to (set by dedup, the last part of distill's node entry), or ""."""
    similarity: float
    verdict: Literal["approve", "reject"]
    verdict_reason: str
    advice: str
    """The lesson's own words, composed from the run's trusted record (memory/lesson/provenance.py)."""
    provenance: str
    """Where each span of advice, situation and text came from (JSON, memory/lesson/provenance.py)."""


class Recalled(TypedDict):
    """A stored lesson recalled for the current step."""

    id: str
    kind: LessonKind
    situation: str
    text: str
    similarity: float
    advice: NotRequired[str]
    provenance: NotRequired[str]
    """Absent for a lesson stored before provenance: rendered as it always was."""


class Turn(TypedDict, total=False):
    """One turn of a thread's conversation: a new human message (or a new task) and what came of it.

    A thread is a conversation: each turn has its own goal, run id, step budget and result, and the
    turns before it are context its actor and critic read (`<earlier_turns>`).
    """

    goal: str
    task_id: str
    question_id: str
    """The newest human message when the turn opened ("" when none): a later one opens the next turn."""
    run_id: str
    status: Status | Literal["interrupted", ""]
    """How the turn ended; "interrupted" when a new turn began while it waited, "" when unknown (a
    conversation handed in as messages, e.g. by a parent graph)."""
    answer: str
    """The final answer, or why the turn could not finish; an earlier reply, for a handed-in conversation."""
    actions: list[list[Any]]
    """[action, arguments] of each step the turn executed."""
    opened_with: dict[str, Any]
    """The thread's `counters` and `usage` as the turn opened (none on a first turn): they add up over
    the thread, so a turn's step budget and its result count from here (`turn_counts`)."""


class InputState(TypedDict, total=False):
    """What a caller (or LangGraph Studio) passes in."""

    task: dict[str, Any] | str
    """A `Task` as a dict, or just a goal string for the default environment."""
    messages: Annotated[list[AnyMessage], add_messages]
    """A chat instead of a task: the last human message is the goal; the run appends its reply. A
    human message that came after the last turn opened starts a new turn (see `Turn`)."""
    run_id: str
    """Set by the runners (`arun`, `run_batch`) so they can release the run's environment; new if absent."""
    run_settings: dict[str, Any]
    """The run's Context as given at start, so a resume anywhere runs with the same settings."""
    plugins: list[str]
    """Modules the CLI imported to register the run's environment; a resume imports them again."""


class OutputState(TypedDict, total=False):
    """What a run returns: the outcome and its record, not the graph's working keys."""

    task: dict[str, Any]
    run_id: str
    status: Status
    reason: str
    answer: str
    verified: bool
    messages: Annotated[list[AnyMessage], add_messages]
    turn: "Turn"
    """The current turn as it opened: what its `counters` and `usage` count from (`turn_counts`)."""
    turns: list["Turn"]
    trajectory: list["Step"]
    reflections: list["Reflection"]
    retries: int
    recalled: list[str]
    candidates: list["Candidate"]
    approved_lessons: list["Candidate"]
    counters: Annotated[dict[str, Any], add_counts]
    usage: Annotated[dict[str, Any], add_counts]


class NodeResult(TypedDict, total=False):
    """What a parent graph that embeds Pivotal as a node can read: declare `pivotal_result` in its state."""

    status: Status
    reason: str
    answer: str
    verified: bool
    run_id: str
    retries: int
    actions: list[list[Any]]
    """[action, arguments] of each step the run executed (the observations stay in Pivotal's own state)."""
    usage: dict[str, Any]
    """Per role: calls, input_tokens, output_tokens, seconds, fallbacks (as the run's `usage`)."""


class State(InputState, total=False):
    pivotal_result: NodeResult
    """The run's outcome under a name no parent uses for its own (`status` stays the parent's)."""
    turn: Turn
    """The current turn as it opened; `status`, `answer`, `trajectory` and the rest are this turn's."""
    turns: list[Turn]
    """The thread's finished turns, oldest first (`respond` adds each), and earlier turns of a
    conversation handed in as messages."""
    status: Status
    reason: str
    answer: str
    """The agent's final answer (`finish(answer)`), when the environment takes one."""
    verified: bool
    """False when the agent declared success and nothing checked it (no verifier)."""
    observation: str
    first_observation: str
    instance: str
    """Which world this run acts in (a maze, a game), when the environment names one: lessons
    taught by one instance are recalled only there until another teaches the same."""
    initial_state: Any
    """The world right after reset (`state_of`), to tell when a step returns there."""
    trajectory: list[Step]
    proposal: Proposal | None
    critiques: list[Critique]
    """Verdicts for the step being decided (cleared when a step executes)."""
    chosen: Proposal | None
    """The proposal the executor will run (approved, or the best one when critique rounds ran out)."""
    attempt_failed: str
    """Why the current attempt failed; non-empty sends the run to the reflector."""
    stuck: bool
    """The attempt failed before acting: no proposal for the current step passed the pre-check and
    critic. No executed step was wrong, so the pivot is the current step."""
    reflections: list[Reflection]
    retries: int
    attempt_start: int
    """Trajectory length when this attempt began: the step budget counts the steps after it.
    The kept prefix's length after a pivot (Context.budget "new"; with "path", 0 when the world
    was rewound); the whole length when the world could not go back and the retry goes forward."""
    compensations: list[Proposal]
    """Compensating actions a pivot queued (newest abandoned step first); the actor proposes
    them before anything else and the critic reviews each like any action."""
    lessons: list[Recalled]
    """Lessons recalled for the current step."""
    recall_key: str
    """The run and situation `lessons` were recalled for (the run alone for task-start recall): a
    step in the same situation keeps them and the actor's entry recalls nothing first
    (nodes/recall.py `wanted`)."""
    recalled: list[str]
    candidates: list[Candidate]
    approved_lessons: list[Candidate]
    written: list[str]
    retired: list[str]
    counters: Annotated[dict[str, Any], add_counts]
    """executed, replayed, reused (steps a replay or fork took as done), llm_calls, approved, revised,
    rejected, prechecked, fallbacks."""
    usage: Annotated[dict[str, Any], add_counts]
    """Per role: calls, input_tokens, output_tokens, seconds, fallbacks."""
    critic_observed: Annotated[list[Observation], append_list]
    """Every review a watching critic let through (`observe_only`), oldest first: never cut back by a
    pivot or a new turn, so the thread's latest checkpoint alone holds the whole record."""


class Spent(TypedDict, total=False):
    """What a node's model calls cost, as deltas (`add_counts` adds them to the run's): `ask_role` hands
    them to the node that asked, which returns them with its own update.
    """

    counters: dict[str, Any]
    usage: dict[str, Any]


def add_spent(one: Spent, other: Spent) -> Spent:
    """Two calls' costs as one: both keys, each added key by key."""
    return {
        "counters": add_counts(one.get("counters"), other.get("counters")),
        "usage": add_counts(one.get("usage"), other.get("usage")),
    }


# What each node returns: a partial update of `State`, its keys and their types checked where the node
# builds it (LangGraph merges it by the reducers declared on `State`). `start` opens a turn and sets
# every working key, so it returns a `State`.


class ActorUpdate(Spent, total=False):
    proposal: Proposal | None
    compensations: list[Proposal]


class CriticUpdate(Spent, total=False):
    critiques: list[Critique]
    chosen: Proposal | None
    attempt_failed: str
    stuck: bool
    verified: bool
    critic_observed: list[Observation]


class ApprovalUpdate(Spent, total=False):
    chosen: Proposal | None
    critiques: list[Critique]
    attempt_failed: str


class ExecutorUpdate(Spent, total=False):
    trajectory: list[Step]
    observation: str
    proposal: Proposal | None
    chosen: Proposal | None
    critiques: list[Critique]
    answer: str
    status: Status
    verified: bool
    reason: str
    attempt_failed: str


class RecallUpdate(Spent, total=False):
    lessons: list[Recalled]
    recalled: list[str]
    recall_key: str


class ReflectorUpdate(Spent, total=False):
    reflections: list[Reflection]
    candidates: list[Candidate]
    status: Status
    reason: str


class PivotUpdate(Spent, total=False):
    trajectory: list[Step]
    observation: str
    attempt_failed: str
    stuck: bool
    reflections: list[Reflection]
    retries: int
    proposal: Proposal | None
    chosen: Proposal | None
    critiques: list[Critique]
    compensations: list[Proposal]
    attempt_start: int


class LessonUpdate(Spent, total=False):
    """distill, dedup, gate and memory_writer: the lessons on their way to the store, and what was stored."""

    candidates: list[Candidate]
    approved_lessons: list[Candidate]
    written: list[str]
    retired: list[str]


class RespondUpdate(TypedDict, total=False):
    messages: list[AnyMessage]
    turns: list[Turn]
    pivotal_result: NodeResult


def task_of(state: "State") -> Task:
    """The run's task as `start` validated it (redacted, its family and goal filled in): validated once,
    at the edge, and read as it is by every node after it. `start` writes it whole, so nothing is
    missing and nothing is checked twice.
    """
    task = state["task"]
    return task if isinstance(task, Task) else Task.model_construct(**cast(dict[str, Any], task))


def state_before(state: "State", index: int) -> Any:
    """The world's state just before step `index` ran (after reset for step 0), or None when unknown."""
    if index == 0:
        return state.get("initial_state")
    return state["trajectory"][index - 1].get("state")


def same_call(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """The same action with the same arguments (a step, a verdict or a proposal): what repeats a call."""
    return one.get("action") == other.get("action") and (one.get("arguments") or {}) == (other.get("arguments") or {})


def turn_summary(state: State, status: str = "") -> Turn:
    """The current turn as the thread keeps it once it ends: goal, outcome, the actions it executed."""
    status = status or state.get("status", "")
    said = state.get("answer") if status == "success" else state.get("reason")
    return cast(
        Turn,
        {
            **{
                k: v
                for k, v in (state.get("turn") or {"run_id": state.get("run_id", "")}).items()
                if k != "opened_with"
            },
            "status": status,
            "answer": str(said or ""),
            "actions": [[step["action"], step["arguments"]] for step in state.get("trajectory") or []],
        },
    )
