"""The graph end to end with `sim` models: critic before execution, pivotal retry, checkpoints."""

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.graphs import arun, build_graph
from pivotal.nodes.recall import recall_key, wanted
from pivotal.testing.envs import ReplayOnlyGridWorld, Vault

register_environment("vault", Vault)
register_environment("vault-policy", lambda: Vault(forbid_in_precheck=True))
replay_envs: list[ReplayOnlyGridWorld] = []


def _replay_only() -> ReplayOnlyGridWorld:
    env = ReplayOnlyGridWorld()
    replay_envs.append(env)
    return env


register_environment("gridworld-replay", _replay_only)

OFFLINE = dict(memory=False, max_pivot_retries=0)
FAILING_SEED = dict(model="sim:error=0.35,seed=5", critic=False, memory=False, max_steps=12)
FAILING_TASK = {"env": "gridworld", "params": {"seed": 7}}
"""Measured: without a critic this actor (model seed 5) fails its first attempt on gridworld seed 7."""


async def run(task, **context):
    return await arun(task, Context(**context), checkpoint_path=":memory:")


def _proposed(result, decision: str) -> set[str]:
    return {v["action"] for s in result.trajectory for v in s["verdicts"] if v["decision"] == decision}


async def test_llm_critic_rejection_keeps_fatal_action_from_running():
    result = await run(
        {"goal": "open the vault", "env": "vault"},
        actor_model="sim:error=1.0,seed=4",
        critic_model="sim",
        precheck=False,
        max_steps=4,
        **OFFLINE,
    )
    rejected = [c for s in result.trajectory for c in s["verdicts"] if c["action"] == "wipe_disk"]
    assert rejected and all(c["decision"] == "reject" and c["source"] == "critic" for c in rejected)
    assert "wipe_disk" not in Vault.executed
    assert Vault.executed == [s["action"] for s in result.trajectory]


async def test_precheck_rejects_on_its_own_with_the_llm_critic_off():
    sources, executed = set(), []
    for seed in range(6):
        result = await run(
            {"goal": "open the vault", "env": "vault-policy"},
            model=f"sim:error=1.0,seed={seed}",
            critic=False,
            max_steps=4,
            **OFFLINE,
        )
        sources |= {c["source"] for s in result.trajectory for c in s["verdicts"] if c["action"] == "wipe_disk"}
        executed += Vault.executed
        assert result.usage.get("critic") is None  # no LLM critic call was made
    assert sources == {"precheck"}
    assert "wipe_disk" not in executed


async def test_precheck_stops_moves_into_walls_in_gridworld():
    result = await run(
        {"env": "gridworld", "params": {"seed": 2}}, model="sim:error=0.5,seed=4", critic=False, max_steps=12, **OFFLINE
    )
    assert result.critic["prechecked"] > 0  # a seed whose actor walks into a wall
    for step in result.trajectory:
        blocked = {v["action"] for v in step["verdicts"] if v["source"] == "precheck"}
        assert step["action"] not in blocked


STUCK_AT_THE_CRITIC = {
    "actor_model": "sim:error=1.0,seed=3",
    "critic_model": "sim",
    "max_critique_rounds": 1,
    "on_critique_exhausted": "fail",
    "max_steps": 4,
}
"""An actor that only proposes wrong moves, a critic that catches each: no step passes the critic."""


async def test_critique_loop_is_bounded_and_takes_the_fail_path():
    result = await run(
        {"goal": "open the vault", "env": "vault"},
        **STUCK_AT_THE_CRITIC,
        **OFFLINE,
    )
    assert result.status == "failure"
    assert result.reason.startswith("no acceptable action after 2 proposals")
    assert result.executed == 0 and Vault.executed == []


async def test_execute_best_runs_a_revised_proposal_never_a_rejected_one():
    result = await run(
        {"goal": "open the vault", "env": "vault"},
        actor_model="sim:error=1.0,seed=3",
        critic_model="sim",
        max_critique_rounds=1,
        max_steps=2,
        **OFFLINE,
    )
    assert result.executed == 2
    for step in result.trajectory:
        assert step["action"] == "noop"  # the revised proposal; wipe_disk was rejected
        assert len(step["verdicts"]) <= 2 * (1 + 1)


async def test_pivotal_retry_recovers_with_fewer_steps_than_full_retry():
    # measured with pivot first_mistake (17 steps); full retry fails, its last attempt ended by the
    # environment's steps_to_goal once the goal no longer fitted its budget (17 steps; 21 without that rule)
    pivotal = await run(FAILING_TASK, retry="pivotal", pivot="first_mistake", **FAILING_SEED)
    full = await run(FAILING_TASK, retry="full", **FAILING_SEED)
    none = await run(FAILING_TASK, retry="none", **FAILING_SEED)
    assert none.status == "failure" and none.retries["count"] == 0
    assert pivotal.status == "success" and pivotal.retries["count"] >= 1
    assert pivotal.retries["kept_steps"] > 0
    assert full.status == "failure" and pivotal.executed <= full.executed
    assert all(r["pivotal_step"] <= len(pivotal.trajectory) for r in pivotal.reflections)


@pytest.mark.slow
async def test_pivotal_retry_beats_full_retry_over_thirty_seeds():
    """Thirty, not ten: over ten seeds one task either way decides it (measured 7 vs 8 after a prompt
    edit reseeded the sim; over thirty, 20 vs 16 with fewer steps).
    """
    totals = {"pivotal": [0, 0], "full": [0, 0]}
    for seed in range(30):
        for retry in totals:
            result = await run(
                {"env": "gridworld", "params": {"seed": seed}},
                retry=retry,
                **{**FAILING_SEED, "model": f"sim:error=0.35,seed={seed}"},
            )
            totals[retry][0] += result.status == "success"
            totals[retry][1] += result.executed
    (pivotal_wins, pivotal_steps), (full_wins, full_steps) = totals["pivotal"], totals["full"]
    assert pivotal_wins >= full_wins and pivotal_steps < full_steps


async def test_pivot_without_snapshots_resets_and_replays_the_kept_steps():
    replay_envs.clear()
    task = {"env": "gridworld-replay", "params": {"seed": 7}}
    result = await run(task, retry="pivotal", **FAILING_SEED)
    assert result.status == "success"
    assert result.replayed >= result.retries["kept_steps"] > 0
    env = replay_envs[-1]
    assert env.steps_run == result.executed + result.replayed  # replays ran in the env ...
    assert result.llm_calls == sum(u["calls"] for u in result.usage.values())  # ... and cost no LLM call


async def test_reflection_reaches_the_actor_after_a_pivot():
    result = await run(FAILING_TASK, retry="pivotal", **FAILING_SEED)
    reflection = result.reflections[0]
    assert set(reflection) >= {"pivotal_step", "error_type", "diagnosis", "advice", "attempt", "failure"}
    assert reflection["failure"]


async def test_every_step_records_a_checkpoint_to_fork_from():
    saver = InMemorySaver()
    result = await arun(
        {"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", memory=False), checkpointer=saver
    )
    graph = build_graph(checkpointer=saver)
    ids = [s["checkpoint_id"] for s in result.trajectory]
    assert ids and all(ids)
    for index, checkpoint_id in enumerate(ids):
        config = {"configurable": {"thread_id": result.thread_id, "checkpoint_id": checkpoint_id}}
        snapshot = await graph.aget_state(config)
        assert snapshot.next == ("executor",)
        assert len(snapshot.values["trajectory"]) == index


async def test_sqlite_checkpointer_is_the_default(tmp_path):
    path = tmp_path / "checkpoints.sqlite"
    result = await arun(
        {"env": "gridworld", "params": {"seed": 1}}, Context(model="sim", memory=False), checkpoint_path=str(path)
    )
    assert result.status == "success" and path.stat().st_size > 0


async def test_graph_input_accepts_a_bare_goal_string():
    graph = build_graph()
    final = await graph.ainvoke({"task": "Reach G."}, context=Context(model="sim", memory=False))
    assert final["status"] == "success" and final["task"]["env"] == "gridworld"


@pytest.mark.parametrize("env", ["gridworld", "frozenlake", "taxi", "configs"])
async def test_perfect_models_solve_built_in_environments(env):
    result = await run({"env": env, "params": {"seed": 3}}, model="sim", **OFFLINE)
    assert result.status == "success"
    assert result.critic == {
        "approved": result.executed,
        "revised": 0,
        "rejected": 0,
        "prechecked": 0,
        "human_approved": 0,
        "human_rejected": 0,
    }


async def test_the_compiled_graph_runs_without_context_or_recursion_limit(monkeypatch, tmp_path):
    """Embedded as `graphs.graph` and streamed directly: the documented defaults, and only the Context
    bounds end the run (LangGraph's own default ceiling of 25 nodes would stop it after a few steps).
    """
    from pivotal.core.settings import settings
    from pivotal.graphs import graph

    monkeypatch.setenv("PIVOTAL_MODEL", "sim:error=0.35,seed=7")
    monkeypatch.setenv("PIVOTAL_STORE_PATH", str(tmp_path / "store"))
    settings.cache_clear()
    try:
        task = {"task": {"env": "gridworld", "params": {"seed": 7}}}
        nodes = [chunk async for chunk in graph.astream(task, context={"memory": False, "max_steps": 12})]
        default = await graph.ainvoke({"task": "Reach G."}, context=None)
    finally:
        settings.cache_clear()
    assert len(nodes) > 25 and "respond" in nodes[-1]
    assert default["status"] == "success"


async def test_astream_events_needs_no_recursion_limit_and_streams_the_models():
    """LangChain's `astream_events` sets a ceiling of 25 nodes unless told otherwise; the graph keeps its
    own, and every role's reply streams as chat-model chunks, reaching the same result as `ainvoke`.
    """
    graph = build_graph()
    task = {"task": {"env": "gridworld", "params": {"size": 8}}}
    context = Context(model="sim", memory=False, max_steps=30)
    invoked = await graph.ainvoke(task, context=context)
    events = [event async for event in graph.astream_events(task, context=context, version="v2")]
    final = next(
        e["data"]["output"] for e in reversed(events) if e["event"] == "on_chain_end" and e["name"] == "pivotal"
    )
    node_starts = [e for e in events if e["event"] == "on_chain_start" and e["name"] in ("actor", "critic", "executor")
                   and e["metadata"].get("langgraph_node") == e["name"]]  # fmt: skip
    assert len(node_starts) > 25
    assert any(e["event"] == "on_chat_model_stream" for e in events)

    def moves(result):
        return [(step["action"], step["arguments"], step["observation"]) for step in result["trajectory"]]

    assert invoked["status"] == final["status"] == "success"
    assert moves(final) == moves(invoked)


async def test_a_parent_streaming_events_without_recursion_limit_does_not_cut_the_run_short():
    """As a parent's node, Pivotal keeps its own ceiling: the parent's `astream_events` passes down an
    explicit 25, and only the Context bounds may end the run.
    """

    class Parent(MessagesState):
        pivotal_result: dict

    parent = StateGraph(Parent)
    parent.add_node("agent", build_graph(context=Context(model="sim:error=0.35,seed=7", memory=False, max_steps=12)))
    parent.add_edge(START, "agent")
    chat = {"messages": [HumanMessage("Reach G.")]}
    events = [event async for event in parent.compile().astream_events(chat, version="v2")]
    final = next(
        e["data"]["output"] for e in reversed(events) if e["event"] == "on_chain_end" and e["name"] == "LangGraph"
    )
    node_starts = [e for e in events if e["event"] == "on_chain_start" and e["name"] in ("actor", "critic", "executor")]
    assert len(node_starts) > 25 and final["pivotal_result"]["status"] == "success"


@pytest.mark.parametrize(("budget", "attempt_start"), [("new", 3), ("path", 0), ("fair", 0)])
async def test_a_pivotal_retry_gets_a_full_budget_of_new_steps(budget, attempt_start):
    """Kept steps are not the retry's: with budget "new" it may execute max_steps steps of its own."""
    from langgraph.runtime import Runtime

    from pivotal.core.environments.live import open_live, release, run_step
    from pivotal.core.task import Task
    from pivotal.nodes.pivot import pivot

    task = Task(env="gridworld", params={"seed": 3})
    live = open_live("budget-run", task)
    trajectory = []
    for index, move in enumerate(["up", "left", "down", "right"]):
        result, snapshot = run_step(live, move, {}, f"k{index}")
        trajectory.append({"index": index, "action": move, "arguments": {}, "observation": result.observation,
                           "snapshot": snapshot})  # fmt: skip
    state = {"run_id": "budget-run", "task": task.model_dump(), "trajectory": trajectory, "first_observation": "",
             "reflections": [{"pivotal_step": 3}], "retries": 0}  # fmt: skip
    try:
        update = await pivot(state, Runtime(context=Context(model="sim", budget=budget)))
    finally:
        release("budget-run")
    assert len(update["trajectory"]) == 3 and update["attempt_start"] == attempt_start


class Seesaw:
    """An expert that only ever undoes its last move: the `down, up, down, up` of a stuck agent."""

    def reset(self, task):
        self.position = 0
        return "You are at 0. The goal is at 5."

    def step(self, name, arguments):
        from pivotal.core.environments import StepResult

        self.position += 1 if name == "right" else -1
        return StepResult(f"You moved {name}. You are at {self.position}. The goal is at 5.")

    def describe_actions(self):
        from pivotal.core.environments import ActionSpec

        return [ActionSpec("left", "move left"), ActionSpec("right", "move right")]

    def state_key(self):
        return self.position

    def expert_action(self):
        return ("right" if self.position <= 0 else "left"), {}

    def judge(self, name, arguments):
        return "good", f"{name} looks fine"

    def first_mistake(self, actions):
        return 0, "the first move started the circle"


async def test_going_in_circles_is_noticed_shown_and_ends_the_attempt_under_end():
    register_environment("seesaw", Seesaw)
    context = Context(model="sim", memory=False, max_steps=20, max_pivot_retries=0, loop_detection="end")
    result = await arun({"env": "seesaw", "goal": "Reach 5."}, context, checkpoint_path=":memory:")
    assert result.status == "failure" and result.reason.startswith("going in circles")
    assert result.executed < 20  # not the whole budget
    assert result.revisits >= 3
    assert [s["revisit_of"] for s in result.trajectory[:3]] == [None, -1, 0]
    from pivotal.prompts.show import history

    assert "(back where you started: a circle)" in history(result.trajectory[:2])


async def test_an_attempt_stuck_at_the_critic_pivots_at_the_current_step_without_blaming_a_step():
    """No proposal got past the critic: no executed step was wrong, so none is blamed, no model is
    asked, and the retry keeps everything done so far.
    """
    result = await run(
        {"goal": "open the vault", "env": "vault"},
        **STUCK_AT_THE_CRITIC,
        memory=False,
        max_pivot_retries=1,
    )
    reflection = result.reflections[0]
    assert reflection["error_type"] == "no_acceptable_action"
    assert reflection["pivotal_step"] == 0 and reflection["diagnosis"].startswith("no acceptable action")
    assert "reflector" not in result.usage


async def _entered(tmp_path, **context) -> tuple[list[str], dict]:
    """The nodes a run entered, in order, and its final state."""
    entered, _, final = await _entered_and_recalls(tmp_path, **context)
    return entered, final


async def _entered_and_recalls(tmp_path, **context) -> tuple[list[str], int, dict]:
    """The nodes a run entered, in order; how many of the actor's entries recalled first (their
    update carries the `recall_key` recall writes); and the run's final state.
    """
    graph = build_graph(checkpointer=InMemorySaver())
    task = {"task": {"env": "gridworld", "params": {"seed": 1}}}
    config = {"configurable": {"thread_id": "t"}}
    settings = Context(model="sim", store_path=str(tmp_path / "store"), max_pivot_retries=0, **context)
    chunks = [chunk async for chunk in graph.astream(task, config, context=settings)]
    entered = [name for chunk in chunks for name in chunk]
    recalls = sum("recall_key" in (chunk.get("actor") or {}) for chunk in chunks)
    return entered, recalls, (await graph.aget_state(config)).values


@pytest.mark.parametrize(
    ("context", "recalls"),
    [
        (dict(memory=False), 0),
        (dict(memory=True, recall="off"), 0),
        (dict(memory=True, recall="task"), 1),
        (dict(memory=True, recall="step"), None),  # one per executed step
    ],
)
async def test_nodes_with_nothing_to_do_are_not_entered(tmp_path, context, recalls):
    """Each node entered costs a checkpoint: recall is no node of its own (the actor's entry recalls
    first, only where it can find something), the lesson nodes run only with memory on; the run's
    outcome is the same either way.
    """
    entered, recalled, final = await _entered_and_recalls(tmp_path, **context)
    executed = final["counters"]["executed"]
    assert final["status"] == "success" and executed >= 3
    assert "recall" not in entered
    if recalls is None:  # one per new situation: a step where the last one's lessons still hold recalls none
        assert 1 <= recalled <= executed
        assert final["recall_key"].startswith(final["run_id"])
    else:
        assert recalled == recalls
    lesson_nodes = ["distill", "gate", "memory_writer"]  # dedup is part of distill's entry: no node of its own
    assert [n for n in entered if n in lesson_nodes] == (lesson_nodes if context["memory"] else [])
    assert "dedup" not in entered
    if context["memory"]:  # the gate got candidates already matched against the store
        assert final["candidates"] and all("similarity" in c and "verdict" in c for c in final["candidates"])
    assert entered[0] == "start" and entered[-1] == "respond"


async def test_a_run_that_distills_nothing_passes_dedup_and_the_gate_by(tmp_path):
    """No candidate: dedup and the gate would do nothing at a checkpoint each; the writer still runs
    (it counts the run in its family's record and scores the lessons it recalled).
    """
    entered, final = await _entered(tmp_path, memory=True, lesson_model="sim:invalid=1")
    assert final["status"] == "success" and not final.get("candidates")
    assert [n for n in entered if n in ("distill", "dedup", "gate", "memory_writer")] == ["distill", "memory_writer"]
    assert "similarity" not in str(final.get("candidates"))  # nothing to match: dedup's part did not run


def test_step_recall_is_entered_again_only_in_a_new_situation_or_run():
    """The lessons in state answer the situation they were recalled for: a step still in it
    costs no query and no checkpoint; a new situation, or a new run of the thread, recalls again.
    """
    context = Context(model="sim", memory=True, recall="step")
    state = {"run_id": "r1", "observation": "a dark corridor\n#####"}
    assert wanted(state, context)
    state["recall_key"] = recall_key(state)
    assert not wanted(state, context) and not wanted({**state, "observation": "a dark corridor\n#.###"}, context)
    assert wanted({**state, "observation": "a locked door\n#####"}, context)
    assert wanted({**state, "run_id": "r2"}, context)
    assert not wanted(state, Context(model="sim", memory=False, recall="step"))


def test_task_recall_is_asked_once_per_run_even_when_its_first_proposal_is_sent_back():
    """Recall is part of the actor's entry, which a critic's send-back enters again at the same step:
    task-start recall asks once per run (and again for the thread's next turn), never per proposal.
    """
    context = Context(model="sim", memory=True, recall="task")
    state = {"run_id": "r1", "observation": "a dark corridor"}
    assert wanted(state, context)
    state["recall_key"] = recall_key(state, context)
    assert not wanted(state, context) and not wanted({**state, "observation": "a locked door"}, context)
    assert wanted({**state, "run_id": "r2"}, context)
    assert not wanted({"run_id": "r3", "observation": "a dark corridor", "trajectory": [{}]}, context)


async def test_a_joined_entry_runs_each_wanted_part_on_the_state_the_one_before_left():
    """graphs/builder.py `_joined`: the second part reads the first one's writes, and the entry's
    update holds both, their counters added up (LangGraph adds them to the run's, once).
    """
    from types import SimpleNamespace

    from pivotal.graphs.builder import _joined

    async def recalls(state, runtime):
        return {"lessons": ["l1"], "counters": {"lessons_retired": 1}}

    async def proposes(state, runtime):
        assert state["lessons"] == ["l1"] and state["counters"] == {"executed": 2, "lessons_retired": 1}
        return {"proposal": {"action": "up"}, "counters": {"replayed": 0, "lessons_retired": 0}}

    runtime = SimpleNamespace(context=Context(model="sim"))
    state = {"run_id": "r", "lessons": [], "counters": {"executed": 2}}
    joined = _joined(("recall", recalls, lambda s, c: True), ("actor", proposes, None))
    assert await joined(state, runtime) == {
        "lessons": ["l1"],
        "proposal": {"action": "up"},
        "counters": {"lessons_retired": 1, "replayed": 0},
    }

    async def proposes_alone(state, runtime):
        return {"proposal": {"action": "up"}, "counters": {"replayed": 0}}

    skipped = _joined(("recall", recalls, lambda s, c: False), ("actor", proposes_alone, None))
    assert await skipped(state, runtime) == {"proposal": {"action": "up"}, "counters": {"replayed": 0}}
