"""The promise suite's application: a support desk whose three tools write every call to a ledger
file, and a clerk who works its tickets the way a capable model would.

The ledger is the world: tests count refunds and emails from it, never from Pivotal's results.
The clerk is one policy behind two faces, so every surface is driven by the same behaviour: a
responder for the loopback OpenAI-compatible server (the graph's actor and critic, through a real
`ChatOpenAI`) and a chat model that calls tools (a `create_agent` agent's own model).
"""

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from pivotal.core.models.choice import ToolChoice, ToolLike
from pivotal.testing.loopback_provider import generic_responder

TOTAL = 20.0
CUSTOMER = "ann@example.com"
REPEATED = "already ran"
"""What the once-guard's refusal says, on every surface: the clerk takes the repeat as done."""


def desk_tools(
    ledger: Path, note: str = "", failures: Mapping[str, int] | None = None, answer_errors: bool = False
) -> list[BaseTool]:
    """`lookup_order`, the irreversible `refund` and `send_email`, each appending one line to `ledger`.
    `note`: text the order lookup returns (a tool output the checkpoints must not keep, when secret).
    `failures`: tools that raise (ToolException, the world unchanged) their first n calls;
    `answer_errors`: a raised error becomes the tool's error answer, as a `create_agent` app sets it up.
    """
    left = dict(failures or {})

    def write(kind: str, **entry: Any) -> None:
        tool = {"lookup": "lookup_order", "email": "send_email"}.get(kind, kind)
        if left.get(tool, 0) > 0:
            left[tool] -= 1
            raise ToolException(f"{tool} failed: the service is down")
        with ledger.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"kind": kind, **entry}) + "\n")

    def lookup_order(order_id: str) -> str:
        write("lookup", order_id=order_id)
        return f"order {order_id}: total {TOTAL:.2f}, customer {CUSTOMER}" + (f", note: {note}" if note else "")

    def refund(order_id: str, amount: float) -> str:
        write("refund", order_id=order_id, amount=amount)
        if (gate := _held.get(str(ledger))) is not None:
            gate.wait(60)  # made, and still running: a turn another message meets (`refunds_held`)
        return f"refunded {amount:.2f} of {order_id}"

    def send_email(to: str, body: str) -> str:
        write("email", to=to, body=body)
        return f"emailed {to}"

    tools: list[BaseTool] = [
        StructuredTool.from_function(lookup_order, description="Look up an order's total and its customer."),
        StructuredTool.from_function(refund, description="Refund an amount of an order. Cannot be undone."),
        StructuredTool.from_function(send_email, description="Email a customer."),
    ]
    for each in tools:
        each.handle_tool_error = answer_errors
    return tools


@contextmanager
def refunds_held(ledger: Path) -> Iterator[threading.Event]:
    """Inside, each refund written to `ledger` is made and then held, still running, until the event
    is set: so a second message can arrive while a turn runs (the double-text promise).
    """
    gate = _held[str(ledger)] = threading.Event()
    try:
        yield gate
    finally:
        gate.set()
        _held.pop(str(ledger), None)


_held: dict[str, threading.Event] = {}


def ledger_kinds(ledger: Path) -> list[str]:
    """What happened to the world, in order: one kind per tool call that ran."""
    if not ledger.exists():
        return []
    return [json.loads(line)["kind"] for line in ledger.read_text().splitlines() if line.strip()]


def next_call(goal: str, done: list[str], seen: str, forgetful: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The clerk's next tool call for this turn, or None when the ticket is resolved.

    `done`: the tools that ran this turn, in order; `seen`: everything the clerk was shown (a refusal
    saying the refund already ran counts as done). `forgetful`: once the email went out it proposes
    the same refund again, as a model that lost track would.
    """
    found = re.search(r"order (\w\d)", goal)
    order = found.group(1) if found else "A1"
    steps: list[tuple[str, dict[str, Any]]] = [
        ("lookup_order", {"order_id": order}),
        ("refund", {"order_id": order, "amount": TOTAL}),
        ("send_email", {"to": CUSTOMER, "body": f"Your refund of {TOTAL:.2f} is on its way. Re: {goal}"}),
    ]
    for name, arguments in steps:
        if name not in done and not (name == "refund" and REPEATED in seen):
            return name, arguments
    if forgetful and done.count("refund") == 1 and REPEATED not in seen:
        return steps[1]
    return None


def clerk_responder(
    critic: str | Mapping[str, Mapping[str, Any]] = "approve", forgetful: bool = False
) -> Callable[..., dict[str, Any]]:
    """The loopback server's replies: the graph's actor works the ticket its prompt names; the critic
    approves (`critic="approve"`), turns every proposal down (`"reject"`), or gives per tool the verdict
    a mapping names (`{"send_email": {"decision": "reject", ...}}`; the others approved); other roles get filler.
    """

    def respond(schema_name: str, schema: dict[str, Any], messages: list[Any]) -> dict[str, Any]:
        prompt = "\n".join(str(m.get("content")) for m in messages)
        if schema_name == "Verdict" and critic == "reject":
            return {"decision": "reject", "confidence": 0.95, "diagnosis": "not allowed", "revision": "do not"}
        if schema_name == "Verdict" and isinstance(critic, Mapping):
            proposed = _between(prompt, "proposal").strip()
            named = next((dict(v) for name, v in critic.items() if proposed.startswith(f"{name}(")), None)
            if named is not None:
                return {"confidence": 0.95, "diagnosis": "scripted", "revision": "", **named}
        if schema_name != "Proposal":
            return generic_responder(schema_name, schema, messages)
        goal = _between(prompt, "task")
        progress = _between(prompt, "progress")
        done = [name for name in ("lookup_order", "refund", "send_email") for _ in range(progress.count(f":{name}("))]
        call = next_call(goal, done, prompt, forgetful)
        if call is None:
            return {"action": "finish", "arguments": {"answer": "Refunded and emailed."}, "thought": "resolved"}
        return {"action": call[0], "arguments": call[1], "thought": "the next step of the ticket"}

    return respond


def _between(prompt: str, tag: str) -> str:
    found = re.search(rf"<{tag}>(.*?)</{tag}>", prompt, re.S)
    return found.group(1) if found else ""


class ClerkChatModel(BaseChatModel):
    """A `create_agent` agent's model: one tool call per reply, chosen by `next_call` from this turn's
    messages (a failed tool result is not done); `calls` counts the replies it gave.
    """

    forgetful: bool = False
    calls: list[int] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "pivotal-clerk"

    def bind_tools(self, tools: Sequence[ToolLike], *, tool_choice: ToolChoice = None, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(len(messages))
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
        turn = messages[start:]
        done = [m.name or "" for m in turn if isinstance(m, ToolMessage) and m.status != "error"]
        seen = "\n".join(str(m.content) for m in turn)
        call = next_call(str(messages[start].content) if turn else "", done, seen, self.forgetful)
        if call is None:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("Refunded and emailed."))])
        tool_call = {"name": call[0], "args": call[1], "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[tool_call]))])


DELEGATED = "Delegated ticket: "
"""How the clerk's `task` description begins: the sub-agent's clerk knows its ticket by it."""


class DelegatingClerk(ClerkChatModel):
    """A Deep Agents agent's model: the main agent hands each ticket to the built-in general-purpose
    sub-agent (`task`), whose model, the same object, works it as `ClerkChatModel` does; once `task`
    answered, the main agent reports.
    """

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
        asked = str(messages[start].content) if messages else ""
        if asked.startswith(DELEGATED):
            return super()._generate(messages, stop, run_manager, **kwargs)
        self.calls.append(len(messages))
        answered = [m for m in messages[start:] if isinstance(m, ToolMessage) and m.name == "task"]
        if answered and answered[-1].status != "error":
            return ChatResult(generations=[ChatGeneration(message=AIMessage("The desk handled the ticket."))])
        args = {"description": f"{DELEGATED}{asked}", "subagent_type": "general-purpose"}
        tool_call = {"name": "task", "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[tool_call]))])


class DeskRoleModel(BaseChatModel):
    """The loopback server's clerk in process: each Pivotal role (the graph's actor, any face's critic)
    answers through `responder` (`clerk_responder(...)`) as a tool call, the way a provider's model
    gives structured output. Its replies follow from the prompt alone, so a replay or fork of a thread
    is proposed and judged as the first run was.
    """

    responder: Callable[..., dict[str, Any]] = Field(default_factory=clerk_responder, exclude=True)
    asked: list[str] = Field(default_factory=list)
    """The schema each call answered, in order."""

    @property
    def _llm_type(self) -> str:
        return "pivotal-desk-roles"

    def bind_tools(self, tools: Sequence[ToolLike], *, tool_choice: ToolChoice = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        function = (kwargs.get("tools") or [{}])[0].get("function") or {}
        name = function.get("name", "")
        self.asked.append(name)
        said = [{"role": m.type, "content": m.content} for m in messages]
        args = self.responder(name, function.get("parameters") or {}, said)
        call = {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])
