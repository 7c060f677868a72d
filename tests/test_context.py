"""Every Context switch changes what the run does, in the way its name says."""

import pytest

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.errors import PivotalError
from pivotal.graphs import arun
from pivotal.memory.policy.rules import NO_QUARANTINE
from pivotal.testing.envs import Vault

register_environment("vault", Vault)
GRID = {"env": "gridworld", "params": {"seed": 2}}
SHAKY = dict(model="sim:error=0.35,seed=4", max_steps=12)


async def run(task=GRID, **context):
    return await arun(task, Context(**{"memory": False, **context}), checkpoint_path=":memory:")


async def test_critic_off_makes_no_critic_calls():
    on, off = await run(**SHAKY), await run(critic=False, **SHAKY)
    assert on.usage["critic"]["calls"] > 0 and "critic" not in off.usage


async def test_precheck_off_sends_illegal_moves_to_the_llm_critic():
    off = await run(precheck=False, model="sim:error=0.5,seed=1", max_steps=12)
    on = await run(model="sim:error=0.5,seed=1", max_steps=12)
    assert off.critic["prechecked"] == 0 and on.critic["prechecked"] > 0


@pytest.mark.parametrize("retry", ["pivotal", "full", "none"])
async def test_retry_strategy_decides_what_is_kept(retry):
    result = await run(retry=retry, critic=False, **SHAKY)
    assert result.retries["strategy"] == retry
    if retry == "none":
        assert result.retries["count"] == 0 and result.status == "failure"
    elif retry == "full":
        assert result.retries["count"] >= 1 and result.retries["kept_steps"] == 0
    else:
        assert result.retries["kept_steps"] > 0


async def test_max_pivot_retries_bounds_the_retries():
    result = await run(retry="full", max_pivot_retries=1, critic=False, model="sim:error=0.6,seed=5", max_steps=6)
    assert result.retries["count"] <= 1


async def test_max_steps_bounds_each_attempt():
    # loop detection off: on, the maze's steps_to_goal ends the attempt after its first step (7 left, 1 of budget)
    result = await run(model="sim", max_steps=2, max_pivot_retries=0, loop_detection="off")
    assert result.status == "failure" and result.executed == 2
    assert "step budget of 2" in result.reason
    ended = await run(model="sim", max_steps=2, max_pivot_retries=0)
    assert ended.executed == 1 and ended.reason.startswith("the goal needs at least")


async def test_max_critique_rounds_bounds_proposals_per_step():
    result = await run(
        {"goal": "open the vault", "env": "vault"},
        actor_model="sim:error=1.0",
        critic_model="sim",
        max_critique_rounds=3,
        max_steps=2,
        max_pivot_retries=0,
    )
    assert all(len([v for v in s["verdicts"] if v["source"] != "precheck"]) <= 4 for s in result.trajectory)
    assert result.usage["critic"]["calls"] <= 2 * 4


async def test_structured_retries_then_fallback_on_malformed_replies():
    result = await run(model="sim:invalid=1.0", structured_retries=1, max_steps=2, max_pivot_retries=0)
    assert result.status == "failure"  # nothing valid was ever proposed, so nothing ran
    assert result.executed == 0
    assert result.usage["actor"]["calls"] == 2 * result.usage["actor"]["fallbacks"]
    assert result.usage["critic"]["calls"] == 0 if "critic" in result.usage else True


async def test_malformed_replies_are_re_asked_and_the_run_still_finishes():
    # a seeded sim run is a pure function of its prompts' data, reasons included: the critic's fallback
    # reason now names what failed, which redrew seed 1's later replies into a fallback the run could not pass
    result = await run(model="sim:invalid=0.3,seed=4", structured_retries=2, max_pivot_retries=0)
    assert result.status == "success"
    proposals = sum(len(step["verdicts"]) for step in result.trajectory)
    assert result.usage["actor"]["calls"] > proposals  # some proposals needed a re-ask


async def test_max_observation_chars_clips_what_the_prompts_see():
    result = await run(max_observation_chars=80, model="sim")
    assert all(len(step["observation"]) <= 80 for step in result.trajectory)


async def test_recall_off_and_task_mode(tmp_path):
    store = str(tmp_path / "store")
    await run(memory=True, store_path=store, critic=False, lesson_model="sim", **SHAKY, **NO_QUARANTINE)
    off = await run(memory=True, store_path=store, recall="off", model="sim")
    assert off.lessons["recalled"] == 0
    once = await run(memory=True, store_path=store, recall="task", model="sim")
    assert once.lessons["recalled"] >= 1
    assert len({tuple(step["lessons"]) for step in once.trajectory}) == 1  # found at the start, kept
    one = await run(memory=True, store_path=store, recall_k=1, model="sim")
    assert all(len(step["lessons"]) <= 1 for step in one.trajectory) and one.lessons["recalled"] >= 1
    strict = await run(memory=True, store_path=store, recall_min_similarity=0.99, model="sim")
    assert strict.lessons["recalled"] == 0


async def test_per_role_models_are_used_for_their_roles():
    result = await run(actor_model="sim:seed=1", critic_model="sim:seed=2", **SHAKY)
    assert result.status == "success" and {"actor", "critic"} <= set(result.usage)


def test_critic_veto_is_automatic_for_the_embedded_model_only():
    assert not Context(model="local").critic_has_veto()
    assert Context(model="sim").critic_has_veto()
    assert Context(model="local", critic_veto=True).critic_has_veto()


async def test_advisory_critic_keeps_the_veto_on_irreversible_actions():
    verdicts = []
    for seed in range(4):
        result = await run(
            {"goal": "open the vault", "env": "vault"},
            actor_model=f"sim:error=1.0,seed={seed}",
            critic_model="sim",
            critic_veto=False,
            max_critique_rounds=1,
            max_steps=2,
            max_pivot_retries=0,
        )
        verdicts += [v for s in result.trajectory for v in s["verdicts"]]
        assert "wipe_disk" not in Vault.executed
    wipe = {(v["decision"], v["source"]) for v in verdicts if v["action"] == "wipe_disk"}
    assert wipe == {("reject", "critic")}


async def test_advisory_critic_reject_of_a_reversible_action_becomes_a_revise():
    verdicts = []
    for seed in range(1, 9):  # the final paths of a few seeds, so some step met an advisory verdict
        result = await run(model=f"sim:error=0.5,seed={seed}", critic_veto=False, precheck=False, max_steps=12)
        verdicts += [v for s in result.trajectory for v in s["verdicts"]]
    advisory = [v for v in verdicts if v["source"] == "critic-advisory"]
    assert advisory and all(v["decision"] == "revise" for v in advisory)
    assert not [v for v in verdicts if v["decision"] == "reject" and v["source"] == "critic"]


def test_the_precheck_and_person_bounds_follow_the_critics_unless_set():
    assert Context(max_critique_rounds=1).precheck_bounces_allowed() == 1
    assert Context(max_critique_rounds=1).human_rejections_allowed() == 1
    own = Context(max_critique_rounds=1, max_precheck_bounces=4, max_human_rejections=3)
    assert (own.precheck_bounces_allowed(), own.human_rejections_allowed()) == (4, 3)


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_steps", 0),
        ("max_critique_rounds", -1),
        ("max_precheck_bounces", 0),
        ("max_human_rejections", -2),
        ("recall_k", 0),
        ("max_pivot_retries", -1),
        ("retry", "sometimes"),
        ("recall", "always"),
        ("recall_min_similarity", 2.0),
    ],
)
def test_bad_limits_and_choices_fail_with_one_clear_line(field, value):
    with pytest.raises(PivotalError) as error:
        Context(**{field: value})
    assert field in str(error.value) and "\n" not in str(error.value)


async def test_a_misspelt_context_key_is_refused_with_a_hint():
    from pivotal.graphs import build_graph

    with pytest.raises(PivotalError, match=r"unknown context key 'modle' \(did you mean 'model'\?\)"):
        await build_graph().ainvoke({"task": "Reach G."}, context={"modle": "sim"})
