"""Optional checks against the real hosted APIs; skipped unless their keys are set."""

import os

import pytest

from pivotal.core.context import Context
from pivotal.graphs import arun

LIVE = {
    "openai": ("OPENAI_API_KEY", os.environ.get("PIVOTAL_LIVE_OPENAI_MODEL", "openai:gpt-4o-mini")),
    "anthropic": ("ANTHROPIC_API_KEY", os.environ.get("PIVOTAL_LIVE_ANTHROPIC_MODEL", "anthropic:claude-haiku-4-5")),
}


@pytest.mark.live
@pytest.mark.parametrize("provider", sorted(LIVE))
async def test_hosted_model_runs_a_gridworld_task(provider):
    variable, spec = LIVE[provider]
    if not os.environ.get(variable):
        pytest.skip(f"{variable} is not set")
    result = await arun(
        {"env": "gridworld", "params": {"seed": 1, "size": 4}},
        Context(model=spec, memory=False, max_steps=10, max_pivot_retries=1),
        checkpoint_path=":memory:",
    )
    assert result.status in ("success", "failure") and result.reason
    assert result.usage["actor"]["input_tokens"] > 0 and result.usage["actor"]["fallbacks"] == 0
