"""A support desk on Pivotal: the application's own tools, no verifier, a person approves refunds.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=... python examples/support_desk.py "Refund order A1"

The agent ends the task itself with `finish(answer)`; the critic reviews that answer like any
action, so the outcome is marked unverified. Refunds are irreversible: each one waits for a
person (`require_approval_for`), and no refund ever runs twice, whatever is retried or resumed.
The ledger of refunds and emails is a JSON-lines file ($SUPPORT_LEDGER).
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import tool

from pivotal import create_pivotal_agent

ORDERS = {"A1": {"total": 20.0, "customer": "ann@example.com"}, "B2": {"total": 35.5, "customer": "bo@example.com"}}


def _ledger() -> Path:
    return Path(os.environ.get("SUPPORT_LEDGER", "support-ledger.jsonl"))


def _write(entry: dict[str, Any]) -> None:
    with _ledger().open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(entry) + "\n")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's total and the customer's email address."""
    order = ORDERS.get(order_id)
    return json.dumps({"order_id": order_id, **order}) if order else f"no order {order_id!r}"


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an amount of an order to the customer's card. Cannot be undone."""
    if order_id not in ORDERS or amount > ORDERS[order_id]["total"]:
        raise ValueError(f"cannot refund {amount} of {order_id!r}")
    _write({"kind": "refund", "order_id": order_id, "amount": amount})
    return f"refunded {amount:.2f} of {order_id}"


@tool
def send_email(order_id: str, text: str) -> str:
    """Email the customer of an order."""
    _write({"kind": "email", "order_id": order_id, "text": text})
    return f"emailed the customer of {order_id}"


def support_agent(model: str | BaseChatModel, **context: Any) -> Any:
    """The desk's graph: refunds wait for a person unless `require_approval_for` says otherwise."""
    settings = {"require_approval_for": ["refund"], "max_steps": 8, "max_pivot_retries": 1, **context}
    return create_pivotal_agent(model, [lookup_order, refund, send_email], irreversible=["refund"],
                                name="support-desk-example", **settings)  # fmt: skip


if __name__ == "__main__":
    import asyncio
    import uuid

    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    async def main(question: str) -> None:
        model = os.environ.get("SUPPORT_MODEL", "openai:gpt-4o-mini")
        agent = support_agent(model, memory=False, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        result = await agent.ainvoke({"messages": [HumanMessage(question)]}, config)
        while result.get("__interrupt__"):
            pending = result["__interrupt__"][0].value
            answer = input(f"approve {pending['action']} {pending['arguments']}? [y/N] ").strip().lower()
            result = await agent.ainvoke(Command(resume="approve" if answer in ("y", "yes") else "reject"), config)
        print(result["messages"][-1].content)

    asyncio.run(main(" ".join(sys.argv[1:]) or "Please refund order A1 in full and tell the customer."))
