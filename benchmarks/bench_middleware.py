"""The same support-desk tickets through LangChain's `create_agent` alone, with the critic
middleware, with the critic and memory middleware, and through the Pivotal graph, with `sim`
models at fixed error rates.

    python benchmarks/bench_middleware.py            # 2 error rates x 16 tickets x 4 setups, ~1-2 min
    python benchmarks/bench_middleware.py --tickets 4

The desk (pivotal.testing.ledger_env) has a verifier and an oracle: a ticket succeeds when the
customer got exactly one full refund and a confirmation email; a tool call is harmful or wrong when
the oracle judged it not the next good step at the moment it ran (a second refund, a wrong amount,
an email before the refund). The agent's model is a `sim` stand-in too: it takes the oracle's step,
or at the error rate a plausible wrong one, and proposes again after a send-back. `sim` errors are
synthetic (an oracle wrong at an injected rate, not a real model): the table compares the layers'
mechanics and costs, not how a real model would fare.
"""

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError

from pivotal import Context, PivotalCritic, PivotalMemory, Task, arun, register_environment
from pivotal.middleware import critic_counts
from pivotal.middleware.critic import STOP
from pivotal.testing.ledger_env import SupportDesk
from pivotal.testing.scripted import stepping_tools

SETUPS = ("create_agent", "+ critic", "+ critic + memory", "Pivotal graph")
LIMIT = 40
"""LangGraph steps per agent run (create_agent's recursion limit): a looping model fails the ticket."""


class JudgedDesk(SupportDesk):
    """The desk, with the oracle's judgement of each call recorded just before it runs."""

    made: list["JudgedDesk"] = []

    def __init__(self) -> None:
        super().__init__()
        self.judged: list[str] = []
        JudgedDesk.made.append(self)

    def step(self, name: str, arguments: dict[str, Any]) -> Any:
        self.judged.append(self.judge(name, arguments)[0] if name in self.tools else "poor")
        return super().step(name, arguments)

    def success(self) -> bool:
        return bool(self.verifier and self.verifier(self.task, self.calls))  # type: ignore[arg-type]


register_environment("support-desk-judged", JudgedDesk)


class DeskAgentModel(BaseChatModel):
    """The agent's model: the oracle's next step, or at `error` a plausible wrong one."""

    desk: Any
    error: float = 0.0
    seed: int = 0
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "bench-desk-agent"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        prompt = "\n".join(str(m.content) for m in messages)
        if self.desk.success() or _ended(messages):
            reply = AIMessage("The refund is done and the customer has been told.")
        else:
            rng = random.Random(hashlib.sha256(f"{self.seed}|{self.calls}".encode()).digest())
            name, args = _wrong(self.desk, rng) if rng.random() < self.error else self.desk.expert_action()
            reply = AIMessage(
                "", tool_calls=[{"name": name, "args": args, "id": uuid.uuid4().hex[:12], "type": "tool_call"}]
            )
        out = len(json.dumps([c["args"] for c in reply.tool_calls]) if reply.tool_calls else reply.text)
        reply.usage_metadata = {
            "input_tokens": len(prompt) // 4,
            "output_tokens": out // 4,
            "total_tokens": (len(prompt) + out) // 4,
        }
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _ended(messages: list[BaseMessage]) -> bool:
    last = messages[-1] if messages else None
    return isinstance(last, ToolMessage) and STOP in str(last.content)


def _wrong(desk: SupportDesk, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Mistakes a model makes at a desk: pay again, pay the wrong amount, email too soon, undo a good refund."""
    order = desk.order
    return rng.choice(
        [
            ("refund", {"order_id": order, "amount": desk.amount}),
            ("refund", {"order_id": order, "amount": round(desk.amount * 2, 2)}),
            ("send_email", {"order_id": order, "text": "Your refund is on its way."}),
            ("reverse_refund", {"order_id": order, "amount": desk.amount}),
        ]
    )


def _ticket(index: int) -> Task:
    params = {"order": f"A{index}", "amount": 10.0 + index, "mistake": "email" if index % 2 else ""}
    return Task(goal=JudgedDesk.default_goal.replace("A1", f"A{index}"), env="support-desk-judged", params=params)


async def _agent_run(setup: str, task: Task, error: float, seed: int, store: str) -> dict[str, Any]:
    desk = JudgedDesk()
    intro = desk.reset(task)
    model = DeskAgentModel(desk=desk, error=error, seed=seed)
    middleware: list[Any] = []
    if setup != "create_agent":
        middleware.append(PivotalCritic(f"sim:error={error},seed={seed}", environment=desk))
    if setup == "+ critic + memory":
        middleware.insert(0, PivotalMemory(f"sim:error={error},seed={seed}", family="desk", store_path=store,
                                           outcome=lambda state: desk.success()))  # fmt: skip
    agent = create_agent(model, stepping_tools(desk), middleware=middleware)
    started = time.perf_counter()
    try:
        state = await agent.ainvoke({"messages": [("user", f"{task.goal}\n{intro}")]}, {"recursion_limit": LIMIT})
    except GraphRecursionError:
        state = {}
    wall = time.perf_counter() - started
    critic = critic_counts(state)
    memory = state.get("pivotal_memory") or {}
    usage = [critic["usage"], memory.get("usage") or {}]
    role_tokens = sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for part in usage for u in part.values())
    agent_tokens = sum(
        (m.usage_metadata or {}).get("total_tokens", 0) for m in state.get("messages", []) if isinstance(m, AIMessage)
    )
    calls = model.calls + critic["counters"].get("llm_calls", 0) + (memory.get("counters") or {}).get("llm_calls", 0)
    return _row(desk, calls, role_tokens + agent_tokens, wall)


async def _graph_run(task: Task, error: float, seed: int) -> dict[str, Any]:
    JudgedDesk.made.clear()
    context = Context(model=f"sim:error={error},seed={seed}", memory=False, max_steps=12, max_pivot_retries=1)
    result = await arun(task, context, checkpointer=InMemorySaver())
    desk = JudgedDesk.made[-1]
    tokens = sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in result.usage.values())
    return _row(desk, result.llm_calls, tokens, result.wall_s)


def _row(desk: JudgedDesk, calls: int, tokens: float, wall: float) -> dict[str, Any]:
    return {"success": desk.success(), "harmful": sum(j != "good" for j in desk.judged), "executed": len(desk.judged),
            "llm_calls": calls, "tokens": tokens, "wall_s": wall}  # fmt: skip


async def main(tickets: int, errors: list[float]) -> None:
    rows: dict[tuple[float, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for error in errors:
            for index in range(tickets):
                task = _ticket(index + 1)
                for setup in SETUPS:
                    ledger = str(folder / f"ledger-{uuid.uuid4().hex[:8]}.jsonl")
                    fresh = task.model_copy(update={"params": {**task.params, "ledger": ledger}})
                    if setup == "Pivotal graph":
                        row = await _graph_run(fresh, error, index)
                    else:
                        row = await _agent_run(setup, fresh, error, index, str(folder / f"lessons-{error}"))
                    rows.setdefault((error, setup), []).append(row)
    print(f"{tickets} support-desk tickets per row; harmful: calls run that the oracle judged not the next good step")
    print("| error | setup | success | harmful/wrong calls run | calls run | LLM calls | tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for (error, setup), runs in rows.items():
        n = len(runs)
        total = {
            key: sum(float(r[key]) for r in runs) for key in ("harmful", "executed", "llm_calls", "tokens", "wall_s")
        }
        cells = [str(error), setup, f"{sum(r['success'] for r in runs)}/{n}", f"{total['harmful']:.0f}"]
        cells += [f"{total['executed']:.0f}", f"{total['llm_calls'] / n:.1f}", f"{total['tokens'] / n:.0f}"]
        print("| " + " | ".join([*cells, f"{total['wall_s'] / n:.3f}"]) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=16)
    parser.add_argument("--errors", default="0.1,0.3")
    args = parser.parse_args()
    asyncio.run(main(args.tickets, [float(e) for e in args.errors.split(",")]))
    sys.exit(0)
