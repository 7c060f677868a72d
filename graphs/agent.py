"""`create_pivotal_agent`: an application's model and tools in, a compiled graph out.

In the style of LangGraph's prebuilt agents: the tools become the environment (no tool is ever
run twice, see docs/side-effects.md), and without a verifier the actor ends the
task with `finish(answer)`, which the critic reviews before it counts.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.store.base import BaseStore

from pivotal.core.context import Context
from pivotal.core.environments import register_environment
from pivotal.core.environments.tools import ToolEnvironment, ToolLike, Undo, Verifier, as_tools
from pivotal.core.errors import PivotalError
from pivotal.graphs.builder import build_graph


def create_pivotal_agent(
    model: str | BaseChatModel,
    tools: Sequence[ToolLike],
    *,
    verifier: Verifier | None = None,
    irreversible: Sequence[str] = (),
    compensations: Mapping[str, Undo] | None = None,
    repeatable: Sequence[str] = (),
    once_keys: Mapping[str, Sequence[str]] | None = None,
    critic_model: str | BaseChatModel = "",
    intro: str = "",
    name: str = "",
    checkpointer: BaseCheckpointSaver | None = None,
    store: BaseStore | None = None,
    **context: Any,
) -> Any:
    """A compiled graph that works `{"messages": [...]}` or `{"task": "goal"}` with these tools.

    `name` registers the tools as an environment of that name, so the CLI, batches and Studio
    can name it too; without one the name is `agent-<hash>` of the tools and how they are used,
    the same in every process that builds the same agent, so a thread resumes anywhere.
    `context` holds any other `Context` field (`max_steps`, `require_approval_for`, `memory`,
    `store_path`, ...); a caller's `context={...}` (Studio, the SDK) overrides only the keys it
    names, a whole `Context(...)` replaces the agent's. `store`: a LangGraph store the lessons then
    live in (docs/experience-store.md, LangGraph stores). `repeatable` and `once_keys` say which
    irreversible tools may repeat and what makes two calls the same (docs/side-effects.md). A name in
    any of these safety settings that is not one of the tools is refused here, naming the closest.
    `tools` may be LangChain tools or plain functions, converted as LangChain's `create_agent` does.
    """
    if isinstance(context.get("context"), Context):  # build_graph's way; here the fields are keywords
        raise PivotalError(
            "create_pivotal_agent takes Context fields as keyword arguments, not context=Context(...): "
            "create_pivotal_agent(model, tools, require_approval_for=[...], max_steps=..., ...)"
        )
    tool_list = as_tools(tools)  # plain functions become tools as create_agent makes them
    once = {"repeatable": sorted(repeatable), "once_keys": {k: list(v) for k, v in sorted((once_keys or {}).items())}}
    env = name or stable_name(tool_list, verifier, irreversible, compensations, intro, once)

    def environment() -> ToolEnvironment:
        return ToolEnvironment(tool_list, verifier, intro=intro, irreversible=irreversible,
                               compensations=compensations, repeatable=repeatable, once_keys=once_keys)  # fmt: skip

    environment()  # fail fast: unknown names, a clash
    defaults = Context(model=model, critic_model=critic_model, default_env=env, **context)
    register_environment(env, environment)  # build_graph checks require_approval_for against it
    return build_graph(checkpointer=checkpointer, context=defaults, name=env, store=store)


def stable_name(
    tools: list[BaseTool],
    verifier: Verifier | None,
    irreversible: Sequence[str],
    compensations: Mapping[str, Undo] | None,
    intro: str,
    once: Mapping[str, Any] | None = None,
) -> str:
    """An unnamed agent's environment name: the same app code gives the same name in every
    process (a thread saved in one resumes in another), different tools a different one.
    """
    described = {
        "tools": [[tool.name, tool.description, tool.args] for tool in tools],
        "verifier": _qualified(verifier),
        "irreversible": sorted(irreversible),
        "compensations": {key: _qualified(undo) for key, undo in sorted((compensations or {}).items())},
        "intro": intro,
        # only when given: an agent without them keeps the name it had before they existed
        **({"once": once} if once and any(once.values()) else {}),
    }
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()
    return f"agent-{digest[:12]}"


def _qualified(function: object) -> str | None:
    if function is None or isinstance(function, str):
        return function
    return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', type(function).__name__)}"
