"""`create_pivotal_agent`: an application's model and tools in, a compiled graph out.

In the style of LangGraph's prebuilt agents: the tools become the environment (no tool is ever
run twice, see docs/side-effects.md), and without a verifier the actor ends the
task with `finish(answer)`, which the critic reviews before it counts.
"""

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment, Undo, Verifier
from pivotal.graphs.builder import build_graph


def create_pivotal_agent(
    model: str | BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    verifier: Verifier | None = None,
    irreversible: Sequence[str] = (),
    compensations: Mapping[str, Undo] | None = None,
    critic_model: str | BaseChatModel = "",
    intro: str = "",
    name: str = "",
    checkpointer: BaseCheckpointSaver | None = None,
    store: BaseStore | None = None,
    **context: Any,
) -> Any:
    """A compiled graph that works `{"messages": [...]}` or `{"task": "goal"}` with these tools.

    `name` registers the tools as an environment of that name (default: a new unique one), so
    the CLI, batches and Studio can name it too. `context` holds any other `Context` field
    (`max_steps`, `require_approval_for`, `memory`, `store_path`, ...); a caller's `context=`
    replaces the agent's Context whole. `store`: a LangGraph store the lessons then live in
    (docs/experience-store.md, LangGraph stores).
    """
    env = name or f"agent-{uuid.uuid4().hex[:8]}"
    tool_list = list(tools)
    ToolEnvironment(tool_list, verifier, irreversible=irreversible, compensations=compensations)  # fail fast
    register_environment(env, lambda: ToolEnvironment(tool_list, verifier, intro=intro, irreversible=irreversible,
                                                      compensations=compensations))  # fmt: skip
    defaults = Context(model=model, critic_model=critic_model, default_env=env, **context)
    return build_graph(checkpointer=checkpointer, context=defaults, name=env, store=store)
