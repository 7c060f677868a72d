"""A support desk whose tools change the real world: every refund, reversal and email is a line
in a ledger file (the task's `ledger` param). The ledger is how tests count, from the world's
side, that no side effect ever ran twice because Pivotal retried, resumed or forked.

Registered as `support-desk` (no way back: retries go forward), `support-desk-saga` (`refund`
names `reverse_refund` as its compensation), `support-desk-once` (acts once per idempotency
key, like a payment API) and `support-desk-forgetful` (its models re-propose the refund after a
bounce). Task params: `ledger` (path), `order`, `amount`, `mistake`
(`email`: the first email bounces; `refund`: the first refund goes to a closed card, which the
customer reports when the email arrives), `slow_refund` (seconds the refund tool waits after
paying, so a test can kill the process mid-step). The CLI loads it with `--plugin pivotal.testing.ledger_env`.
"""

import json
import os
import time
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool

from pivotal.core.environments import StepResult, register_environment
from pivotal.core.environments.tools import Call, ToolEnvironment
from pivotal.core.task import Task

CLOSED_CARD = "card ending 0000 (closed)"
BOUNCED = "bounced: no such mailbox"


class SupportDesk(ToolEnvironment):
    default_goal = "Refund order A1 in full, then email the customer that the refund is on its way."

    def __init__(self, compensate: bool = False) -> None:
        self.key = ""
        tools = [
            StructuredTool.from_function(
                self._lookup_order, name="lookup_order", description="Look up an order's total and customer."
            ),
            StructuredTool.from_function(
                self._refund, name="refund", description="Refund an amount of an order to the customer's card."
            ),
            StructuredTool.from_function(
                self._reverse_refund, name="reverse_refund", description="Reverse an earlier refund of an order."
            ),
            StructuredTool.from_function(
                self._send_email, name="send_email", description="Email the customer of an order."
            ),
        ]
        super().__init__(
            tools,
            self._verify,
            irreversible=["refund"],
            compensations={"refund": "reverse_refund"} if compensate else None,
        )

    def reset(self, task: Task) -> str:
        self.ledger = Path(task.params["ledger"])
        self.order = str(task.params.get("order", "A1"))
        self.amount = float(task.params.get("amount", 20.0))
        self.mistake = str(task.params.get("mistake", ""))
        self.slow = float(task.params.get("slow_refund", 0))
        super().reset(task)
        return f"Ticket: the customer of order {self.order} asks for a full refund and a confirmation email."

    # --- the world: a ledger file ---------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def _write(self, **entry: Any) -> None:
        with self.ledger.open("a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({**entry, "key": self.key, "pid": os.getpid()}) + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())

    def active_refunds(self) -> list[dict[str, Any]]:
        """Refunds still paid out, each with the amount left of it: a reversal takes from the newest,
        and only a whole one undoes it (a partial reversal leaves the rest paid, as a payment API does).
        """
        active: list[dict[str, Any]] = []
        for entry in self.entries():
            if entry["kind"] == "refund":
                active.append(dict(entry))
            elif entry["kind"] == "reversal" and active:
                active[-1]["amount"] = round(active[-1]["amount"] + entry["amount"], 2)
                if active[-1]["amount"] <= 0:
                    active.pop()
        return active

    # --- tools ----------------------------------------------------------------------------
    def _lookup_order(self, order_id: str) -> str:
        return f"order {order_id}: total {self.amount:.2f}, customer ann@example.com"

    def _refund(self, order_id: str, amount: float) -> str:
        amount = round(amount, 2)  # money: cents, as a payment API takes it
        if amount <= 0:
            return f"refused: a refund must be a positive amount, not {amount:.2f}"
        first = not any(e["kind"] == "refund" for e in self.entries())
        card = CLOSED_CARD if first and self.mistake == "refund" else "card ending 4242"
        output = f"refunded {amount:.2f} of {order_id} to {card}"
        self._write(kind="refund", order=order_id, amount=amount, card=card, output=output)
        time.sleep(self.slow)
        return output

    def _reverse_refund(self, order_id: str, amount: float) -> str:
        active = self.active_refunds()
        if not active:
            return f"no refund of {order_id} to reverse"
        amount = min(round(amount, 2), active[-1]["amount"])
        if amount <= 0:
            return f"refused: a reversal must be a positive amount, not {amount:.2f}"
        output = f"reversed the refund of {amount:.2f} of {order_id}"
        self._write(kind="reversal", order=order_id, amount=-amount, output=output)
        return output

    def _send_email(self, order_id: str, text: str) -> str:
        first = not any(e["kind"] == "email" for e in self.entries())
        bounced = first and self.mistake == "email"
        if bounced:
            output = BOUNCED
        elif any(refund["card"] == CLOSED_CARD for refund in self.active_refunds()):
            output = f"sent; the customer replies: the refund went to a {CLOSED_CARD}, I never got it"
        else:
            output = "sent; the customer replies: thank you"
        self._write(kind="email", order=order_id, text=text, bounced=bounced, output=output)
        return output

    def _verify(self, task: Task, calls: list[Call]) -> bool | None:
        if not calls or calls[-1]["tool"] != "send_email":
            return None
        active = self.active_refunds()
        return calls[-1]["output"].endswith("thank you") and len(active) == 1 and active[0]["amount"] == self.amount

    # --- Oracle (the sim models' ground truth) ----------------------------------------------
    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        if not any(c["tool"] == "lookup_order" for c in self.calls):
            return "lookup_order", {"order_id": self.order}
        active = self.active_refunds()
        complained = any(CLOSED_CARD in c["output"] and c["tool"] == "send_email" for c in self.calls)
        if active and complained and active[-1]["card"] == CLOSED_CARD:
            return "reverse_refund", {"order_id": self.order, "amount": self.amount}
        if not active:
            return "refund", {"order_id": self.order, "amount": self.amount}
        if len(active) > 1 or active[0]["amount"] != self.amount:  # paid twice, or in part: undo the newest
            return "reverse_refund", {"order_id": self.order, "amount": active[-1]["amount"]}
        return "send_email", {"order_id": self.order, "text": f"Your refund of {self.amount:.2f} is on its way."}

    def judge(self, name: str, arguments: dict[str, Any]) -> tuple[str, str]:
        if (name, arguments) == self.expert_action():
            return "good", f"{name} is the next step of the refund"
        if name == "refund" and self.active_refunds():
            return "fatal", f"{self.order} is already refunded: a second refund pays the customer twice"
        active = self.active_refunds()
        if name == "reverse_refund" and active and arguments.get("amount") == active[-1]["amount"]:
            return "good", f"reversing the refund of {self.order} undoes it"
        return "poor", f"{name} does not advance the refund"

    def first_mistake(self, actions: list[tuple[str, dict[str, Any]]]) -> tuple[int, str]:
        for index, call in enumerate(self.calls):
            if CLOSED_CARD in call["output"] and call["tool"] == "refund":
                return index, "the refund went to a closed card"
            if call["output"] == BOUNCED:
                return index, "the email went to a mailbox that does not exist"
        return max(len(self.calls) - 1, 0), "the ticket is not resolved"


class OnceSupportDesk(SupportDesk):
    """Acts once per idempotency key: a repeated key gets the first outcome back, as payment APIs do."""

    def step_once(self, key: str, name: str, arguments: dict[str, Any]) -> StepResult:
        self.key = key
        done = [entry for entry in self.entries() if entry["key"] == key and entry["kind"] != "repeat"]
        if done:  # the step was in flight when the process died: answer as the first time, act no more
            self._write(kind="repeat", of=done[0]["kind"], output=done[0]["output"])
            return self.record({"tool": name, "arguments": arguments, "error": "", "output": done[0]["output"]})
        return self.step(name, arguments)


class ForgetfulDesk(SupportDesk):
    """An agent that forgets a refund once the email bounced: its actor proposes the same refund
    again and its critic approves it (an LLM pair seen doing so, five refunds in a row). Only the
    guard before the critic stops the repeat.
    """

    def expert_action(self) -> tuple[str, dict[str, Any]] | None:
        if self.calls and self.calls[-1]["output"] == BOUNCED:
            return "refund", {"order_id": self.order, "amount": self.amount}
        return super().expert_action()


register_environment("support-desk", SupportDesk)
register_environment("support-desk-saga", lambda: SupportDesk(compensate=True))
register_environment("support-desk-once", OnceSupportDesk)
register_environment("support-desk-forgetful", ForgetfulDesk)
