"""The application's own tools, in a module called nodes (as many agent apps do)."""

import json
import os

from langchain_core.tools import tool

import memory


def _ledger(entry: dict) -> None:
    with open(os.environ["APP_LEDGER"], "a") as file:
        file.write(json.dumps(entry) + "\n")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status and amount."""
    return f"order {order_id}: delivered, 25.00"


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    _ledger({"tool": "refund", "order_id": order_id, "amount": amount})
    memory.remember(f"refunded {order_id}")
    return f"refunded {amount:.2f} on order {order_id}"
