"""A call of a role's model (which model is `Context.model_for`'s answer), with the bookkeeping every
role call shares.
"""

import asyncio
import itertools
import weakref
from collections import OrderedDict
from dataclasses import replace
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel

from pivotal.core.context import Context, Role, model_label
from pivotal.core.models.factory import make_model
from pivotal.core.models.pools import rebound
from pivotal.core.models.structured import Answer, ask
from pivotal.core.models.world import World, given
from pivotal.core.secrets import redact, redact_tree, secret_values
from pivotal.core.state import Spent, State

T = TypeVar("T", bound=BaseModel)


async def ask_role(
    context: Context,
    state: State,
    role: Role,
    schema: type[T],
    *,
    system: str,
    user: str,
    fallback: T,
    metadata: dict[str, Any] | None = None,
    world: World | None = None,
) -> tuple[Answer[T], Spent]:
    """The answer, plus the counters/usage deltas the calling node returns. `world` is the run's
    environment, for models that answer from it (the `sim` models).
    """
    spec = context.model_for(role)
    silent = (state["run_id"], model_label(spec))
    if (earlier := _silent.get(silent)) is not None:
        return _not_asked(role, fallback, earlier)
    model = await _chat_model(spec, context)
    backup = await _chat_model(context.fallback_model, context) if context.fallback_model else None
    with given(world):
        answer = await ask(
            model,
            schema,
            [SystemMessage(system), HumanMessage(user)],
            role=role,
            backup=backup,
            fallback=fallback,
            retries=context.structured_retries,
            deadline=context.call_deadline,
            stream=context.stream_roles,
            metadata={"pivotal_run": state["run_id"], "pivotal_model": model_label(spec), **(metadata or {})},
        )
    if answer.timed_out:
        _remember_silent(silent, answer.error)
    return redacted(answer), _updates(role, answer.usage)


def redacted(answer: Answer[T]) -> Answer[T]:
    """The reply with secrets blanked: every role's reply enters the state here (thoughts, actions,
    critiques, reflections, lesson drafts), and a model echoes keys it read or was sent.
    """
    values = secret_values()
    return replace(
        answer,
        value=redact_tree(answer.value, values),
        error=redact(answer.error, values),
        said=redact(answer.said, values),
    )


def _updates(role: str, usage: dict[str, float]) -> Spent:
    return {"counters": {"llm_calls": usage["calls"], "fallbacks": usage["fallbacks"]}, "usage": {role: usage}}


_silent: "OrderedDict[tuple[str, str], str]" = OrderedDict()
"""(run id, model) pairs whose provider already let a call time out, with that call's error. A provider
that is silent stays silent for the seconds a run lasts: asking it again at every step and retry cost
a whole deadline each time (about 27 minutes for one task with the defaults of the time). So each
run waits for a silent provider once; the rest of its calls to that model fall back at once and the
run ends with that error as its reason. A new run, or the run resumed, asks again."""


def _remember_silent(key: tuple[str, str], error: str) -> None:
    _silent[key] = error
    while len(_silent) > 4096:
        _silent.popitem(last=False)


def _not_asked(role: str, fallback: T, earlier: str) -> tuple[Answer[T], Spent]:
    usage = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "seconds": 0.0, "fallbacks": 1}
    error = f"{earlier}; not asked again in this run"
    return Answer(fallback, fallback=True, error=error, usage=usage, timed_out=True), _updates(role, usage)


async def _chat_model(spec: str | BaseChatModel, context: Context) -> BaseChatModel:
    """An application's own model object on a pool for this loop; a spec string built once, off the loop (building
    can load weights), then taken straight from `_built`: no thread hand-off per call.
    """
    if isinstance(spec, BaseChatModel):
        return _on_this_loop(spec)
    key = (spec, context.local_threads, _loop_number())
    if (model := _built.get(key)) is None:
        if len(_built) > 64:  # one entry per event loop: scripts that call run() in a loop make many
            _built.clear()
        model = _built[key] = await asyncio.to_thread(make_model, *key)
    return model


_built: dict[tuple[str, int, int], BaseChatModel] = {}


def _on_this_loop(model: BaseChatModel) -> BaseChatModel:
    """The application's model object, as a copy with an HTTP pool for the running loop where its
    provider shares one pool across loops (core/models/pools.py); else the object itself.
    """
    key = (id(model), _loop_number())
    if (entry := _bound.get(key)) is None:
        if len(_bound) > 64:  # one entry per model and event loop
            _bound.clear()
        entry = _bound[key] = (model, rebound(model) or model)
    return entry[1]


_bound: dict[tuple[int, int], tuple[BaseChatModel, BaseChatModel]] = {}
"""The model is kept in the value so its id cannot be reused by another model while cached."""


def _loop_number() -> int:
    """The running event loop's own number, never given to another loop. Not `id(loop)`: a closed
    loop's id comes back for the next `asyncio.run`, which then got the model whose HTTP pool was
    bound to the closed loop, and its call failed with "Event loop is closed".
    """
    loop = asyncio.get_running_loop()
    if (number := _loops.get(loop)) is None:
        number = _loops[loop] = next(_numbers)
    return number


_loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int]" = weakref.WeakKeyDictionary()
_numbers = itertools.count(1)
